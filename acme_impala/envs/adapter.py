"""gymnasium environments as dm_env environments, and batches of timesteps.

`GymnasiumToDMEnv` turns any `gymnasium.Env` with a `Box` observation space and a
`Discrete` action space into a `dm_env.Environment` whose rewards and discounts are
`np.float32` scalars matching the specs (Reverb rejects the float64 discounts that
`dm_env.termination`/`dm_env.truncation` would build).

`ObservationActionRewardWrapper` makes the observation
`OAR(observation, previous action int32[], previous reward float32[])`, as Acme's
IMPALA expects. `timestep_row` and `stack_timesteps` convert between K timesteps and
one batch of them ([K] step types, rewards, discounts; [K, ...] observations).
"""

from typing import Any, Dict, Optional, Sequence

import dm_env
from dm_env import specs
import gymnasium
import numpy as np
import tree

from acme.wrappers import observation_action_reward

def _spec_bound(bound: np.ndarray, dtype: np.dtype):
  """A Box bound as a scalar when it is uniform, so that specs print readably."""
  bound = np.asarray(bound)
  if bound.size and np.all(bound == bound.flat[0]):
    return dtype.type(bound.flat[0])
  return bound.astype(dtype)


def observation_spec_from_space(space: gymnasium.Space) -> specs.BoundedArray:
  if not isinstance(space, gymnasium.spaces.Box):
    raise TypeError(
        f'GymnasiumToDMEnv supports Box observation spaces only, got {space!r}.')
  dtype = np.dtype(space.dtype)
  if dtype == np.float64:
    # TF networks and Reverb tables in this project are float32; casting here keeps
    # every consumer of the spec consistent with what the environment emits.
    dtype = np.dtype(np.float32)
  elif dtype == np.bool_:
    # MinAtar's channels are bool; kept as uint8 0/1 so that observation
    # specs and arrays are numeric like every other environment's here (the
    # networks cast them to float32).
    dtype = np.dtype(np.uint8)
  return specs.BoundedArray(
      shape=space.shape,
      dtype=dtype,
      minimum=_spec_bound(space.low, dtype),
      maximum=_spec_bound(space.high, dtype),
      name='observation')


def _action_spec_from_space(space: gymnasium.Space) -> specs.DiscreteArray:
  if not isinstance(space, gymnasium.spaces.Discrete):
    raise TypeError(
        'GymnasiumToDMEnv supports Discrete action spaces only (IMPALA here has a '
        f'categorical policy), got {space!r}.')
  if int(space.start) != 0:
    # DiscreteArray is 0-based; a shifted space would silently mislabel actions.
    raise TypeError(f'Discrete action spaces must start at 0, got {space!r}.')
  return specs.DiscreteArray(num_values=int(space.n), dtype=np.int32, name='action')


class GymnasiumToDMEnv(dm_env.Environment):
  """A `gymnasium.Env` seen as a `dm_env.Environment`.

  * `reset()` returns `dm_env.restart(observation)` (reward and discount are None).
  * `step(a)` returns a LAST step with discount 0.0 when gymnasium says `terminated`, a
    LAST step with discount 1.0 when it says `truncated` only (time limit: the value of
    the next state still counts), and a MID step with discount 1.0 otherwise. Rewards
    and discounts are `np.float32` scalars.
  * A `step()` after a LAST step (or before any reset) resets instead, as dm_env
    environments do.
  * The observation is a fresh C-contiguous array of the spec's dtype on each call, so
    callers may keep references to it.

  Args:
    environment: the gymnasium environment; this adapter owns it and closes it.
    seed: passed to the first `reset` only; gymnasium's own generators carry on from
      there, so the whole stream of episodes is reproducible.
  """

  def __init__(self, environment: gymnasium.Env, seed: Optional[int] = None):
    self._env = environment
    self._seed = seed
    self._seed_pending = True
    self._observation_spec = observation_spec_from_space(environment.observation_space)
    self._action_spec = _action_spec_from_space(environment.action_space)
    self._reward_spec = specs.Array(shape=(), dtype=np.float32, name='reward')
    self._discount_spec = specs.BoundedArray(
        shape=(), dtype=np.float32, minimum=0.0, maximum=1.0, name='discount')
    self._reset_next_step = True
    self._last_info: Dict[str, Any] = {}
    self._closed = False

  @property
  def gymnasium_env(self) -> gymnasium.Env:
    """The wrapped gymnasium environment."""
    return self._env

  @property
  def last_info(self) -> Dict[str, Any]:
    """The `info` dict of the latest gymnasium `reset` or `step`."""
    return self._last_info

  def _observation(self, observation) -> np.ndarray:
    # Always a copy: some gymnasium wrappers reuse their buffers between steps.
    return np.array(observation, dtype=self._observation_spec.dtype, order='C',
                    copy=True)

  def reset(self) -> dm_env.TimeStep:
    if self._seed_pending:
      seed, self._seed_pending = self._seed, False
    else:
      seed = None
    observation, info = self._env.reset(seed=seed)
    self._last_info = info
    self._reset_next_step = False
    return dm_env.restart(self._observation(observation))

  def step(self, action) -> dm_env.TimeStep:
    if self._reset_next_step:
      return self.reset()
    # `.item()` accepts numpy/int32 scalars and 0-d or 1-element arrays, and refuses a
    # batch of actions loudly instead of picking one.
    observation, reward, terminated, truncated, info = self._env.step(
        int(np.asarray(action).item()))
    self._last_info = info
    observation = self._observation(observation)
    reward = np.float32(reward)
    if terminated:
      self._reset_next_step = True
      return dm_env.TimeStep(dm_env.StepType.LAST, reward, np.float32(0.0), observation)
    if truncated:
      self._reset_next_step = True
      return dm_env.TimeStep(dm_env.StepType.LAST, reward, np.float32(1.0), observation)
    return dm_env.TimeStep(dm_env.StepType.MID, reward, np.float32(1.0), observation)

  def observation_spec(self) -> specs.BoundedArray:
    return self._observation_spec

  def action_spec(self) -> specs.DiscreteArray:
    return self._action_spec

  def reward_spec(self) -> specs.Array:
    return self._reward_spec

  def discount_spec(self) -> specs.BoundedArray:
    return self._discount_spec

  def close(self) -> None:
    if not self._closed:
      self._closed = True
      self._env.close()


