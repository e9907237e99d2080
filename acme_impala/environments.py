"""Environments for the IMPALA agent: gymnasium adapted to dm_env, and factories.

`GymnasiumToDMEnv` turns any `gymnasium.Env` with a `Box` observation space and a
`Discrete` action space into a `dm_env.Environment` whose rewards and discounts are
`np.float32` scalars matching the specs (Reverb rejects the float64 discounts that
`dm_env.termination`/`dm_env.truncation` would build).

`make_environment(env_id, ...)` builds the environments the project supports:

* classic control: `CartPole-v1`, `Acrobot-v1`, `MountainCar-v0`
  (float32 observations, shape `(4,)`, `(6,)`, `(2,)`);
* Atari: `ALE/<Game>-v5` through ale-py, with the preprocessing of Table G.1 of the
  IMPALA paper (Mnih et al. 2016 style): action repeat 4, max-pool over the last 2
  frames, 84x84 grayscale, 4-frame stack, up to 30 no-op starts, end of episode on
  life loss when training. Observation: `uint8[84, 84, 4]`, channels last, oldest
  frame first. Rewards are NOT clipped here (the learner clips);
* MinAtar: `MinAtar/<Game>-v1` when the optional `minatar` package is installed
  (observation `uint8[10, 10, C]`).

With `oar=True` (the default) the environment is wrapped so that the observation is
`acme.wrappers.observation_action_reward.OAR(observation, action, reward)`, with the
previous action (`int32[]`) and previous reward (`float32[]`), as Acme's IMPALA expects.

`validate_environment_id(env_id)` checks an id without creating anything, so that a
bad id fails before any process is started.

Batched engines (`make_batched_environment`): an actor steps K environments with one
policy call, through a `BatchedEnvironment` whose timesteps are one batch (`[K]`
step types, rewards and discounts, `[K, ...]` observations). Two engines give the
same layout and the same episode and discount rules:

* `gymnasium`: K `make_environment` environments stepped one by one in Python;
* `envpool`: one EnvPool instance of K C++ environments (`envpool==0.8.4`), stepped
  in one call on its own threads, with the same Atari settings (Table G.1).
"""

import abc
import importlib.util
import math
import os
import re
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import dm_env
from dm_env import specs
import gymnasium
import numpy as np

from acme import specs as acme_specs
from acme.wrappers import observation_action_reward

from acme_impala import hardware
from acme_impala import types

__all__ = [
    'GymnasiumToDMEnv',
    'ObservationActionRewardWrapper',
    'CLASSIC_CONTROL_IDS',
    'make_environment',
    'known_environment_ids',
    'validate_environment_id',
    'environment_spec',
    'BatchedEnvironment',
    'GymnasiumBatch',
    'EnvPoolBatch',
    'make_batched_environment',
    'validate_engine',
    'frames_last',
]

CLASSIC_CONTROL_IDS: Tuple[str, ...] = ('CartPole-v1', 'Acrobot-v1', 'MountainCar-v0')

_ATARI_PATTERN = re.compile(r'^ALE/[A-Za-z0-9]+-v5$')
_MINATAR_PATTERN = re.compile(r'^MinAtar/[A-Za-z0-9]+-v1$')
# The games minatar 1.0.15 registers; listed here so that messages and
# `known_environment_ids` need not import minatar (which pulls pandas and seaborn).
_MINATAR_GAMES = ('Asterix', 'Breakout', 'Freeway', 'Seaquest', 'SpaceInvaders')
_ATARI_EXAMPLES = ('ALE/Pong-v5', 'ALE/Breakout-v5', 'ALE/SpaceInvaders-v5',
                   'ALE/Seaquest-v5', 'ALE/BeamRider-v5', 'ALE/Qbert-v5')

# Table G.1 of the IMPALA paper (and Mnih et al. 2016, whose preprocessing it reuses).
ATARI_FRAME_SKIP = 4
ATARI_SCREEN_SIZE = 84
ATARI_FRAME_STACK = 4
ATARI_NOOP_MAX = 30
# ale-py registers ALE/*-v5 with repeat_action_probability=0.25 (sticky actions, as
# recommended by Machado et al. 2018). The IMPALA paper predates that protocol and used
# deterministic ALE, so 0.0 is our default; pass 0.25 to follow the v5 protocol.
ATARI_DEFAULT_REPEAT_ACTION_PROBABILITY = 0.0


