"""IMPALALearner on real Reverb datasets, and swapping parts with Acme's IMPALA."""

import acme
from acme import datasets
from acme import specs
from acme.adders import reverb as acme_adders
from acme.agents.tf.impala import acting as acme_acting
from acme.agents.tf.impala import learning as acme_learning
from acme.tf import utils as tf2_utils
from acme.utils import loggers
import numpy as np
import pytest
import reverb
import tensorflow as tf

from acme_impala import acting
from acme_impala import agent as agent_lib
from acme_impala import config as config_lib
from acme_impala import environments
from acme_impala import learning
from acme_impala import networks

B, T = 4, 5


class _ListLogger(loggers.Logger):
  def __init__(self):
    self.rows = []

  def write(self, data):
    self.rows.append(dict(data))

  def close(self):
    pass


def _config(**kw):
  return config_lib.IMPALAConfig(unroll_length=T, batch_size=B, lstm_size=16,
                                 max_queue_size=1000, **kw)


def _network(config, spec, seed=0):
  tf.random.set_seed(seed)
  net = networks.make_network(config, spec.actions.num_values)
  tf2_utils.create_variables(net, [spec.observations])
  return net


@pytest.fixture(scope='module')
def filled_queue():
  """A real Reverb table filled by our actor: (server, spec, config)."""
  config = _config()
  env = environments.make_environment(config.env_id, seed=0)
  spec = specs.make_environment_spec(env)
  net = _network(config, spec)
  # Uniform sampling without removal: every test reads from the same items
  # (a queue would be drained by the tests' reads and block the later ones).
  table = reverb.Table(
      agent_lib.QUEUE_TABLE, sampler=reverb.selectors.Uniform(),
      remover=reverb.selectors.Fifo(), max_size=10_000,
      rate_limiter=reverb.rate_limiters.MinSize(1),
      signature=agent_lib.queue_signature(spec, net, config))
  server = reverb.Server([table], port=None)
  client = reverb.Client(f'localhost:{server.port}')
  adder = agent_lib.make_sequence_adder(client, config)
  actor = acting.IMPALAActor(net, adder, policy_version=tf.Variable(
      0, dtype=tf.int64), seed=0)
  acme.EnvironmentLoop(env, actor, should_update=False).run(num_steps=600)
  del adder
  yield server, spec, config
  server.stop()


def _batches(server, n):
  ds = datasets.make_reverb_dataset(
      server_address=f'localhost:{server.port}', table=agent_lib.QUEUE_TABLE,
      batch_size=B, num_parallel_calls=1)
  it = iter(ds)
  return [next(it) for _ in range(n)]


def test_learner_step_with_xla_on_real_dataset(filled_queue):
  server, spec, config = filled_queue
  assert config.compile_mode == 'vtrace_and_optimizer'  # XLA on by default.
  net = _network(config, spec)
  logger = _ListLogger()
  ds = datasets.make_reverb_dataset(
      server_address=f'localhost:{server.port}', table=agent_lib.QUEUE_TABLE,
      batch_size=B, num_parallel_calls=1)
  learner = learning.IMPALALearner(net, iter(ds), config, logger=logger)
  before = [v.numpy().copy() for v in net.trainable_variables]
  for _ in range(3):
    learner.step()
  assert learner.num_steps == 3
  after = [v.numpy() for v in net.trainable_variables]
  assert any(not np.allclose(a, b) for a, b in zip(before, after))
  row = logger.rows[-1]
  for key in ('loss', 'policy_loss', 'baseline_loss', 'entropy_loss',
              'entropy', 'grad_norm', 'clipped_rho_fraction', 'learning_rate',
              'policy_lag_mean', 'compile_time_s', 'steps_per_second',
              'samples_per_second', 'queue_wait_fraction', 'learner_steps'):
    assert key in row, key
    assert np.isfinite(row[key]), (key, row[key])
  assert row['learner_steps'] == 3
  assert row['compile_time_s'] > 0
  # The actor's weights were 0 learner steps old when it acted; the learner
  # is now at step 2 when it reads them.
  assert row['policy_lag_mean'] == 2.
  # Entropy of a 2-action policy is at most log 2.
  assert 0 < row['entropy'] <= np.log(2) + 1e-6


def test_compile_modes_agree(filled_queue):
  """XLA must not change the maths: one update from the same weights and
  batch gives the same new weights in every compile mode."""
  server, spec, config = filled_queue
  batch = _batches(server, 1)[0]
  results = {}
  for mode in config_lib.COMPILE_MODES:
    cfg = config.replace(compile_mode=mode)
    net = _network(cfg, spec, seed=1)
    learner = learning.IMPALALearner(net, iter([batch, batch]), cfg,
                                     logger=_ListLogger())
    learner.step()
    learner.step()
    results[mode] = [v.numpy() for v in net.trainable_variables]
  for mode in ('full', 'none'):
    for a, b in zip(results['vtrace_and_optimizer'], results[mode]):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_learning_rate_anneals_linearly_to_zero(filled_queue):
  server, spec, config = filled_queue
  batch = _batches(server, 1)[0]
  cfg = config.replace(lr_anneal_steps=4, learning_rate=1e-3)
  logger = _ListLogger()
  learner = learning.IMPALALearner(_network(cfg, spec), iter([batch] * 6),
                                   cfg, logger=logger)
  for _ in range(6):
    learner.step()
  lrs = [r['learning_rate'] for r in logger.rows]
  np.testing.assert_allclose(lrs, [1e-3, 7.5e-4, 5e-4, 2.5e-4, 0., 0.],
                             atol=1e-9)


