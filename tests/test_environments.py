"""Tests for acme_impala.environments: the gymnasium->dm_env adapter and factories."""


import dm_env
from dm_env import specs
import gymnasium
import numpy as np
import pytest

from acme.wrappers.observation_action_reward import OAR
from acme_impala import environments


class _ScriptedEnv(gymnasium.Env):
  """Terminates on action 1, truncates on action 2, else continues.

  Observations are float64 `[step_count, seed_or_-1]`, to exercise the float32 cast.
  """

  observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float64)
  action_space = gymnasium.spaces.Discrete(3)

  def __init__(self):
    self.closed = False
    self.reset_seeds = []
    self._t = 0
    self._seed = -1.0

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self.reset_seeds.append(seed)
    self._t = 0
    if seed is not None:
      self._seed = float(seed)
    return np.array([self._t, self._seed]), {'event': 'reset'}

  def step(self, action):
    self._t += 1
    obs = np.array([self._t, self._seed])
    return obs, 1.5, action == 1, action == 2, {'event': 'step', 't': self._t}

  def close(self):
    self.closed = True


def _assert_float32_scalar(value, expected):
  assert isinstance(value, np.float32), type(value)
  assert value == expected


def _assert_0d(value, dtype, expected):
  assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == dtype
  assert value == expected


def _first_last(env, policy, max_steps):
  """Steps `env` from a reset until a LAST step; returns (steps taken, last timestep)."""
  timestep = env.reset()
  for t in range(1, max_steps + 1):
    timestep = env.step(policy(t))
    if timestep.last():
      return t, timestep
  raise AssertionError(f'no LAST step within {max_steps} steps')


# ---- adapter on a scripted environment ----------------------------------------------


def test_scripted_termination_truncation_and_transition():
  env = environments.GymnasiumToDMEnv(_ScriptedEnv())
  first = env.reset()
  assert first.step_type == dm_env.StepType.FIRST
  assert first.reward is None and first.discount is None

  mid = env.step(0)
  assert mid.step_type == dm_env.StepType.MID
  _assert_float32_scalar(mid.reward, 1.5)
  _assert_float32_scalar(mid.discount, 1.0)

  terminal = env.step(np.int32(1))
  assert terminal.step_type == dm_env.StepType.LAST
  _assert_float32_scalar(terminal.discount, 0.0)
  _assert_float32_scalar(terminal.reward, 1.5)
  assert env.step(0).first()  # auto-reset

  truncated = env.step(np.array(2, dtype=np.int64))
  assert truncated.step_type == dm_env.StepType.LAST
  _assert_float32_scalar(truncated.discount, 1.0)
  assert env.last_info == {'event': 'step', 't': 1}


def test_scripted_specs_cast_float64_observations():
  env = environments.GymnasiumToDMEnv(_ScriptedEnv())
  obs_spec = env.observation_spec()
  assert isinstance(obs_spec, specs.BoundedArray)
  assert obs_spec.dtype == np.float32 and obs_spec.shape == (2,)
  assert env.action_spec() == specs.DiscreteArray(3, dtype=np.int32, name='action')
  assert env.reward_spec().dtype == np.float32 and env.reward_spec().shape == ()
  assert env.discount_spec().dtype == np.float32
  timestep = env.reset()
  assert timestep.observation.dtype == np.float32
  obs_spec.validate(timestep.observation)
  env.reward_spec().validate(env.step(0).reward)


def test_scripted_seed_only_on_first_reset_and_close():
  inner = _ScriptedEnv()
  env = environments.GymnasiumToDMEnv(inner, seed=7)
  assert env.step(0).first()  # a step before any reset resets
  env.step(1)
  env.reset()
  assert inner.reset_seeds == [7, None]
  env.close()
  assert inner.closed
  env.close()  # idempotent


def test_batch_of_actions_is_refused():
  env = environments.GymnasiumToDMEnv(_ScriptedEnv())
  env.reset()
  with pytest.raises(ValueError):
    env.step(np.array([0, 1]))


def test_non_discrete_action_space_is_a_clear_error():
  with pytest.raises(TypeError, match='Discrete'):
    environments.GymnasiumToDMEnv(gymnasium.make('Pendulum-v1'))


# ---- real CartPole ---------------------------------------------------------------------