# --------------------------------------------------------------------------------------
# gymnasium -> dm_env
# --------------------------------------------------------------------------------------


def _spec_bound(bound: np.ndarray, dtype: np.dtype):
  """A Box bound as a scalar when it is uniform, so that specs print readably."""
  bound = np.asarray(bound)
  if bound.size and np.all(bound == bound.flat[0]):
    return dtype.type(bound.flat[0])
  return bound.astype(dtype)


def _observation_spec_from_space(space: gymnasium.Space) -> specs.BoundedArray:
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
    self._observation_spec = _observation_spec_from_space(environment.observation_space)
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


# --------------------------------------------------------------------------------------
# Atari
# --------------------------------------------------------------------------------------


class EpisodicLifeWrapper(gymnasium.Wrapper):
  """Ends the episode (terminated=True) when a life is lost, without ending the game.

  gymnasium's `AtariPreprocessing(terminal_on_life_loss=True)` also reports life loss
  as termination, but its next `reset()` restarts the whole game, so an agent trained
  with it would only ever play its first life. Here, as in DQN/A3C/IMPALA, the reset
  that follows a life loss just starts a new episode from the current state (same
  observation, no emulator step, no no-ops); a real reset happens only once the game is
  over, truncated, reseeded, or reset in the middle of a life.
  """

  def __init__(self, env: gymnasium.Env):
    super().__init__(env)
    self._lives = 0
    self._continue_game_on_reset = False
    self._last_observation = None
    self._last_info: Dict[str, Any] = {}

  def _ale_lives(self) -> int:
    return int(self.env.unwrapped.ale.lives())

  def step(self, action):
    observation, reward, terminated, truncated, info = self.env.step(action)
    lives = self._ale_lives()
    life_lost = 0 < lives < self._lives
    self._lives = lives
    self._continue_game_on_reset = life_lost and not (terminated or truncated)
    self._last_observation, self._last_info = observation, info
    return observation, reward, terminated or life_lost, truncated, info

  def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
    if self._continue_game_on_reset and seed is None and options is None:
      observation, info = self._last_observation, dict(self._last_info)
    else:
      observation, info = self.env.reset(seed=seed, options=options)
    self._continue_game_on_reset = False
    self._lives = self._ale_lives()
    return observation, info


def frames_last(frames: np.ndarray) -> np.ndarray:
  """A new contiguous [..., H, W, N] array of [..., N, H, W] frame stacks.

  One strided copy per frame: numpy's general transposing copy
  (`np.ascontiguousarray(np.moveaxis(...))`) moves uint8 frames one byte at
  a time and measured 6.5x slower here (3.5 ms vs 0.53 ms for EnvPool's
  [64, 4, 84, 84] batch), a tenth of an Atari actor's time per step.
  """
  frames = np.asarray(frames)
  out = np.empty(frames.shape[:-3] + frames.shape[-2:] + frames.shape[-3:-2],
                 frames.dtype)
  for i in range(frames.shape[-3]):
    out[..., i] = frames[..., i, :, :]
  return out


def _atari_preprocessing_class():
  """gymnasium's AtariPreprocessing (it resizes with OpenCV: opencv-python-headless
  is pinned in requirements.txt for that)."""
  from gymnasium.wrappers import AtariPreprocessing  # pylint: disable=g-import-not-at-top
  return AtariPreprocessing


def _import_ale_py():
  try:
    import ale_py  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        'Atari ids (ALE/<Game>-v5) need ale-py, which is part of the pinned stack '
        '(requirements.txt: ale-py==0.12.1) but failed to import: ' + str(e)) from e
  gymnasium.register_envs(ale_py)
  return ale_py


def _atari_ids() -> List[str]:
  _import_ale_py()
  return sorted(i for i in gymnasium.registry if _ATARI_PATTERN.match(i))


