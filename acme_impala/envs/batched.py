"""Batched engines: K environments stepped with one policy call.

An actor steps K environments through a `BatchedEnvironment` whose timesteps are one
batch (`[K]` step types, rewards and discounts, `[K, ...]` observations). Two engines
give the same layout and the same episode and discount rules:

* `gymnasium`: K `registry.make_environment` environments stepped one by one in Python;
* `envpool`: one EnvPool instance of K C++ environments (`envpool==0.8.4`), stepped
  in one call on its own threads, with the same Atari settings (Table G.1).
"""

import abc
import warnings
from typing import Any, Dict, List, Optional, Sequence

import dm_env
import gymnasium
import numpy as np

from acme.wrappers import observation_action_reward

from acme_impala.envs import adapter
from acme_impala.envs import atari
from acme_impala.envs import engines
from acme_impala.envs import minatar
from acme_impala.envs import registry
from acme_impala.host import hardware

# `config.env_engine` values (validated in agent/config.py).
GYMNASIUM, ENVPOOL = engines.GYMNASIUM, engines.ENVPOOL
# EnvPool seeds environment i of a pool with `seed + i` in a C++ int32.
_ENVPOOL_SEED_MODULUS = 2**31 - 2**16


class BatchedEnvironment(abc.ABC):
  """K environments stepped together, their timesteps as one batch.

  A batch is a `dm_env.TimeStep` of arrays: `step_type` int32[K] (dm_env's
  `StepType` values), `reward` float32[K], `discount` float32[K], and an
  observation nest of [K, ...] arrays laid out as `make_environment`'s (with
  `oar=True`, `OAR(observation [K, ...], action int32[K], reward float32[K])`
  carrying each environment's previous action and reward).

  Episodes follow `GymnasiumToDMEnv`'s rules in every engine: a LAST row has
  discount 0 when the episode terminated and 1 when it was cut at the step
  cap; `step` resets the rows that were LAST, ignoring their actions, and
  returns them as FIRST rows (reward 0, discount 1, OAR action and reward 0),
  which is dm_env's auto-reset rule. So a row's stream of timesteps is that of
  one dm_env environment, and a batched actor writes the same items whatever
  the engine.
  """

  @property
  @abc.abstractmethod
  def num_envs(self) -> int:
    """K."""

  @abc.abstractmethod
  def reset(self) -> dm_env.TimeStep:
    """Starts an episode in every environment: K FIRST rows."""

  @abc.abstractmethod
  def step(self, actions: np.ndarray) -> dm_env.TimeStep:
    """Steps every environment with its action from `actions` int32[K]."""

  @abc.abstractmethod
  def close(self) -> None:
    """Releases the environments."""


class GymnasiumBatch(BatchedEnvironment):
  """K dm_env environments (from `make_environment`) stepped one by one."""

  def __init__(self, environments: Sequence[dm_env.Environment]):
    if not environments:
      raise ValueError('GymnasiumBatch needs at least one environment.')
    self._envs = list(environments)

  @property
  def num_envs(self) -> int:
    return len(self._envs)

  @property
  def environments(self) -> List[dm_env.Environment]:
    return list(self._envs)

  def reset(self) -> dm_env.TimeStep:
    return adapter.stack_timesteps([env.reset() for env in self._envs])

  def step(self, actions: np.ndarray) -> dm_env.TimeStep:
    # dm_env environments reset themselves on the step after LAST.
    return adapter.stack_timesteps(
        [env.step(a) for env, a in zip(self._envs, actions)])

  def close(self) -> None:
    for env in self._envs:
      env.close()


def _import_envpool():
  try:
    import envpool  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        "env_engine='envpool' needs envpool, which is part of the pinned stack "
        '(requirements-nodeps.txt: envpool==0.8.4 with optree) but failed to '
        'import: ' + str(e)) from e
  return envpool


def _envpool_task(env_id: str) -> str:
  if atari.ID_PATTERN.match(env_id):
    return env_id[len('ALE/'):]
  return env_id