def test_cartpole_termination_discount_zero():
  env = environments.make_environment('CartPole-v1', seed=0, oar=False)
  steps, last = _first_last(env, lambda t: 0, max_steps=200)
  assert steps < 100  # pushing one way drops the pole long before the 500 time limit
  _assert_float32_scalar(last.discount, 0.0)
  _assert_float32_scalar(last.reward, 1.0)
  assert env.step(0).first()


def test_cartpole_truncation_discount_one():
  env = environments.GymnasiumToDMEnv(
      gymnasium.make('CartPole-v1', max_episode_steps=5), seed=0)
  # Alternating pushes keep the pole up far longer than 5 steps.
  steps, last = _first_last(env, lambda t: t % 2, max_steps=10)
  assert steps == 5
  _assert_float32_scalar(last.discount, 1.0)
  _assert_float32_scalar(last.reward, 1.0)


def test_cartpole_specs_and_environment_spec():
  spec = environments.environment_spec('CartPole-v1', oar=False)
  assert spec.observations.shape == (4,) and spec.observations.dtype == np.float32
  assert spec.actions.num_values == 2 and spec.actions.dtype == np.int32
  assert spec.rewards.dtype == np.float32 and spec.discounts.dtype == np.float32
  oar_spec = environments.environment_spec('CartPole-v1')
  assert isinstance(oar_spec.observations, OAR)
  assert oar_spec.observations.action == spec.actions


def test_cartpole_seed_reproducibility():
  def first_observation(seed):
    return environments.make_environment('CartPole-v1', seed=seed, oar=False).reset().observation

  np.testing.assert_array_equal(first_observation(3), first_observation(3))
  assert not np.array_equal(first_observation(3), first_observation(4))


def test_oar_observations_carry_previous_action_and_reward():
  env = environments.make_environment('CartPole-v1', seed=0)
  obs_spec = env.observation_spec()
  timestep = env.reset()
  assert isinstance(timestep.observation, OAR)
  _assert_0d(timestep.observation.action, np.int32, 0)
  _assert_0d(timestep.observation.reward, np.float32, 0.0)

  timestep = env.step(1)  # a Python int: stored with the spec's dtype
  _assert_0d(timestep.observation.action, np.int32, 1)
  _assert_0d(timestep.observation.reward, np.float32, 1.0)
  assert timestep.observation.reward == timestep.reward
  for spec, value in zip(obs_spec, timestep.observation):
    spec.validate(value)

  while not timestep.last():
    timestep = env.step(0)
  timestep = env.step(1)  # auto-reset: zeros as after reset(), not the ignored action
  assert timestep.first()
  _assert_0d(timestep.observation.action, np.int32, 0)
  _assert_0d(timestep.observation.reward, np.float32, 0.0)
  assert env.last_info == {}  # forwarded to the adapter by Acme's wrapper base


# ---- ids ---------------------------------------------------------------------------------


def test_unknown_id_error_lists_known_ids():
  with pytest.raises(ValueError) as error:
    environments.make_environment('CartPol-v1')
  message = str(error.value)
  assert "'CartPol-v1'" in message
  for known in ('CartPole-v1', 'Acrobot-v1', 'MountainCar-v0', 'ALE/<Game>-v5',
                'ALE/Pong-v5', 'MinAtar/<Game>-v1'):
    assert known in message
  with pytest.raises(ValueError, match='NotAGame'):
    environments.validate_environment_id('ALE/NotAGame-v5')
  with pytest.raises(ValueError, match='Pong-v4'):
    environments.validate_environment_id('ALE/Pong-v4')


def test_known_ids_validate():
  ids = environments.known_environment_ids()
  assert ids[:3] == ['CartPole-v1', 'Acrobot-v1', 'MountainCar-v0']
  assert 'ALE/Pong-v5' in ids and 'ALE/Breakout-v5' in ids
  for env_id in ids:
    environments.validate_environment_id(env_id)


def test_minatar_ids_are_clear_when_missing():
  try:
    import minatar  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    with pytest.raises(ValueError, match='minatar'):
      environments.make_environment('MinAtar/Breakout-v1')
  else:
    env = environments.make_environment('MinAtar/Breakout-v1', seed=0, oar=False)
    assert env.observation_spec().shape[:2] == (10, 10)
    assert env.reset().observation.dtype == env.observation_spec().dtype