def _make_atari_gymnasium(env_id: str, *, evaluation: bool,
                          repeat_action_probability: float,
                          noop_max: int, max_episode_steps: Optional[int],
                          **make_kwargs) -> gymnasium.Env:
  """`ALE/<Game>-v5` with Table G.1 preprocessing; observations `uint8[84, 84, 4]`."""
  _import_ale_py()
  if max_episode_steps is not None:
    # ALE's own cap, in emulator frames, truncates (a TimeLimit here would
    # count single frames: AtariPreprocessing does the frame skip).
    make_kwargs['max_num_frames_per_episode'] = (
        max_episode_steps * ATARI_FRAME_SKIP)
  # frameskip=1: AtariPreprocessing repeats actions itself so it can max-pool the last
  # two frames (ALE's own frameskip would return only the final frame).
  env = gymnasium.make(env_id, frameskip=1,
                       repeat_action_probability=repeat_action_probability,
                       **make_kwargs)
  env = _atari_preprocessing_class()(
      env,
      noop_max=noop_max,
      frame_skip=ATARI_FRAME_SKIP,
      screen_size=ATARI_SCREEN_SIZE,
      terminal_on_life_loss=False,  # see EpisodicLifeWrapper for why not gymnasium's
      grayscale_obs=True,
      grayscale_newaxis=False,
      scale_obs=False)
  if not evaluation:
    env = EpisodicLifeWrapper(env)
  # Below the stack so that an episode started after a life loss gets a fresh stack.
  env = gymnasium.wrappers.FrameStackObservation(env, stack_size=ATARI_FRAME_STACK)
  # FrameStackObservation stacks on a new leading axis: [4, 84, 84] -> [84, 84, 4] for
  # Acme/Sonnet convolutions (NHWC).
  size = ATARI_SCREEN_SIZE
  env = gymnasium.wrappers.TransformObservation(
      env, frames_last,
      observation_space=gymnasium.spaces.Box(
          low=0, high=255, shape=(size, size, ATARI_FRAME_STACK), dtype=np.uint8))
  return env


# --------------------------------------------------------------------------------------
# MinAtar
# --------------------------------------------------------------------------------------


def _minatar_available() -> bool:
  return importlib.util.find_spec('minatar') is not None


def _minatar_ids() -> List[str]:
  return [f'MinAtar/{game}-v1' for game in _MINATAR_GAMES]


def _register_minatar() -> None:
  try:
    import minatar.gym  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ValueError(
        'MinAtar ids (MinAtar/<Game>-v1) need the optional package minatar '
        f'(pip install minatar==1.0.15), which failed to import: {e}') from e
  if not any(i.startswith('MinAtar/') for i in gymnasium.registry):
    minatar.gym.register_envs()


# --------------------------------------------------------------------------------------
# Ids and factories
# --------------------------------------------------------------------------------------


def known_environment_ids() -> List[str]:
  """Every id `make_environment` accepts on this installation.

  Classic control, then the 104 `ALE/<Game>-v5` ids (if ale-py imports), then the
  MinAtar ids (if minatar is installed). Creates no environment.
  """
  ids = list(CLASSIC_CONTROL_IDS)
  try:
    ids += _atari_ids()
  except ImportError:
    pass
  if _minatar_available():
    ids += _minatar_ids()
  return ids


def _unknown_id_message(env_id: str, reason: str) -> str:
  minatar_note = '' if _minatar_available() else ' (needs the optional package minatar)'
  return (
      f'Unknown environment id {env_id!r}: {reason}. Known ids: '
      f'{", ".join(CLASSIC_CONTROL_IDS)}; '
      f"Atari 'ALE/<Game>-v5' (e.g. {', '.join(_ATARI_EXAMPLES)}; "
      'acme_impala.environments.known_environment_ids() lists all); '
      f"MinAtar 'MinAtar/<Game>-v1' with <Game> in {', '.join(_MINATAR_GAMES)}"
      f'{minatar_note}.')


