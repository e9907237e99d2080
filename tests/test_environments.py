"""Tests for acme_impala.envs: the gymnasium->dm_env adapter, ids, factories and engines."""


import dm_env
from dm_env import specs
import gymnasium
import numpy as np
import pytest

from acme.wrappers.observation_action_reward import OAR
from acme_impala.envs import adapter
from acme_impala.envs import atari
from acme_impala.envs import batched
from acme_impala.envs import registry


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
  env = adapter.GymnasiumToDMEnv(_ScriptedEnv())
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
  env = adapter.GymnasiumToDMEnv(_ScriptedEnv())
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
  env = adapter.GymnasiumToDMEnv(inner, seed=7)
  assert env.step(0).first()  # a step before any reset resets
  env.step(1)
  env.reset()
  assert inner.reset_seeds == [7, None]
  env.close()
  assert inner.closed
  env.close()  # idempotent


def test_batch_of_actions_is_refused():
  env = adapter.GymnasiumToDMEnv(_ScriptedEnv())
  env.reset()
  with pytest.raises(ValueError):
    env.step(np.array([0, 1]))


def test_non_discrete_action_space_is_a_clear_error():
  with pytest.raises(TypeError, match='Discrete'):
    adapter.GymnasiumToDMEnv(gymnasium.make('Pendulum-v1'))


# ---- real CartPole ---------------------------------------------------------------------


def test_cartpole_termination_discount_zero():
  env = registry.make_environment('CartPole-v1', seed=0, oar=False)
  steps, last = _first_last(env, lambda t: 0, max_steps=200)
  assert steps < 100  # pushing one way drops the pole long before the 500 time limit
  _assert_float32_scalar(last.discount, 0.0)
  _assert_float32_scalar(last.reward, 1.0)
  assert env.step(0).first()


def test_cartpole_truncation_discount_one():
  env = adapter.GymnasiumToDMEnv(
      gymnasium.make('CartPole-v1', max_episode_steps=5), seed=0)
  # Alternating pushes keep the pole up far longer than 5 steps.
  steps, last = _first_last(env, lambda t: t % 2, max_steps=10)
  assert steps == 5
  _assert_float32_scalar(last.discount, 1.0)
  _assert_float32_scalar(last.reward, 1.0)


def test_cartpole_specs_and_environment_spec():
  spec = registry.environment_spec('CartPole-v1', oar=False)
  assert spec.observations.shape == (4,) and spec.observations.dtype == np.float32
  assert spec.actions.num_values == 2 and spec.actions.dtype == np.int32
  assert spec.rewards.dtype == np.float32 and spec.discounts.dtype == np.float32
  oar_spec = registry.environment_spec('CartPole-v1')
  assert isinstance(oar_spec.observations, OAR)
  assert oar_spec.observations.action == spec.actions


def test_cartpole_seed_reproducibility():
  def first_observation(seed):
    return registry.make_environment('CartPole-v1', seed=seed, oar=False).reset().observation

  np.testing.assert_array_equal(first_observation(3), first_observation(3))
  assert not np.array_equal(first_observation(3), first_observation(4))


def test_oar_observations_carry_previous_action_and_reward():
  env = registry.make_environment('CartPole-v1', seed=0)
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
    registry.make_environment('CartPol-v1')
  message = str(error.value)
  assert "'CartPol-v1'" in message
  for known in ('CartPole-v1', 'Acrobot-v1', 'MountainCar-v0', 'ALE/<Game>-v5',
                'ALE/Pong-v5', 'MinAtar/<Game>-v1'):
    assert known in message
  with pytest.raises(ValueError, match='NotAGame'):
    registry.validate_environment_id('ALE/NotAGame-v5')
  with pytest.raises(ValueError, match='Pong-v4'):
    registry.validate_environment_id('ALE/Pong-v4')


def test_known_ids_validate():
  ids = registry.known_environment_ids()
  assert ids[:3] == ['CartPole-v1', 'Acrobot-v1', 'MountainCar-v0']
  assert 'ALE/Pong-v5' in ids and 'ALE/Breakout-v5' in ids
  for env_id in ids:
    registry.validate_environment_id(env_id)


def test_minatar_ids_are_clear_when_missing():
  try:
    import minatar  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    with pytest.raises(ValueError, match='minatar'):
      registry.make_environment('MinAtar/Breakout-v1')
  else:
    env = registry.make_environment('MinAtar/Breakout-v1', seed=0, oar=False)
    assert env.observation_spec().shape[:2] == (10, 10)
    assert env.reset().observation.dtype == env.observation_spec().dtype