def test_get_variables_honours_names(filled_queue):
  server, spec, config = filled_queue
  net = _network(config, spec)
  learner = learning.IMPALALearner(net, iter(_batches(server, 1)), config,
                                   logger=_ListLogger())
  learner.step()
  steps, policy = learner.get_variables(['learner_steps', 'policy'])
  assert steps == [1]
  assert len(policy) == len(net.variables)
  np.testing.assert_array_equal(policy[0], net.variables[0].numpy())
  assert learner.get_variables(['policy'])[0][0].shape == policy[0].shape
  with pytest.raises(ValueError, match="'critic'"):
    learner.get_variables(['critic'])


def test_acme_learner_trains_on_items_from_our_actor(filled_queue):
  server, spec, config = filled_queue
  net = _network(config, spec, seed=2)
  ds = datasets.make_reverb_dataset(
      server_address=f'localhost:{server.port}', table=agent_lib.QUEUE_TABLE,
      batch_size=B, num_parallel_calls=1)
  acme_learner = acme_learning.IMPALALearner(
      environment_spec=spec, network=net, dataset=ds, learning_rate=1e-3,
      logger=_ListLogger())
  before = [v.numpy().copy() for v in net.trainable_variables]
  acme_learner.step()
  acme_learner.step()
  after = [v.numpy() for v in net.trainable_variables]
  assert any(not np.allclose(a, b) for a, b in zip(before, after))


def test_our_learner_trains_on_items_from_acme_actor_and_adder():
  config = _config(record_policy_version=False)
  env = environments.make_environment(config.env_id, seed=1)
  spec = specs.make_environment_spec(env)
  net = _network(config, spec, seed=3)
  # Exactly Acme's IMPALA agent's table and adder (acme/agents/tf/impala).
  extra_spec = tf2_utils.squeeze_batch_dim({
      'core_state': net.initial_state(1),
      'logits': tf.ones(shape=(1, spec.actions.num_values), dtype=tf.float32)})
  table = reverb.Table.queue(
      name=acme_adders.DEFAULT_PRIORITY_TABLE, max_size=10_000,
      signature=acme_adders.SequenceAdder.signature(
          spec, extras_spec=extra_spec, sequence_length=T + 1))
  server = reverb.Server([table], port=None)
  address = f'localhost:{server.port}'
  adder = acme_adders.SequenceAdder(client=reverb.Client(address),
                                    period=T, sequence_length=T + 1)
  acme_actor = acme_acting.IMPALAActor(net, adder)
  acme.EnvironmentLoop(env, acme_actor, should_update=False).run(
      num_steps=300)
  ds = datasets.make_reverb_dataset(server_address=address, batch_size=B,
                                    num_parallel_calls=1)
  logger = _ListLogger()
  learner = learning.IMPALALearner(net, iter(ds), config, logger=logger)
  before = [v.numpy().copy() for v in net.trainable_variables]
  for _ in range(3):
    learner.step()
  after = [v.numpy() for v in net.trainable_variables]
  assert any(not np.allclose(a, b) for a, b in zip(before, after))
  assert np.isfinite(logger.rows[-1]['loss'])
  # Same network, data just written: on-policy, so no rho was clipped at
  # the first update (the learner has not moved yet).
  assert logger.rows[0]['clipped_rho_fraction'] == 0.
  del adder
  server.stop()


def test_trust_region_rejects_off_policy_transitions(filled_queue):
  """With a tiny KL threshold and a learner network unlike the actor's,
  transitions are masked out and counted; without one, none are."""
  server, spec, config = filled_queue
  batch = _batches(server, 1)[0]
  rejected = {}
  for b in (None, 1e-6):
    cfg = config.replace(kl_threshold=b)
    logger = _ListLogger()
    learner = learning.IMPALALearner(_network(cfg, spec, seed=7),
                                     iter([batch]), cfg, logger=logger)
    learner.step()
    rejected[b] = logger.rows[0]['rejected_fraction_online']
    assert np.isnan(logger.rows[0]['rejected_fraction_replay'])  # f = 0
  assert rejected[None] == 0.
  assert rejected[1e-6] > 0.5


def test_entropy_on_online_rows_only(filled_queue):
  """With f = 0.5 the second half of the batch is 'replayed': entropy is
  then measured on the first half only."""
  server, spec, config = filled_queue
  batch = _batches(server, 1)[0]
  entropies = {}
  for online_only in (False, True):
    cfg = config.replace(replay_fraction=0.5,
                         entropy_on_online_only=online_only)
    logger = _ListLogger()
    learner = learning.IMPALALearner(_network(cfg, spec, seed=5),
                                     iter([batch]), cfg, logger=logger)
    learner.step()
    entropies[online_only] = logger.rows[0]['entropy']
  half = tf.nest.map_structure(lambda x: x[:B // 2], batch.data)
  cfg = config.replace(replay_fraction=0.)
  logger = _ListLogger()
  learning.IMPALALearner(_network(cfg, spec, seed=5), iter([half]), cfg,
                         logger=logger).step()
  np.testing.assert_allclose(entropies[True], logger.rows[0]['entropy'],
                             rtol=1e-5)
  assert entropies[True] != entropies[False]