def validate_environment_id(env_id: str) -> None:
  """Raises `ValueError` naming `env_id` and the known ids unless it is supported.

  Creates no environment (Atari ids are checked against ale-py's registrations), so it
  is cheap enough to call before starting any process.
  """
  if not isinstance(env_id, str):
    raise ValueError(_unknown_id_message(repr(env_id), 'not a string'))
  if env_id in CLASSIC_CONTROL_IDS:
    return
  if _ATARI_PATTERN.match(env_id):
    try:
      atari_ids = _atari_ids()
    except ImportError as e:
      raise ValueError(f'Cannot use {env_id!r}: {e}') from e
    if env_id not in atari_ids:
      raise ValueError(_unknown_id_message(env_id, 'ale-py has no such v5 game'))
    return
  if _MINATAR_PATTERN.match(env_id):
    game = env_id[len('MinAtar/'):-len('-v1')]
    if game not in _MINATAR_GAMES:
      raise ValueError(_unknown_id_message(env_id, 'MinAtar has no such game'))
    if not _minatar_available():
      raise ValueError(
          f'Cannot use {env_id!r}: MinAtar ids need the optional package minatar '
          '(pip install minatar==1.0.15), which is not installed.')
    return
  raise ValueError(_unknown_id_message(env_id, 'not a supported id'))


def make_environment(env_id: str,
                     seed: Optional[int] = None,
                     *,
                     oar: bool = True,
                     evaluation: bool = False,
                     repeat_action_probability: float =
                     ATARI_DEFAULT_REPEAT_ACTION_PROBABILITY,
                     render_mode: Optional[str] = None,
                     noop_max: int = ATARI_NOOP_MAX,
                     max_episode_steps: Optional[int] = None
                     ) -> dm_env.Environment:
  """Creates the dm_env environment for `env_id`.

  Args:
    env_id: one of `known_environment_ids()`; anything else raises `ValueError`.
    seed: seeds the first reset (and through it every later episode); None: random.
    oar: wrap with `ObservationActionRewardWrapper` (observation becomes
      `OAR(observation, previous action int32[], previous reward float32[])`).
    evaluation: Atari only: when True an episode is a whole game (no end of episode on
      life loss). Other preprocessing, no-op starts included, is the same.
    repeat_action_probability: Atari only: ALE sticky actions. 0.0 (deterministic, as in
      the IMPALA paper) by default; ale-py's own v5 default is 0.25.
    render_mode: passed to `gymnasium.make` when given, e.g. 'rgb_array' so that
      `environment.gymnasium_env.render()` returns the current frame, uint8[H, W, 3]
      (classic control renders with pygame, pinned for this).
      Observations and dynamics are unchanged.
    noop_max: Atari only: an episode (a game) starts with 1 to `noop_max`
      no-op frames.
    max_episode_steps: the step cap, after which an episode is truncated
      (discount 1); None: the registered one (Atari: ATARI_MAX_EPISODE_STEPS).

  Returns:
    A `dm_env.Environment` with float32 reward and discount specs and an int32
    `DiscreteArray` action spec. Observations: classic control float32 vectors; Atari
    `uint8[84, 84, 4]`; MinAtar `uint8[10, 10, C]`.
  """
  validate_environment_id(env_id)
  # Only a given render_mode is passed on: gymnasium.make's defaults stay in force.
  make_kwargs = {} if render_mode is None else {'render_mode': render_mode}
  if _ATARI_PATTERN.match(env_id):
    gym_env = _make_atari_gymnasium(
        env_id, evaluation=evaluation,
        repeat_action_probability=repeat_action_probability,
        noop_max=noop_max, max_episode_steps=max_episode_steps,
        **make_kwargs)
  else:
    if _MINATAR_PATTERN.match(env_id):
      _register_minatar()
    if max_episode_steps is not None:
      make_kwargs['max_episode_steps'] = max_episode_steps
    gym_env = gymnasium.make(env_id, **make_kwargs)
  environment: dm_env.Environment = GymnasiumToDMEnv(gym_env, seed=seed)
  if oar:
    environment = ObservationActionRewardWrapper(environment)
  return environment


