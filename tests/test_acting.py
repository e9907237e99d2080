"""IMPALAActor in a real Reverb queue, driven by Acme's EnvironmentLoop."""

import time

import acme
from acme import datasets
from acme import specs
from acme.tf import utils as tf2_utils
from acme.utils import loggers
import numpy as np
import reverb
import tensorflow as tf

from acme_impala.agent import acting
from acme_impala.agent import builder as builder_lib
from acme_impala.agent import compat
from acme_impala.agent import config as config_lib
from acme_impala.agent import networks
from acme_impala.agent import types
from acme_impala.envs import registry

T = 5  # unroll length of these tests


def _setup(config, seed=0):
  env = registry.make_environment(config.env_id, seed=seed)
  spec = specs.make_environment_spec(env)
  tf.random.set_seed(seed)
  net = networks.make_network(config, spec.actions.num_values)
  tf2_utils.create_variables(net, [spec.observations])
  table = reverb.Table.queue(
      types.QUEUE_TABLE, max_size=10_000,
      signature=builder_lib.IMPALABuilder(config, spec).trajectory_signature(
          net))
  server = reverb.Server([table], port=None)
  return env, spec, net, server


def _read_items(server, n):
  ds = datasets.make_reverb_dataset(
      server_address=f'localhost:{server.port}',
      table=types.QUEUE_TABLE, batch_size=n, num_parallel_calls=1)
  return next(iter(ds)).data


def test_items_signature_extras_and_start_state():
  config = config_lib.IMPALAConfig(unroll_length=T, lstm_size=16)
  env, spec, net, server = _setup(config)
  client = reverb.Client(f'localhost:{server.port}')
  version = tf.Variable(7, dtype=tf.int64)
  actor = acting.IMPALAActor(
      net, builder_lib.IMPALABuilder(config, spec).make_adder(client),
      policy_version=version, seed=1)
  # Acme's own loop drives our actor.
  loop = acme.EnvironmentLoop(env, actor, should_update=False,
                              logger=loggers.NoOpLogger())
  loop.run(num_steps=300)
  size = client.server_info()[types.QUEUE_TABLE].current_size
  # One item of T+1 steps every T written steps (overlap by one); episode
  # ends add one dummy step each (Acme's adder), so a bit more than 300 / T.
  assert 300 // T - 1 <= size <= 2 * 300 // T

  data = _read_items(server, 16)
  assert data.action.shape == (16, T + 1) and data.action.dtype == tf.int32
  assert data.observation.observation.shape == (16, T + 1, 4)
  assert data.observation.action.shape == (16, T + 1)
  assert data.reward.dtype == tf.float32 and data.discount.dtype == tf.float32
  assert data.extras['logits'].shape == (16, T + 1, 2)
  assert data.extras['core_state'].hidden.shape == (16, T + 1, 16)

  # The LSTM state stored at step 0 of each item, with the item's
  # observations, reproduces the behaviour logits at every real step (dummy
  # steps before an episode start hold zeros), and the stored state at every
  # step: so the learner, with the same weights, is exactly on-policy.
  seq = tf2_utils.batch_to_sequence(data)
  state0 = tf.nest.map_structure(lambda s: s[0], seq.extras['core_state'])
  (logits, _), _ = net.unroll(seq.observation, state0, seq.start_of_episode)
  # Steps followed by an episode start are the adder's dummy steps; the last
  # step of an item only gives the bootstrap observation (and may be a dummy).
  real = ~np.concatenate(
      [seq.start_of_episode.numpy()[1:], np.ones((1, 16), bool)], 0)
  np.testing.assert_allclose(logits.numpy()[real],
                             seq.extras['logits'].numpy()[real], atol=1e-5)
  assert real.sum() > 0.8 * real.size
  np.testing.assert_array_equal(
      seq.extras['policy_version'].numpy()[:-1][real[:-1]], 7)
  starts = seq.start_of_episode.numpy()
  np.testing.assert_array_equal(
      seq.extras['core_state'].hidden.numpy()[starts], 0.)
  server.stop()