def validate_engine(env_id: str, engine: str) -> None:
  """Raises `ValueError` unless `engine` can run `env_id`, an id that
  `registry.validate_environment_id` accepts (creates nothing).

  EnvPool runs the classic-control ids and the Atari games it registers (all of
  ale-py's but TicTacToe3D), not MinAtar.
  """
  if engine not in engines.ENGINES:
    raise ValueError(f'Unknown env_engine {engine!r}: expected one of '
                     f'{engines.ENGINES}.')
  if engine == GYMNASIUM:
    return
  if minatar.ID_PATTERN.match(env_id):
    raise ValueError(
        f"env_engine='envpool' cannot run {env_id!r}: EnvPool has no MinAtar "
        "games; use env_engine='gymnasium'.")
  if _envpool_task(env_id) not in _import_envpool().list_all_envs():
    raise ValueError(
        f"env_engine='envpool' cannot run {env_id!r}: EnvPool 0.8.4 has no "
        f"{_envpool_task(env_id)!r}; use env_engine='gymnasium'.")


def envpool_settings(env_id: str, *, evaluation: bool = False,
                     repeat_action_probability: float =
                     atari.ATARI_DEFAULT_REPEAT_ACTION_PROBABILITY,
                     noop_max: int = atari.ATARI_NOOP_MAX,
                     max_episode_steps: Optional[int] = None
                     ) -> Dict[str, Any]:
  """EnvPool's options for `env_id`, set to what `make_environment` does.

  Every option that shapes the data is given explicitly rather than taken
  from EnvPool's defaults (some differ: it presses FIRE on reset by default),
  so that both engines follow Table G.1 and tests can compare them.
  """
  if atari.ID_PATTERN.match(env_id):
    return dict(
        frame_skip=atari.ATARI_FRAME_SKIP, img_height=atari.ATARI_SCREEN_SIZE,
        img_width=atari.ATARI_SCREEN_SIZE, stack_num=atari.ATARI_FRAME_STACK,
        gray_scale=True, noop_max=noop_max,
        episodic_life=not evaluation,
        zero_discount_on_life_loss=False, reward_clip=False,
        use_fire_reset=False, full_action_space=False,
        repeat_action_probability=repeat_action_probability,
        max_episode_steps=max_episode_steps or atari.ATARI_MAX_EPISODE_STEPS)
  # Classic control: gymnasium's registered step cap (CartPole-v1 500...).
  return dict(max_episode_steps=max_episode_steps or
              gymnasium.spec(env_id).max_episode_steps)


def _classic_control_terminal(env_id: str):
  """gymnasium's termination rule of a classic-control game, as a function of
  [n, D] observations, with the constants of gymnasium's own class.

  EnvPool reports an episode that ends at the step cap as truncated even
  when the game also ended there (the pole fell on step 500); gymnasium, and
  so our adapter, calls that a termination (discount 0). EnvPoolBatch asks
  this rule for the rows EnvPool truncates.
  """
  game = gymnasium.make(env_id).unwrapped
  if env_id == 'CartPole-v1':
    return lambda o: ((np.abs(o[:, 0]) > game.x_threshold) |
                      (np.abs(o[:, 2]) > game.theta_threshold_radians))
  if env_id == 'MountainCar-v0':
    return lambda o: ((o[:, 0] >= game.goal_position) &
                      (o[:, 1] >= game.goal_velocity))
  if env_id == 'Acrobot-v1':
    def terminal(o):
      # The observation is (cos, sin) of both angles and their velocities.
      angles = np.arctan2(o[:, [1, 3]], o[:, [0, 2]])
      return -np.cos(angles[:, 0]) - np.cos(angles[:, 1] + angles[:, 0]) > 1.
    return terminal
  raise ValueError(f'No termination rule for {env_id!r}.')