@pytest.mark.parametrize('env_id', ['Acrobot-v1', 'MountainCar-v0'])
def test_other_classic_control(env_id):
  env = registry.make_environment(env_id, seed=0)
  env.reset()
  timestep = env.step(0)
  assert timestep.mid()
  _assert_float32_scalar(timestep.reward, -1.0)


# ---- Atari -------------------------------------------------------------------------------


@pytest.mark.parametrize('shape', [(4, 84, 84), (3, 4, 84, 84), (2, 5, 3, 7)])
def test_frames_last_is_moveaxis_as_a_new_contiguous_array(shape):
  frames = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
  out = atari.frames_last(frames)
  np.testing.assert_array_equal(out, np.moveaxis(frames, -3, -1))
  assert out.dtype == np.uint8 and out.flags['C_CONTIGUOUS']
  assert not np.shares_memory(out, frames)  # EnvPool reuses its buffers.


def test_atari_pong_observations_and_spec():
  import ale_py  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import  (pinned: must not skip)
  env = registry.make_environment('ALE/Pong-v5', seed=0)
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
    env = registry.make_environment('ALE/Pong-v5', seed=seed, oar=False)
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
  train = registry.make_environment('ALE/Breakout-v5', seed=0, oar=False)
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

  evaluation = registry.make_environment('ALE/Breakout-v5', seed=0, oar=False,
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
  env = adapter.GymnasiumToDMEnv(_BoolGridEnv(), seed=0)
  spec = env.observation_spec()
  assert spec.dtype == np.uint8 and spec.shape == (3, 3, 2)
  assert spec.minimum == 0 and spec.maximum == 1
  first = env.reset().observation
  assert first.dtype == np.uint8 and first[1, 1, 0] == 1 and first.sum() == 1
  step = env.step(1).observation
  assert step.dtype == np.uint8 and step[0, 1, 1] == 1 and step.sum() == 1


# --------------------------------------------------------------------------------------
# Batched engines: gymnasium and EnvPool give the learner the same data.
# --------------------------------------------------------------------------------------

_FIRST, _MID, _LAST = (int(t) for t in dm_env.StepType)


def _assert_same_batch(a, b, *, observations=True, atol=0.):
  """Two batches agree: step types, rewards, discounts, the OAR previous
  action and reward exactly; observations (if asked) up to `atol`."""
  for field in ('step_type', 'reward', 'discount'):
    x, y = np.asarray(getattr(a, field)), np.asarray(getattr(b, field))
    assert x.dtype == y.dtype and x.shape == y.shape, field
    np.testing.assert_array_equal(x, y, err_msg=field)
  for field in ('action', 'reward'):
    x, y = getattr(a.observation, field), getattr(b.observation, field)
    assert x.dtype == y.dtype and x.shape == y.shape, field
    np.testing.assert_array_equal(x, y, err_msg=f'OAR {field}')
  x, y = a.observation.observation, b.observation.observation
  assert x.dtype == y.dtype and x.shape == y.shape
  assert x.flags['C_CONTIGUOUS'] and y.flags['C_CONTIGUOUS']
  if observations:
    np.testing.assert_allclose(x, y, atol=atol, rtol=0)


def test_envpool_atari_settings_are_table_g1():
  settings = batched.envpool_settings('ALE/Pong-v5')
  assert settings == dict(
      frame_skip=4, img_height=84, img_width=84, stack_num=4, gray_scale=True,
      noop_max=30, episodic_life=True, zero_discount_on_life_loss=False,
      reward_clip=False, use_fire_reset=False, full_action_space=False,
      repeat_action_probability=0.0, max_episode_steps=27_000)
  assert not batched.envpool_settings(
      'ALE/Pong-v5', evaluation=True)['episodic_life']
  # EnvPool applied them (its defaults differ: FIRE on reset, for one).
  batch = batched.EnvPoolBatch('ALE/Pong-v5', 2, seed=0)
  config = batch._pool.config  # pylint: disable=protected-access
  for name, value in settings.items():
    assert config[name] == value, name
  batch.close()
  # The gymnasium engine's Atari pipeline has the same settings.
  env = registry.make_environment('ALE/Pong-v5', seed=0)
  wrapper = env.gymnasium_env
  while not isinstance(wrapper, gymnasium.wrappers.AtariPreprocessing):
    wrapper = wrapper.env
  assert (wrapper.frame_skip, wrapper.noop_max, wrapper.screen_size,
          wrapper.grayscale_obs) == (4, 30, (84, 84), True)
  ale = env.gymnasium_env.unwrapped.ale
  assert ale.getInt('max_num_frames_per_episode') == 27_000 * 4
  assert ale.getFloat('repeat_action_probability') == 0.0
  env.close()


def _play_atari_in_both_engines(evaluation):
  """Steps to the first LAST, the engines compared at every step."""
  kwargs = dict(noop_max=1, evaluation=evaluation)
  ours = batched.make_batched_environment('ALE/Breakout-v5', [7],
                                               **kwargs)
  pool = batched.make_batched_environment(
      'ALE/Breakout-v5', [7], engine='envpool', **kwargs)
  _assert_same_batch(ours.reset(), pool.reset())
  rng = np.random.default_rng(0)
  rewards, steps = 0., 0
  while True:
    actions = rng.integers(0, 4, size=1).astype(np.int32)
    a, b = ours.step(actions), pool.step(actions)
    _assert_same_batch(a, b)
    rewards += float(a.reward[0])
    steps += 1
    if a.step_type[0] == _LAST:
      break
    assert a.step_type[0] == _MID and steps < 5000
  assert a.discount[0] == 0.
  a, b = ours.step(np.zeros(1, np.int32)), pool.step(np.zeros(1, np.int32))
  # After a life loss EnvPool plays no-op frames first: frames differ.
  _assert_same_batch(a, b, observations=evaluation)
  assert a.step_type[0] == _FIRST and a.reward[0] == 0.
  ours.close()
  pool.close()
  return steps, rewards


def test_engines_play_the_same_atari_game():
  """Breakout, one no-op frame at a game's start (noop_max=1, so that the
  engines' random no-op counts agree), the same actions: the same frames,
  rewards, step types and discounts, up to the first LAST and the FIRST
  that follows. In training that LAST is the first life loss (discount 0);
  in evaluation the same game goes on through it, as MID steps, to the
  game's end."""
  train_steps, _ = _play_atari_in_both_engines(evaluation=False)
  eval_steps, eval_rewards = _play_atari_in_both_engines(evaluation=True)
  assert eval_steps > train_steps
  assert eval_rewards > 0  # A real game: bricks were hit.


def test_engines_truncate_atari_at_the_step_cap_with_discount_one():
  kwargs = dict(noop_max=1, evaluation=True, max_episode_steps=30)
  ours = batched.make_batched_environment('ALE/Pong-v5', [1, 2],
                                               **kwargs)
  pool = batched.make_batched_environment('ALE/Pong-v5', [1, 2],
                                               engine='envpool', **kwargs)
  _assert_same_batch(ours.reset(), pool.reset())
  for t in range(31):
    actions = np.full(2, t % 6, np.int32)
    a, b = ours.step(actions), pool.step(actions)
    # The cut episode's final frames differ in a few pixels: the engines
    # end their frame skip at ALE's frame cap differently.
    _assert_same_batch(a, b, observations=t != 29)
    expected = _LAST if t == 29 else (_FIRST if t == 30 else _MID)
    assert list(a.step_type) == [expected] * 2
  ours.close()
  pool.close()


def _set_cartpole_state(batch, index, observation):
  env = batch.environments[index]._environment  # OAR -> GymnasiumToDMEnv  pylint: disable=protected-access
  env.gymnasium_env.unwrapped.state = np.asarray(observation, np.float64)


def test_engines_run_the_same_cartpoles():
  """EnvPool's CartPole and gymnasium's, put in the same initial state at
  every episode start, follow the same trajectories under the same actions:
  the same terminations (discount 0), truncations at the cap (discount 1),
  restarts, OAR fields and (to float32 rounding) observations."""
  k, cap = 3, 25
  pool = batched.make_batched_environment(
      'CartPole-v1', range(k), engine='envpool', max_episode_steps=cap)
  ours = batched.make_batched_environment(
      'CartPole-v1', range(k), max_episode_steps=cap)
  a, b = ours.reset(), pool.reset()
  _assert_same_batch(a, b, observations=False)
  for i in range(k):
    _set_cartpole_state(ours, i, b.observation.observation[i])
  rng = np.random.default_rng(0)
  terminated = truncated = 0
  for _ in range(600):
    actions = rng.integers(0, 2, size=k).astype(np.int32)
    a, b = ours.step(actions), pool.step(actions)
    stepped = a.step_type != _FIRST
    _assert_same_batch(a, b, observations=False)
    np.testing.assert_allclose(a.observation.observation[stepped],
                               b.observation.observation[stepped], atol=1e-5)
    for i in np.flatnonzero(~stepped):
      _set_cartpole_state(ours, i, b.observation.observation[i])
    last = a.step_type == _LAST
    terminated += int(np.sum(last & (a.discount == 0.)))
    truncated += int(np.sum(last & (a.discount == 1.)))
  assert terminated >= 10 and truncated >= 3, (terminated, truncated)
  ours.close()
  pool.close()


@pytest.mark.parametrize('env_id,state', [
    ('CartPole-v1', lambda rng: rng.uniform(-0.3, 0.3, 4) * [10, 1, 1, 1]),
    ('MountainCar-v0', lambda rng: [rng.uniform(0.4, 0.6),
                                    rng.uniform(-0.05, 0.07)]),
    ('Acrobot-v1', lambda rng: rng.uniform(-np.pi, np.pi, 4))])
def test_termination_rule_at_the_cap_is_gymnasiums(env_id, state):
  """The rule EnvPoolBatch applies to rows EnvPool truncates agrees with
  gymnasium's own `terminated` from random states."""
  rule = batched._classic_control_terminal(env_id)  # pylint: disable=protected-access
  game = gymnasium.make(env_id).unwrapped
  game.reset(seed=0)
  rng = np.random.default_rng(0)
  outcomes = []
  for _ in range(300):
    game.state = np.asarray(state(rng), np.float64)
    game.steps_beyond_terminated = None  # CartPole warns otherwise.
    observation, _, terminated, _, _ = game.step(int(rng.integers(0, 2)))
    assert rule(observation[None])[0] == terminated
    outcomes.append(terminated)
  assert 10 < sum(outcomes) < 290  # Both outcomes were checked.


def test_engine_errors_name_the_value():
  with pytest.raises(ValueError, match="MinAtar/Breakout-v1.*env_engine='gymnasium'"):
    batched.validate_engine('MinAtar/Breakout-v1', 'envpool')
  with pytest.raises(ValueError, match='TicTacToe3D'):
    batched.validate_engine('ALE/TicTacToe3D-v5', 'envpool')
  with pytest.raises(ValueError, match="'gpu'.*'gymnasium', 'envpool'"):
    batched.validate_engine('CartPole-v1', 'gpu')
  batched.validate_engine('ALE/Pong-v5', 'envpool')
  # Made directly, a pool checks the id first (a typo is not an engine's).
  with pytest.raises(ValueError, match="Unknown environment id 'CartPol-v1'"):
    batched.EnvPoolBatch('CartPol-v1', 2)
  with pytest.raises(ValueError, match=r'int32\[2\] actions'):
    batched.EnvPoolBatch('CartPole-v1', 2).step(np.zeros(3, np.int32))


def test_envpool_step_async_then_wait_is_step():
  """Two halves started and waited for alternately (the overlapped actor of
  `benchmarks/throughput.py --actor_overlap`) see exactly what `step` gives
  pools of the same seeds, episode restarts included."""
  halves = [batched.EnvPoolBatch('CartPole-v1', 2, seed=s)
            for s in (0, 2)]
  references = [batched.EnvPoolBatch('CartPole-v1', 2, seed=s)
                for s in (0, 2)]
  for half, reference in zip(halves, references):
    _assert_same_batch(half.reset(), reference.reset())
  rng = np.random.default_rng(0)
  firsts = 0
  actions = [rng.integers(0, 2, size=2).astype(np.int32) for _ in halves]
  halves[0].step_async(actions[0])
  for _ in range(60):
    halves[1].step_async(actions[1])
    for i in (0, 1):
      got = halves[i].step_wait()
      _assert_same_batch(got, references[i].step(actions[i]))
      firsts += int(np.sum(got.step_type == _FIRST))
      actions[i] = rng.integers(0, 2, size=2).astype(np.int32)
      if i == 0:
        halves[0].step_async(actions[0])
  assert firsts > 0  # Restarts happened between the halves' calls.
  with pytest.raises(RuntimeError, match='called again before step_wait'):
    halves[0].step_async(actions[0])
  with pytest.raises(RuntimeError, match='step_async is running'):
    halves[0].reset()
  halves[0].step_wait()
  with pytest.raises(RuntimeError, match='no step started'):
    halves[0].step_wait()
  for pool in halves + references:
    pool.close()
