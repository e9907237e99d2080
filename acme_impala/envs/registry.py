"""The environment ids the project supports, their one validation, and factories.

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
`OAR(observation, previous action int32[], previous reward float32[])`
(`adapter.ObservationActionRewardWrapper`), as Acme's IMPALA expects.

`validate_environment_id(env_id)` checks an id without creating anything, so that a
bad id fails before any process is started.

The engines that step K environments at once are in `batched.py`.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import dm_env
import gymnasium

from acme import specs as acme_specs

from acme_impala.envs import adapter
from acme_impala.envs import atari
from acme_impala.envs import minatar
from acme_impala.envs import multitask

CLASSIC_CONTROL_IDS: Tuple[str, ...] = ('CartPole-v1', 'Acrobot-v1', 'MountainCar-v0')


def known_environment_ids() -> List[str]:
  """Every id `make_environment` accepts on this installation.

  Classic control, then the 104 `ALE/<Game>-v5` ids (if ale-py imports), then the
  MinAtar ids (if minatar is installed). Creates no environment.
  """
  ids = list(CLASSIC_CONTROL_IDS)
  try:
    ids += atari.ids()
  except ImportError:
    pass
  if minatar.available():
    ids += minatar.ids()
  return ids


def _unknown_id_message(env_id: str, reason: str) -> str:
  minatar_note = '' if minatar.available() else ' (needs the optional package minatar)'
  return (
      f'Unknown environment id {env_id!r}: {reason}. Known ids: '
      f'{", ".join(CLASSIC_CONTROL_IDS)}; '
      f"Atari 'ALE/<Game>-v5' (e.g. {', '.join(atari.EXAMPLES)}; "
      'acme_impala.envs.registry.known_environment_ids() lists all); '
      f"MinAtar 'MinAtar/<Game>-v1' with <Game> in {', '.join(minatar.GAMES)}"
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
  if atari.ID_PATTERN.match(env_id):
    try:
      atari_ids = atari.ids()
    except ImportError as e:
      raise ValueError(f'Cannot use {env_id!r}: {e}') from e
    if env_id not in atari_ids:
      raise ValueError(_unknown_id_message(env_id, 'ale-py has no such v5 game'))
    return
  if minatar.ID_PATTERN.match(env_id):
    game = env_id[len('MinAtar/'):-len('-v1')]
    if game not in minatar.GAMES:
      raise ValueError(_unknown_id_message(env_id, 'MinAtar has no such game'))
    if not minatar.available():
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
                     atari.ATARI_DEFAULT_REPEAT_ACTION_PROBABILITY,
                     render_mode: Optional[str] = None,
                     noop_max: int = atari.ATARI_NOOP_MAX,
                     max_episode_steps: Optional[int] = None,
                     full_action_set: bool = False,
                     channels: Optional[int] = None
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
      (discount 1); None: the registered one (Atari: atari.ATARI_MAX_EPISODE_STEPS).
    full_action_set: MinAtar only: the game's full action set (6 actions, the
      same in every game) in place of its minimal one; for multi-task runs
      (`multitask`).
    channels: MinAtar only: observations padded with zero channels to
      `uint8[10, 10, channels]` (`multitask.PadChannels`); None: the game's own.

  Returns:
    A `dm_env.Environment` with float32 reward and discount specs and an int32
    `DiscreteArray` action spec. Observations: classic control float32 vectors; Atari
    `uint8[84, 84, 4]`; MinAtar `uint8[10, 10, C]`.
  """
  validate_environment_id(env_id)
  # Only a given render_mode is passed on: gymnasium.make's defaults stay in force.
  make_kwargs = {} if render_mode is None else {'render_mode': render_mode}
  if atari.ID_PATTERN.match(env_id):
    gym_env = atari.make_gymnasium(
        env_id, evaluation=evaluation,
        repeat_action_probability=repeat_action_probability,
        noop_max=noop_max, max_episode_steps=max_episode_steps,
        **make_kwargs)
  else:
    is_minatar = bool(minatar.ID_PATTERN.match(env_id))
    if (full_action_set or channels is not None) and not is_minatar:
      raise ValueError(f'{env_id!r}: full_action_set and channels are for '
                       'MinAtar ids only.')
    if is_minatar:
      minatar.register()
      if full_action_set:
        make_kwargs['use_minimal_action_set'] = False
    if max_episode_steps is not None:
      make_kwargs['max_episode_steps'] = max_episode_steps
    gym_env = gymnasium.make(env_id, **make_kwargs)
    if channels is not None:
      gym_env = multitask.PadChannels(gym_env, channels)
  environment: dm_env.Environment = adapter.GymnasiumToDMEnv(gym_env, seed=seed)
  if oar:
    environment = adapter.ObservationActionRewardWrapper(environment)
  return environment


def environment_spec(env_id: str, *, oar: bool = True, **kwargs
                     ) -> acme_specs.EnvironmentSpec:
  """The `EnvironmentSpec` of `make_environment(env_id, oar=oar, **kwargs)`
  (created and closed)."""
  environment = make_environment(env_id, oar=oar, **kwargs)
  try:
    return acme_specs.make_environment_spec(environment)
  finally:
    environment.close()


def task_kwargs(env_ids: Sequence[str]) -> Dict[str, Any]:
  """The `make_environment` arguments that make every task of a multi-task
  suite (`config.env_ids`) give the same specs: the full action set and the
  suite's largest channel count. Empty for a single task (`env_ids` empty).
  Creates (and closes) one environment per task."""
  if not env_ids:
    return {}
  ids = multitask.validate_task_ids(env_ids)
  channels = []
  for env_id in ids:
    validate_environment_id(env_id)
    spec = environment_spec(env_id, oar=False, full_action_set=True)
    channels.append(spec.observations.shape[-1])
  return dict(full_action_set=True, channels=max(channels))


def suite_environment_spec(env_ids: Sequence[str]
                           ) -> acme_specs.EnvironmentSpec:
  """The one `EnvironmentSpec` of every task of `env_ids` made with
  `task_kwargs(env_ids)`; raises ValueError naming a task that differs."""
  kwargs = task_kwargs(env_ids)
  specs = {env_id: environment_spec(env_id, **kwargs)
           for env_id in multitask.task_ids(env_ids)}
  first_id, first = next(iter(specs.items()))
  for env_id, spec in specs.items():
    if spec != first:
      raise ValueError(f'{env_id!r} has the spec {spec}, {first_id!r} '
                       f'{first}; the tasks of one agent need one spec.')
  return first