def envpool_num_threads(num_envs: int, num_threads: int = 0) -> int:
  """`num_threads`, or for 0 `usable_cores()` at most `num_envs` (EnvPool's
  own 0 starts one thread per environment, which on 2 cores measured
  1.2-1.5x slower: docs/benchmarks.md#environment-engines)."""
  return num_threads or min(num_envs, hardware.usable_cores())


class EnvPoolBatch(BatchedEnvironment):
  """One EnvPool instance of K environments (synchronous: every `step`
  steps all K, so each row is one environment's own sequence).

  EnvPool's gymnasium API is used because it tells termination from
  truncation (its dm_env API gives discount 0 to both). Its auto-reset rule
  is dm_env's (the call after a done row resets that row and ignores its
  action); after a life loss with `episodic_life` that reset continues the
  game, as `EpisodicLifeWrapper` does.

  Args:
    env_id: a classic-control id or `ALE/<Game>-v5` (see `validate_engine`).
    num_envs: K.
    seed: environment i is seeded with `seed + i` (EnvPool's rule); the seed
      is folded into int32's range first.
    evaluation, repeat_action_probability, noop_max, max_episode_steps: as
      `make_environment`'s. After a life loss (`episodic_life`), EnvPool
      plays 1 to `noop_max` no-op frames and keeps the frame stack, where
      the gymnasium engine starts from the same frame with a fresh stack.
    num_threads: EnvPool's worker threads; 0: `envpool_num_threads`'s default.
    oar: observations as `OAR(observation, previous action, previous reward)`.
  """

  def __init__(self, env_id: str, num_envs: int, seed: int = 0, *,
               evaluation: bool = False,
               repeat_action_probability: float =
               atari.ATARI_DEFAULT_REPEAT_ACTION_PROBABILITY,
               noop_max: int = atari.ATARI_NOOP_MAX,
               max_episode_steps: Optional[int] = None,
               num_threads: int = 0, oar: bool = True):
    registry.validate_environment_id(env_id)
    validate_engine(env_id, ENVPOOL)
    envpool = _import_envpool()
    self._k = num_envs
    self._atari = bool(atari.ID_PATTERN.match(env_id))
    self._oar = oar
    self.num_threads = envpool_num_threads(num_envs, num_threads)
    with warnings.catch_warnings():
      # EnvPool builds its Box spaces from float64 bounds; gymnasium warns.
      warnings.simplefilter('ignore', UserWarning)
      self._pool = envpool.make_gymnasium(
          _envpool_task(env_id), num_envs=num_envs, batch_size=num_envs,
          num_threads=self.num_threads,
          seed=int(seed) % _ENVPOOL_SEED_MODULUS,
          **envpool_settings(
              env_id, evaluation=evaluation,
              repeat_action_probability=repeat_action_probability,
              noop_max=noop_max, max_episode_steps=max_episode_steps))
      self._dtype = adapter.observation_spec_from_space(
          self._pool.observation_space).dtype
    self._terminal_at_cap = (None if self._atari else
                             _classic_control_terminal(env_id))
    self._done = np.zeros(num_envs, bool)
    self._ids = np.arange(num_envs)
    self._pending = None  # The actions of a step_async not yet waited for.
    self._closed = False

  @property
  def num_envs(self) -> int:
    return self._k

  def _batch(self, step_type, reward, discount, observation, actions):
    if self._atari:
      # EnvPool stacks frames first ([K, 4, 84, 84], oldest first); ours are
      # channels last, oldest first.
      observation = atari.frames_last(observation)
    else:
      # A copy: EnvPool's arrays are views of its own buffers.
      observation = np.array(observation, dtype=self._dtype)
    if self._oar:
      observation = observation_action_reward.OAR(
          observation=observation, action=actions.astype(np.int32),
          reward=reward)
    return dm_env.TimeStep(step_type.astype(np.int32), reward, discount,
                           observation)

  def reset(self) -> dm_env.TimeStep:
    if self._pending is not None:
      raise RuntimeError('EnvPoolBatch.reset called while a step_async is '
                         'running: call step_wait first.')
    observation, _ = self._pool.reset()
    self._done[:] = False
    zeros = np.zeros(self._k, np.float32)
    return self._batch(np.full(self._k, int(dm_env.StepType.FIRST)), zeros,
                       np.ones(self._k, np.float32), observation,
                       np.zeros(self._k, np.int32))

  def step(self, actions: np.ndarray) -> dm_env.TimeStep:
    self.step_async(actions)
    return self.step_wait()

  def step_async(self, actions: np.ndarray) -> None:
    """Starts `step(actions)` on EnvPool's threads and returns at once;
    `step_wait` returns its timesteps. The caller can work meanwhile (e.g.
    the policy of another batch: `benchmarks/throughput.py
    --actor_overlap`, which measured no gain on 2 cores:
    docs/benchmarks.md#environment-engines)."""
    actions = np.asarray(actions, np.int32)
    if actions.shape != (self._k,):
      raise ValueError(f'EnvPoolBatch.step expects int32[{self._k}] actions, '
                       f'got shape {actions.shape}.')
    if self._pending is not None:
      raise RuntimeError('EnvPoolBatch.step_async called again before '
                         'step_wait returned the step already started.')
    self._pool.send(actions)
    self._pending = actions

  def step_wait(self) -> dm_env.TimeStep:
    """The timesteps of the step `step_async` started (blocks until done)."""
    if self._pending is None:
      raise RuntimeError('EnvPoolBatch.step_wait called with no step '
                         'started: call step_async(actions) first.')
    actions, self._pending = self._pending, None
    observation, reward, terminated, truncated, info = self._pool.recv()
    if not np.array_equal(info['env_id'], self._ids):
      # A synchronous pool returns its rows in environment order; checked
      # since the rows are the adders' streams.
      raise RuntimeError(f'EnvPool returned rows {info["env_id"]}, expected '
                         f'{self._ids}.')
    first = self._done  # Rows EnvPool reset in this call.
    if self._terminal_at_cap is not None and truncated.any():
      rows = np.flatnonzero(truncated)
      terminated = terminated.copy()
      terminated[rows] |= self._terminal_at_cap(observation[rows])
    done = (terminated | truncated) & ~first
    step_type = np.where(first, int(dm_env.StepType.FIRST),
                         np.where(done, int(dm_env.StepType.LAST),
                                  int(dm_env.StepType.MID)))
    reward = np.where(first, 0., reward).astype(np.float32)
    # Terminal -> 0; truncation only -> 1 (the next state's value counts).
    discount = np.where(terminated & ~first, 0., 1.).astype(np.float32)
    self._done = done
    return self._batch(step_type, reward, discount, observation,
                       np.where(first, 0, actions))

  def close(self) -> None:
    if not self._closed:
      self._closed = True
      self._pool.close()


def make_batched_environment(env_id: str, seeds: Sequence[int], *,
                             engine: str = GYMNASIUM,
                             num_threads: int = 0,
                             **kwargs) -> BatchedEnvironment:
  """K = len(seeds) environments of `env_id` as one `BatchedEnvironment`.

  With `gymnasium`, environment i is `make_environment(env_id, seeds[i],
  **kwargs)`; with `envpool`, one EnvPool of K environments seeded from
  `seeds[0]` (EnvPool seeds environment i with `seeds[0] + i`);
  `num_threads` is EnvPool's (see `EnvPoolBatch`). `kwargs`: `evaluation`,
  `repeat_action_probability`, `noop_max`, `max_episode_steps`.
  """
  seeds = list(seeds)
  if engine not in (GYMNASIUM, ENVPOOL):
    validate_engine(env_id, engine)  # Raises, naming the engine.
  # Each engine's constructor validates the id (EnvPoolBatch against
  # EnvPool's list), so it is not checked twice here.
  if engine == ENVPOOL:
    return EnvPoolBatch(env_id, len(seeds), seeds[0],
                        num_threads=num_threads, **kwargs)
  return GymnasiumBatch([registry.make_environment(env_id, seed=s, **kwargs)
                         for s in seeds])