@pytest.mark.parametrize('env_id', ['Acrobot-v1', 'MountainCar-v0'])
def test_other_classic_control(env_id):
  env = environments.make_environment(env_id, seed=0)
  env.reset()
  timestep = env.step(0)
  assert timestep.mid()
  _assert_float32_scalar(timestep.reward, -1.0)


# ---- Atari -------------------------------------------------------------------------------


def test_atari_pong_observations_and_spec():
  import ale_py  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import  (pinned: must not skip)
  env = environments.make_environment('ALE/Pong-v5', seed=0)
  obs_spec = env.observation_spec()
  assert obs_spec.observation.shape == (84, 84, 4)
  assert obs_spec.observation.dtype == np.uint8
  assert env.action_spec() == specs.DiscreteArray(6, dtype=np.int32, name='action')
  timestep = env.reset()
  frames = timestep.observation.observation
  assert frames.shape == (84, 84, 4) and frames.dtype == np.uint8
  assert frames.flags['C_CONTIGUOUS']
  for _ in range(20):
    timestep = env.step(2)  # UP: our paddle moves, so consecutive frames differ
  frames = timestep.observation.observation
  obs_spec.observation.validate(frames)
  assert frames.max() > frames.min()  # a real screen, not a blank buffer
  # Channels are consecutive agent steps: the newest is last and differs from the oldest.
  assert not np.array_equal(frames[..., 0], frames[..., 3])
  assert isinstance(timestep.reward, np.float32)
  env.close()


def test_atari_seed_reproducibility():
  def first_frames(seed):
    env = environments.make_environment('ALE/Pong-v5', seed=seed, oar=False)
    frames = [env.reset().observation] + [env.step(2).observation for _ in range(40)]
    env.close()
    return np.stack(frames)

  np.testing.assert_array_equal(first_frames(5), first_frames(5))


def _play_until_last(env, rng, max_steps):
  """Random play until the next LAST step (auto-resetting first if needed)."""
  for _ in range(max_steps):
    timestep = env.step(rng.randint(env.action_spec().num_values))
    if timestep.last():
      return timestep
  raise AssertionError(f'no LAST step within {max_steps} steps')


def test_atari_life_loss_ends_episode_in_training_only():
  rng = np.random.RandomState(0)
  train = environments.make_environment('ALE/Breakout-v5', seed=0, oar=False)
  train.reset()
  last = _play_until_last(train, rng, max_steps=2000)
  _assert_float32_scalar(last.discount, 0.0)
  assert train.last_info['lives'] == 4  # one life lost, the game goes on
  first = train.step(0)
  assert first.first()
  np.testing.assert_array_equal(first.observation[..., -1], last.observation[..., -1])
  assert train.last_info['lives'] == 4  # the new episode did not restart the game
  second = _play_until_last(train, rng, max_steps=2000)
  assert train.last_info['lives'] == 3 and second.discount == 0.0
  train.close()

  evaluation = environments.make_environment('ALE/Breakout-v5', seed=0, oar=False,
                                             evaluation=True)
  evaluation.reset()
  last = _play_until_last(evaluation, rng, max_steps=5000)
  _assert_float32_scalar(last.discount, 0.0)
  assert evaluation.last_info['lives'] == 0  # the whole game was one episode
  evaluation.close()


class _BoolGridEnv(gymnasium.Env):
  """MinAtar-like: a Box(bool) observation (MinAtar's channel layout)."""

  observation_space = gymnasium.spaces.Box(
      np.zeros((3, 3, 2), bool), np.ones((3, 3, 2), bool), dtype=bool)
  action_space = gymnasium.spaces.Discrete(2)

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    grid = np.zeros((3, 3, 2), bool)
    grid[1, 1, 0] = True
    return grid, {}

  def step(self, action):
    grid = np.zeros((3, 3, 2), bool)
    grid[0, action, 1] = True
    return grid, 1.0, False, False, {}


def test_bool_observations_become_uint8():
  env = environments.GymnasiumToDMEnv(_BoolGridEnv(), seed=0)
  spec = env.observation_spec()
  assert spec.dtype == np.uint8 and spec.shape == (3, 3, 2)
  assert spec.minimum == 0 and spec.maximum == 1
  first = env.reset().observation
  assert first.dtype == np.uint8 and first[1, 1, 0] == 1 and first.sum() == 1
  step = env.step(1).observation
  assert step.dtype == np.uint8 and step[0, 1, 1] == 1 and step.sum() == 1
