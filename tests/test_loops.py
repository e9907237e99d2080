"""BatchedEnvironmentLoop + BatchedIMPALAActor write single-environment items.

The batched actor (one policy call for K environments) with the batched adder
must write exactly the items that K Acme SequenceAdders write for the same
K environment streams, and each item's stored LSTM state must reproduce its
behaviour logits, across episode starts in the middle of items; with
either environment engine (EnvPool's environments restart a step later, on
the step after their LAST one).
"""

import hashlib

from acme import specs
from acme.tf import utils as tf2_utils
from acme.utils import loggers
import dm_env
import numpy as np
import pytest
import reverb
import tensorflow as tf

from acme_impala.agent import acting
from acme_impala.agent import adders
from acme_impala.agent import builder as builder_lib
from acme_impala.agent import config as config_lib
from acme_impala.agent import loops
from acme_impala.agent import networks
from acme_impala.agent import presets
from acme_impala.agent import types
from acme_impala.envs import batched
from acme_impala.envs import registry

K, T, STEPS = 4, 5, 600


def _flush(made):
  """Waits until every item the adder(s) wrote is in the table."""
  made.flush(timeout_ms=10_000)


def _run_items(config, net, spec, k, steps, first_seed=0, **env_kwargs):
  """(adder, the queue's items, steps taken) after `steps` actor steps of
  a batched actor on k environments of `config.env_engine`."""
  builder = builder_lib.IMPALABuilder(config, spec)
  server = reverb.Server([reverb.Table.queue(
      types.QUEUE_TABLE, max_size=100_000,
      signature=builder.trajectory_signature(net))], port=None)
  client = reverb.Client(f'localhost:{server.port}')
  made = builder.make_adder(client, num_envs=k, batched=True)
  actor = builder.make_actor(net, made, seed=3, num_envs=k, batched=True)
  envs = batched.make_batched_environment(
      config.env_id, seeds=range(first_seed, first_seed + k),
      engine=config.env_engine, **env_kwargs)
  taken = loops.BatchedEnvironmentLoop(
      envs, actor, logger=loggers.NoOpLogger(),
      should_update=False).run(num_steps=steps)
  envs.close()
  _flush(made)
  size = client.server_info()[types.QUEUE_TABLE].current_size
  items = [s.data for s in client.sample(
      types.QUEUE_TABLE, num_samples=size, emit_timesteps=False,
      unpack_as_table_signature=True)]
  server.stop()
  return made, items, taken


def _items(config, net, spec):
  made, items, taken = _run_items(config, net, spec, K, STEPS)
  # Restart-only steps are not counted, so the count may pass STEPS.
  assert STEPS <= taken < STEPS + K
  return made, items


def _digest(item):
  h = hashlib.sha1()
  for x in tf.nest.flatten(item):
    h.update(np.ascontiguousarray(x).tobytes())
  return h.hexdigest()