class _Source(acme.VariableSource):
  """A VariableSource serving weights, a step count and their version (as
  IMPALALearner does); it counts the calls and the weights it sends."""

  def __init__(self, variables, steps, epoch=5):
    self.variables, self.steps, self.epoch = variables, steps, epoch
    self.calls, self.policy_fetches = 0, 0

  def get_variables(self, names):
    self.calls += 1
    self.policy_fetches += types.POLICY_VARIABLES in names
    groups = {types.POLICY_VARIABLES: self.variables,
              types.LEARNER_STEPS: [np.int64(self.steps)],
              types.WEIGHTS_VERSION: [np.array([self.epoch, self.steps])]}
    return [groups[n] for n in names]


def _client_of_a_source(steps, update_period, versioned=False):
  """A variable client of a fresh network on a _Source serving 0.01 for
  every weight: (env, net, server, source, policy version, client)."""
  env, _, net, server = _setup(config_lib.IMPALAConfig(lstm_size=8))
  served = [np.full(v.shape, 0.01, v.dtype.as_numpy_dtype)
            for v in net.variables]
  source = _Source(served, steps=steps)
  version = tf.Variable(0, dtype=tf.int64)
  client = acting.make_variable_client(source, net, update_period,
                                       policy_version=version,
                                       versioned=versioned)
  return env, net, server, source, version, client


def test_variable_client_refreshes_weights_and_version():
  _, net, server, source, version, client = _client_of_a_source(
      steps=42, update_period=10)
  actor = acting.IMPALAActor(net, None, client, policy_version=version)
  for _ in range(9):
    actor.update()
  assert source.calls == 0  # Period not reached yet.
  actor.update(wait=True)
  assert source.calls == 1
  assert int(version.numpy()) == 42
  np.testing.assert_allclose(net.variables[0].numpy(), 0.01)
  server.stop()


def test_actor_without_adder_acts_and_is_seeded():
  config = config_lib.IMPALAConfig(lstm_size=8)
  env, spec, net, server = _setup(config)
  runs = []
  for _ in range(2):
    actor = acting.IMPALAActor(net, seed=3)
    ts = env.reset()
    actor.observe_first(ts)
    actions = [int(actor.select_action(ts.observation)) for _ in range(20)]
    runs.append(actions)
  assert runs[0] == runs[1]
  assert set(runs[0]) <= {0, 1}
  server.stop()


def test_sample_categorical_matches_softmax():
  rng = np.random.default_rng(0)
  logits = np.log(np.array([[0.2, 0.5, 0.3]] * 20000))
  counts = np.bincount(acting.sample_categorical(rng, logits), minlength=3)
  np.testing.assert_allclose(counts / 20000, [0.2, 0.5, 0.3], atol=0.015)


def test_an_evaluators_actor_fetches_every_round_whatever_the_period():
  """An evaluator (nodes.EvaluatorNode) makes its actor with
  variable_update_period=1: each round's weights are those at its start
  even when the actors refresh every 400 steps (PBT's fitness relies on
  it); without the override the config's period holds. Each round asks;
  only new weights are fetched."""
  config = config_lib.IMPALAConfig(lstm_size=8, variable_update_period=400)
  env, spec, _, server = _setup(config)
  builder = builder_lib.IMPALABuilder(config, spec)
  for period, expected in ((None, 0), (1, 5)):
    net = builder.make_network()
    source = _Source([v.numpy() for v in net.variables], steps=7)
    actor = builder.make_actor(net, None, source, num_envs=2,
                               variable_update_period=period)
    for _ in range(3):
      actor.update(wait=True)
    source.steps = 8
    actor.update(wait=True)
    assert source.calls == expected, period
    # The first round's weights and the new ones of the last.
    assert source.policy_fetches == (2 if period else 0), period
  server.stop()
  env.close()


def _wait_for_copy(client, source, fetches):
  deadline = time.time() + 30
  while source.policy_fetches < fetches or not compat.variable_update_idle(
      client):
    assert time.time() < deadline, 'no fetch in 30 s'
    client.update()
    time.sleep(0.001)