class ObservationActionRewardWrapper(
    observation_action_reward.ObservationActionRewardWrapper):
  """Acme's OAR wrapper, made consistent with auto-reset and with its own spec.

  Acme's version assumes every episode starts with an explicit `reset()`: when `step()`
  auto-resets, it would put the action that was ignored and a `None` reward into the
  FIRST observation. It also stores the action exactly as given (a Python int, an
  int64...), which then no longer matches `action_spec()` for Reverb. Here a FIRST step
  always carries zeros, as after `reset()`, and the action is cast to the spec's dtype.

  Observation: `OAR(observation=<inner observation>, action=int32[], reward=float32[])`,
  action and reward always as 0-d numpy arrays.
  """

  def _augment(self, action, reward, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
    # Always 0-d arrays of the spec dtypes (Acme's reset() would mix a numpy int32
    # scalar action with a 0-d array reward), so that the OAR fields have one type.
    action = np.asarray(action, dtype=self._environment.action_spec().dtype)
    reward = np.asarray(reward, dtype=self._environment.reward_spec().dtype)
    return self._augment_observation(action, reward, timestep)

  def reset(self) -> dm_env.TimeStep:
    return self._augment(0, 0, self._environment.reset())

  def step(self, action) -> dm_env.TimeStep:
    timestep = self._environment.step(action)
    if timestep.first():
      return self._augment(0, 0, timestep)
    return self._augment(action, timestep.reward, timestep)

def timestep_row(batch: dm_env.TimeStep, index: int) -> dm_env.TimeStep:
  """Row `index` of a batch of K timesteps ([K] step types, rewards and
  discounts, [K, ...] observations: `envs.batched.BatchedEnvironment`'s
  layout), as one dm_env environment returns it: a `StepType`, float32
  scalars and the observation nest's row."""
  return dm_env.TimeStep(
      step_type=dm_env.StepType(int(batch.step_type[index])),
      reward=np.float32(batch.reward[index]),
      discount=np.float32(batch.discount[index]),
      observation=tree.map_structure(lambda x: x[index], batch.observation))


def stack_timesteps(timesteps: Sequence[dm_env.TimeStep]) -> dm_env.TimeStep:
  """K single-environment timesteps as one batch (`timestep_row`'s inverse).
  A FIRST timestep's None reward and discount (dm_env.restart's) become 0
  and 1, what EnvPool gives."""
  first = [ts.first() for ts in timesteps]
  return dm_env.TimeStep(
      step_type=np.array([int(ts.step_type) for ts in timesteps], np.int32),
      reward=np.array([0. if f else ts.reward
                       for f, ts in zip(first, timesteps)], np.float32),
      discount=np.array([1. if f else ts.discount
                         for f, ts in zip(first, timesteps)], np.float32),
      observation=tree.map_structure(lambda *xs: np.stack(xs),
                                     *[ts.observation for ts in timesteps]))