@pytest.mark.parametrize('engine', config_lib.ENV_ENGINES)
def test_batched_adder_items_equal_per_environment_acme_adders(engine):
  config = config_lib.IMPALAConfig(unroll_length=T, lstm_size=16,
                                   envs_per_actor=K, env_engine=engine)
  env = registry.make_environment(config.env_id, seed=0)
  spec = specs.make_environment_spec(env)
  tf.random.set_seed(0)
  net = networks.make_network(config, spec.actions.num_values)
  tf2_utils.create_variables(net, [spec.observations])

  made, ours = _items(config, net, spec)
  assert isinstance(made, adders.BatchedTrajectoryAdder)
  made, theirs = _items(config.replace(adder='acme_sequence'), net, spec)
  assert isinstance(made, adders.PerStreamAdders) and made.num_streams == K
  # Same environments, seeds and weights: the same multiset of items.
  assert len(ours) == len(theirs) >= K * (STEPS // K // T - 1)
  assert sorted(map(_digest, ours)) == sorted(map(_digest, theirs))

  # Each item's step-0 LSTM state reproduces its behaviour logits, episode
  # starts inside items included: the per-row state resets are right.
  data = tf.nest.map_structure(lambda *xs: tf.constant(np.stack(xs)), *ours)
  seq = tf2_utils.batch_to_sequence(data)
  state0 = tf.nest.map_structure(lambda s: s[0], seq.extras['core_state'])
  (logits, _), _ = net.unroll(seq.observation, state0, seq.start_of_episode)
  starts = seq.start_of_episode.numpy()
  assert starts[1:].any()
  real = ~np.concatenate([starts[1:], np.ones((1, len(ours)), bool)], 0)
  np.testing.assert_allclose(logits.numpy()[real],
                             seq.extras['logits'].numpy()[real], atol=1e-5)


def test_batched_actor_rejects_mismatched_adders():
  config = config_lib.IMPALAConfig(lstm_size=8)
  net = networks.make_network(config, 2)
  batched = adders.BatchedTrajectoryAdder(None, 3, 6, 5, {'q': None})
  try:
    acting.BatchedIMPALAActor(net, 2, adder=batched)
  except ValueError as error:
    assert '3 streams' in str(error) and 'num_envs=2' in str(error)
  else:
    raise AssertionError('expected a ValueError')


def _dataset_items(config, net, spec):
  """Items as the learner reads them: the builder's TF dataset iterator."""
  builder = builder_lib.IMPALABuilder(config, spec)
  server = reverb.Server(builder.make_replay_tables(), port=None)
  client = reverb.Client(f'localhost:{server.port}')
  made = builder.make_adder(client, num_envs=K)
  actor = builder.make_actor(net, made, seed=3, num_envs=K)
  envs = batched.make_batched_environment(
      config.env_id, seeds=range(K), engine=config.env_engine)
  loops.BatchedEnvironmentLoop(envs, actor, logger=loggers.NoOpLogger(),
                               should_update=False).run(num_steps=STEPS)
  _flush(made)
  size = client.server_info()[types.QUEUE_TABLE].current_size
  iterator = builder.make_dataset_iterator(f'localhost:{server.port}')
  items = []
  while len(items) < size - size % config.batch_size:
    batch = next(iterator)
    assert bool(tf.reduce_all(batch.online))  # f = 0: every row is online.
    data = batch.data
    flat = [np.asarray(x) for x in tf.nest.flatten(data)]
    items += [tuple(x[i] for x in flat) for i in range(len(flat[0]))]
  server.stop()
  return items


def test_learner_dataset_reads_the_same_items_from_both_adders():
  # One engine: the items both engines write are compared above and below.
  config = config_lib.IMPALAConfig(unroll_length=T, lstm_size=16,
                                   envs_per_actor=K, batch_size=4,
                                   max_queue_size=10_000)
  env = registry.make_environment(config.env_id, seed=0)
  spec = specs.make_environment_spec(env)
  tf.random.set_seed(0)
  net = networks.make_network(config, spec.actions.num_values)
  tf2_utils.create_variables(net, [spec.observations])
  ours = _dataset_items(config, net, spec)
  theirs = _dataset_items(config.replace(adder='acme_sequence'), net, spec)
  assert len(ours) == len(theirs) >= K * (STEPS // K // T - 2)
  assert ours[0][0].shape[0] == T + 1
  assert sorted(map(_digest, ours)) == sorted(map(_digest, theirs))


def _engine_items(config, net, spec, k, steps, **env_kwargs):
  return _run_items(config, net, spec, k, steps, first_seed=10,
                    **env_kwargs)[1]


def test_engines_write_the_same_atari_trajectories():
  """The same game, seeds and weights through both engines: Breakout with
  one no-op frame at a game's start (so that the engines' random no-op
  counts agree) as whole games, well inside the first game. The actor's
  actions depend only on what it sees, so the two queues must hold the
  same items, byte for byte: observations, previous actions and rewards,
  actions, rewards, discounts, episode starts, logits and LSTM states."""
  config = presets.get_config('atari').replace(
      env_id='ALE/Breakout-v5', unroll_length=T, lstm_size=32)
  spec = registry.environment_spec(config.env_id)
  tf.random.set_seed(0)
  net = networks.make_network(config, spec.actions.num_values)
  tf2_utils.create_variables(net, [spec.observations])
  kwargs = dict(noop_max=1, evaluation=True)
  ours = _engine_items(config.replace(env_engine='gymnasium'), net, spec, 2,
                       160, **kwargs)
  pools = _engine_items(config.replace(env_engine='envpool'), net, spec, 2,
                        160, **kwargs)
  assert len(ours) == len(pools) >= 2 * (160 // 2 // T - 1)
  for a, b in zip(sorted(ours, key=_digest), sorted(pools, key=_digest)):
    for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
      assert x.dtype == y.dtype and x.shape == y.shape
  assert sorted(map(_digest, ours)) == sorted(map(_digest, pools))


@pytest.mark.parametrize('engine', config_lib.ENV_ENGINES)
def test_engines_write_episode_ends_with_the_adapters_discounts(engine):
  """CartPole capped at 25 steps, through the actor and adder into Reverb:
  every episode end is a transition with discount 0 when the pole fell or
  the cart left the track (gymnasium's rule), 1 when the cap cut the
  episode, then Acme's terminal step (zero action, reward, discount), then
  a start of episode whose previous action and reward are 0; inside an
  episode the observation carries the previous step's action and reward."""
  cap = 25
  config = config_lib.IMPALAConfig(unroll_length=T, lstm_size=16,
                                   env_engine=engine)
  spec = registry.environment_spec(config.env_id)
  tf.random.set_seed(0)
  net = networks.make_network(config, spec.actions.num_values)
  tf2_utils.create_variables(net, [spec.observations])
  items = _engine_items(config, net, spec, K, 2000, max_episode_steps=cap)
  ends = {0.: 0, 1.: 0}
  for item in items:
    obs, start = item.observation, item.start_of_episode
    for t in range(len(start) - 1):
      if start[t + 1]:
        # Step t is the terminal step; t - 1 the episode's last transition.
        assert item.action[t] == 0 and item.reward[t] == 0.
        assert item.discount[t] == 0.
        assert obs.action[t + 1] == 0 and obs.reward[t + 1] == 0.
        if t >= 1 and not start[t]:
          x, theta = obs.observation[t, 0], obs.observation[t, 2]
          fell = abs(x) > 2.4 or abs(theta) > 12 * 2 * np.pi / 360
          assert item.discount[t - 1] == (0. if fell else 1.)
          ends[float(item.discount[t - 1])] += 1
      elif not start[t + 1] and item.discount[t] > 0:
        assert obs.action[t + 1] == item.action[t]
        assert obs.reward[t + 1] == item.reward[t]
  # Both kinds of episode end were written (and checked).
  assert ends[0.] >= 5 and ends[1.] >= 5, ends


class _RecordingActor:
  """The real batched actor, keeping the actions it chose."""

  def __init__(self, actor):
    self._actor = actor
    self.actions = []

  @property
  def num_envs(self):
    return self._actor.num_envs

  def observe_first(self, index, timestep):
    self._actor.observe_first(index, timestep)

  def select_actions(self, observations):
    self.actions.append(self._actor.select_actions(observations))
    return self.actions[-1]


def _eval_actor(config, k):
  spec = registry.environment_spec(config.env_id)
  builder = builder_lib.IMPALABuilder(config, spec)
  return _RecordingActor(builder.make_actor(
      builder.make_network(), seed=5, num_envs=k, batched=True))


@pytest.mark.parametrize('engine', config_lib.ENV_ENGINES)
def test_evaluation_round_is_each_environments_first_episode(engine):
  k, first_seed = 6, 11
  config = config_lib.IMPALAConfig(lstm_size=8, env_engine=engine)
  actor = _eval_actor(config, k)
  env = batched.make_batched_environment(
      config.env_id, seeds=range(first_seed, first_seed + k), engine=engine,
      evaluation=True)
  rows = loops.evaluation_episodes(env, actor)
  env.close()
  lengths = [row['episode_length'] for row in rows]
  # The round ends with its longest episode; shorter ones restarted before
  # that and their second episodes must not count.
  assert len(actor.actions) == max(lengths) > min(lengths) + 1
  for i, row in enumerate(rows):
    # Reference: environment i alone, same seed, the actions row i got.
    alone = batched.make_batched_environment(
        config.env_id, seeds=[first_seed + i], engine=engine,
        evaluation=True)
    timestep = alone.reset()
    episode_return, length = 0., 0
    while not timestep.step_type[0] == dm_env.StepType.LAST:
      timestep = alone.step(actor.actions[length][i:i + 1])
      episode_return += float(timestep.reward[0])
      length += 1
    alone.close()
    assert (row['episode_return'], row['episode_length']) == (
        episode_return, length)
    assert row['steps_per_second'] > 0


def test_evaluation_round_stops_when_asked_and_checks_sizes():
  config = config_lib.IMPALAConfig(lstm_size=8)
  env = batched.make_batched_environment(config.env_id, seeds=range(3),
                                              evaluation=True)
  assert loops.evaluation_episodes(env, _eval_actor(config, 3),
                                   should_stop=lambda: True) is None
  with pytest.raises(ValueError, match='3 environments.*num_envs=2'):
    loops.evaluation_episodes(env, _eval_actor(config, 2))
  env.close()