def test_versioned_client_copies_only_weights_it_has_not_copied():
  """VersionedVariableClient (what the builder's actors use) asks for the
  version at each request and fetches and copies the weights only when the
  version differs from the one it copied: a local change survives an
  unchanged version, a new step count or a new epoch (another learner
  process, PBT's copy) at the same step brings the source's weights back.
  Blocking and background updates alike."""
  env, net, server, source, version, client = _client_of_a_source(
      steps=3, update_period=1, versioned=True)
  assert isinstance(client, acting.VersionedVariableClient)
  client.update(wait=True)
  assert (source.calls, source.policy_fetches) == (1, 1)
  np.testing.assert_allclose(net.variables[0].numpy(), 0.01)
  assert int(version.numpy()) == 3

  net.variables[0].assign(tf.ones_like(net.variables[0]))
  client.update(wait=True)
  assert (source.calls, source.policy_fetches) == (2, 1)
  np.testing.assert_allclose(net.variables[0].numpy(), 1.)  # Not copied.

  source.steps = 4
  client.update(wait=True)
  assert (source.calls, source.policy_fetches) == (4, 2)
  np.testing.assert_allclose(net.variables[0].numpy(), 0.01)
  assert int(version.numpy()) == 4

  # In the background (update() without waiting): asks, and copies once
  # the version has moved, here by a new epoch at the same step.
  net.variables[0].assign(tf.ones_like(net.variables[0]))
  for _ in range(20):
    client.update()
  assert source.policy_fetches == 2
  np.testing.assert_allclose(net.variables[0].numpy(), 1.)
  source.epoch = 6
  _wait_for_copy(client, source, fetches=3)
  np.testing.assert_allclose(net.variables[0].numpy(), 0.01)
  server.stop()
  env.close()


def test_versioned_client_follows_a_real_learner():
  """Against a real IMPALALearner (in process): the actor's weights equal
  the learner's after each of its steps, with one weights fetch per step
  however often the actor asks."""
  config = config_lib.IMPALAConfig(lstm_size=8, batch_size=2,
                                   unroll_length=5)
  env, spec, _, server = _setup(config)
  builder = builder_lib.IMPALABuilder(config, spec)
  learner_net = builder.make_network(seed=1)
  batch = builder.warm_up_batch(learner_net)
  learner = builder.make_learner(learner_net, iter([batch] * 2),
                                 logger=loggers.NoOpLogger())
  fetches = []
  real_get = learner.get_variables

  def counting_get(names):
    fetches.append(types.POLICY_VARIABLES in names)
    return real_get(names)

  learner.get_variables = counting_get
  actor_net = builder.make_network(seed=2)
  actor = builder.make_actor(actor_net, None, learner, num_envs=2)
  for step in range(3):
    if step:
      learner.step()
    for _ in range(5):
      actor.update(wait=True)
    for a, b in zip(actor_net.variables, learner_net.variables):
      np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert sum(fetches) == 3 and len(fetches) == 17
  server.stop()
  env.close()


class _SteppingSource(_Source):
  """A source whose learner takes a step every `interval` seconds."""

  def __init__(self, variables, interval):
    super().__init__(variables, steps=0)
    self._start, self._interval = time.monotonic(), interval

  def get_variables(self, names):
    self.steps = int((time.monotonic() - self._start) / self._interval)
    return super().get_variables(names)


def test_versioned_client_paces_its_background_requests():
  """Background requests come at most every tenth of the learner's step
  interval (here 0.2 s: one per 20 ms) once the client has seen it step,
  however often the actor calls update(): ~75 in 1.5 s where an unpaced
  client would ask at every call (thousands); every new version is still
  copied, the last one within a few tenths of a second of the source's."""
  config = config_lib.IMPALAConfig(lstm_size=8)
  env, _, net, server = _setup(config)
  source = _SteppingSource([v.numpy() for v in net.variables], interval=0.2)
  version = tf.Variable(0, dtype=tf.int64)
  client = acting.make_variable_client(source, net, update_period=1,
                                       policy_version=version,
                                       versioned=True)
  start = time.monotonic()
  copied, calls_at_half_second = set(), None
  while time.monotonic() - start < 2.:
    client.update()
    copied.add(int(version.numpy()))
    if calls_at_half_second is None and time.monotonic() - start > 0.5:
      calls_at_half_second = source.calls
    time.sleep(0.0005)
  paced = source.calls - calls_at_half_second
  assert 10 <= paced < 300, paced
  assert len(copied) >= 8, copied  # ~10 steps, each picked up.
  deadline = time.monotonic() + 5
  target = source.steps + 1
  while int(version.numpy()) < target:
    assert time.monotonic() < deadline, (int(version.numpy()), target)
    client.update()
    time.sleep(0.001)
  server.stop()
  env.close()