def environment_spec(env_id: str, *, oar: bool = True) -> acme_specs.EnvironmentSpec:
  """The `EnvironmentSpec` of `make_environment(env_id, oar=oar)` (created and closed)."""
  environment = make_environment(env_id, oar=oar)
  try:
    return acme_specs.make_environment_spec(environment)
  finally:
    environment.close()


# --------------------------------------------------------------------------------------
# Batched engines
# --------------------------------------------------------------------------------------

# `config.env_engine` values (validated in config.py).
GYMNASIUM, ENVPOOL = 'gymnasium', 'envpool'
# ALE v5's cap of 108,000 frames, in agent steps of ATARI_FRAME_SKIP frames; a cut
# episode is a truncation (discount 1) in both engines.
ATARI_MAX_EPISODE_STEPS = 27_000
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
    return types.stack_timesteps([env.reset() for env in self._envs])

  def step(self, actions: np.ndarray) -> dm_env.TimeStep:
    # dm_env environments reset themselves on the step after LAST.
    return types.stack_timesteps(
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
  if _ATARI_PATTERN.match(env_id):
    return env_id[len('ALE/'):]
  return env_id


def validate_engine(env_id: str, engine: str) -> None:
  """Raises `ValueError` unless `engine` can run `env_id` (creates nothing).

  EnvPool runs the classic-control ids and the Atari games it registers (all of
  ale-py's but TicTacToe3D), not MinAtar.
  """
  validate_environment_id(env_id)
  if engine == GYMNASIUM:
    return
  if engine != ENVPOOL:
    raise ValueError(f'Unknown env_engine {engine!r}: expected one of '
                     f'{GYMNASIUM!r}, {ENVPOOL!r}.')
  if _MINATAR_PATTERN.match(env_id):
    raise ValueError(
        f"env_engine='envpool' cannot run {env_id!r}: EnvPool has no MinAtar "
        "games; use env_engine='gymnasium'.")
  if _envpool_task(env_id) not in _import_envpool().list_all_envs():
    raise ValueError(
        f"env_engine='envpool' cannot run {env_id!r}: EnvPool 0.8.4 has no "
        f"{_envpool_task(env_id)!r}; use env_engine='gymnasium'.")


def envpool_settings(env_id: str, *, evaluation: bool = False,
                     repeat_action_probability: float =
                     ATARI_DEFAULT_REPEAT_ACTION_PROBABILITY,
                     noop_max: int = ATARI_NOOP_MAX,
                     max_episode_steps: Optional[int] = None
                     ) -> Dict[str, Any]:
  """EnvPool's options for `env_id`, set to what `make_environment` does.

  Every option that shapes the data is given explicitly rather than taken
  from EnvPool's defaults (some differ: it presses FIRE on reset by default),
  so that both engines follow Table G.1 and tests can compare them.
  """
  if _ATARI_PATTERN.match(env_id):
    return dict(
        frame_skip=ATARI_FRAME_SKIP, img_height=ATARI_SCREEN_SIZE,
        img_width=ATARI_SCREEN_SIZE, stack_num=ATARI_FRAME_STACK,
        gray_scale=True, noop_max=noop_max,
        episodic_life=not evaluation,
        zero_discount_on_life_loss=False, reward_clip=False,
        use_fire_reset=False, full_action_space=False,
        repeat_action_probability=repeat_action_probability,
        max_episode_steps=max_episode_steps or ATARI_MAX_EPISODE_STEPS)
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
  1.2-1.5x slower: README)."""
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
               ATARI_DEFAULT_REPEAT_ACTION_PROBABILITY,
               noop_max: int = ATARI_NOOP_MAX,
               max_episode_steps: Optional[int] = None,
               num_threads: int = 0, oar: bool = True):
    validate_engine(env_id, ENVPOOL)
    envpool = _import_envpool()
    self._k = num_envs
    self._atari = bool(_ATARI_PATTERN.match(env_id))
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
      self._dtype = _observation_spec_from_space(
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
      observation = frames_last(observation)
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
    --actor_overlap`, which measured no gain on 2 cores, README)."""
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
  return GymnasiumBatch([make_environment(env_id, seed=s, **kwargs)
                         for s in seeds])
