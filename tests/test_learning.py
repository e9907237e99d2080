"""IMPALALearner on real Reverb datasets, and swapping parts with Acme's IMPALA."""

import collections

import acme
from acme import datasets
from acme import specs
from acme.adders import reverb as acme_adders
from acme.agents.tf.impala import acting as acme_acting
from acme.agents.tf.impala import learning as acme_learning
from acme.tf import utils as tf2_utils
from acme.utils import loggers
import gymnasium
import numpy as np
import pytest
import reverb
import sonnet as snt
import tensorflow as tf
import tree

from acme_impala.agent import acting
from acme_impala.agent import builder as builder_lib
from acme_impala.agent import config as config_lib
from acme_impala.agent import learning
from acme_impala.agent import networks
from acme_impala.agent import replicas as replicas_lib
from acme_impala.agent import types
from acme_impala.distributed import pbt
from acme_impala.envs import adapter
from acme_impala.envs import registry

import learner_reference

B, T = 4, 5


def _config(**kw):
  return config_lib.IMPALAConfig(unroll_length=T, batch_size=B, lstm_size=16,
                                 max_queue_size=1000, **kw)


def _network(config, spec, seed=0):
  tf.random.set_seed(seed)
  net = networks.make_network(config, spec.actions.num_values)
  tf2_utils.create_variables(net, [spec.observations])
  return net


def _filled_server(config, num_steps, seed=0, in_order=False):
  """A real Reverb table filled by our actor: (server, spec). `in_order`:
  a queue, read in the order the actor wrote, so that a test sees the same
  items on every run."""
  env = registry.make_environment(config.env_id, seed=seed)
  spec = specs.make_environment_spec(env)
  net = _network(config, spec)
  builder = builder_lib.IMPALABuilder(config, spec)
  if in_order:  # Drained by its reads: for one test's items.
    table = reverb.Table.queue(types.QUEUE_TABLE, max_size=10_000,
                               signature=builder.trajectory_signature(net))
  else:
    # Uniform sampling without removal: every test of a module fixture reads
    # from the same items (a queue would be drained by the tests' reads and
    # block the later ones).
    table = reverb.Table(
        types.QUEUE_TABLE, sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(), max_size=10_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=builder.trajectory_signature(net))
  server = reverb.Server([table], port=None)
  client = reverb.Client(f'localhost:{server.port}')
  adder = builder.make_adder(client)
  actor = acting.IMPALAActor(net, adder, policy_version=tf.Variable(
      0, dtype=tf.int64), seed=seed)
  acme.EnvironmentLoop(env, actor, should_update=False,
                       logger=loggers.NoOpLogger()).run(num_steps=num_steps)
  del adder
  env.close()
  return server, spec


@pytest.fixture(scope='module')
def filled_queue():
  """A real Reverb table filled by our actor: (server, spec, config)."""
  config = _config()
  server, spec = _filled_server(config, num_steps=600)
  yield server, spec, config
  server.stop()


def _batches(server, n):
  ds = datasets.make_reverb_dataset(
      server_address=f'localhost:{server.port}', table=types.QUEUE_TABLE,
      batch_size=B, num_parallel_calls=1)
  it = iter(ds)
  return [next(it) for _ in range(n)]


def test_learner_step_with_xla_on_real_dataset(filled_queue):
  server, spec, config = filled_queue
  # The default is plain graph mode (measured faster on CartPole's and the
  # Atari net); the XLA-compiled sub-functions on a real dataset here.
  assert config.compile_mode == 'none'
  config = config.replace(compile_mode='vtrace_and_optimizer')
  net = _network(config, spec)
  logger = loggers.InMemoryLogger()
  ds = datasets.make_reverb_dataset(
      server_address=f'localhost:{server.port}', table=types.QUEUE_TABLE,
      batch_size=B, num_parallel_calls=1)
  learner = learning.IMPALALearner(net, iter(ds), config, logger=logger)
  before = [v.numpy().copy() for v in net.trainable_variables]
  for _ in range(3):
    learner.step()
  assert learner.num_steps == 3
  after = [v.numpy() for v in net.trainable_variables]
  assert any(not np.allclose(a, b) for a, b in zip(before, after))
  row = logger.data[-1]
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


@pytest.mark.parametrize('mode', ['vtrace_and_optimizer', 'none'])
def test_hyperparameters_set_after_tracing_act_as_if_built_with_them(
    filled_queue, tmp_path, mode):
  """PBT's explore (issue 39): a learner whose step is already traced, put
  back to its initial checkpoint and given other values of the mutable
  hyperparameters, makes exactly the update of a learner built with them;
  the checkpoint holds the values (a restore brings the old ones back)."""
  server, spec, config = filled_queue
  batch = _batches(server, 1)[0]
  first = config.replace(compile_mode=mode, learning_rate=1e-3,
                         entropy_cost=0.01, rmsprop_epsilon=1e-5)
  changed = dict(learning_rate=4e-3, entropy_cost=0.05, rmsprop_epsilon=1e-3)
  assert set(changed) == set(learning.MUTABLE_HYPERPARAMETERS)
  assert set(learning.MUTABLE_HYPERPARAMETERS) == set(pbt.HYPERPARAMETERS)

  net = _network(first, spec, seed=1)
  logger = loggers.InMemoryLogger()
  learner = learning.IMPALALearner(net, iter([batch, batch]), first,
                                   logger=logger)
  checkpoint = tf.train.Checkpoint(**learner.state)
  path = checkpoint.save(str(tmp_path / 'initial'))
  learner.step()  # Traced and run with the first values.
  checkpoint.restore(path)
  assert learner.hyperparameters == pytest.approx(dict(
      learning_rate=1e-3, entropy_cost=0.01, rmsprop_epsilon=1e-5))
  learner.set_hyperparameters(changed)
  assert learner.hyperparameters == pytest.approx(changed)
  learner.step()

  reference_net = _network(first, spec, seed=1)
  reference_logger = loggers.InMemoryLogger()
  reference = learning.IMPALALearner(
      reference_net, iter([batch]), first.replace(**changed),
      logger=reference_logger)
  reference.step()
  for a, b in zip(net.trainable_variables, reference_net.trainable_variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
  for key in ('learning_rate', 'entropy_loss', 'loss', 'grad_norm'):
    assert logger.data[-1][key] == pytest.approx(
        reference_logger.data[-1][key], rel=1e-5), key
  # And it differs from the update with the first values.
  assert logger.data[0]['learning_rate'] == pytest.approx(1e-3)
  with pytest.raises(ValueError, match=r"\['discount'\] cannot change"):
    learner.set_hyperparameters({'discount': 0.9})
  with pytest.raises(ValueError, match='positive'):
    learner.set_hyperparameters({'learning_rate': -1.})


def test_training_state_copy_makes_the_target_continue_as_the_source(
    filled_queue):
  """PBT's exploit (issue 39): a learner given another's training state
  holds exactly its weights, RMSProp slots and hyperparameters (checked
  after the copy, array by array and by the digest the copy returns), keeps
  its own step count, and then makes exactly the source's next update."""
  server, spec, config = filled_queue
  batches = _batches(server, 3)
  source_config = config.replace(learning_rate=2e-3, entropy_cost=0.02)
  target_config = config.replace(learning_rate=5e-4, entropy_cost=0.005,
                                 rmsprop_epsilon=1e-3)
  source_net = _network(source_config, spec, seed=1)
  target_net = _network(target_config, spec, seed=2)
  source = learning.IMPALALearner(
      source_net, iter([batches[0], batches[0], batches[2]]), source_config,
      logger=loggers.NoOpLogger())
  target = learning.IMPALALearner(
      target_net, iter([batches[1], batches[2]]), target_config,
      logger=loggers.NoOpLogger())
  source.step()
  source.step()
  target.step()
  assert source.training_state_digest() != target.training_state_digest()
  state = source.get_training_state()
  # [weights], [mean squares, momenta] of the network's variables.
  assert len(state['optimizer']) == 2 * len(source_net.trainable_variables)
  n = len(source_net.trainable_variables)
  assert all(np.any(ms != source_config.rmsprop_initial_mean_square)
             for ms in state['optimizer'][:n])  # The mean squares moved.

  digest = target.set_training_state(state)

  assert digest == state['digest'] == source.training_state_digest()
  for a, b in zip(source_net.variables, target_net.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  for group in ('ms', 'mom'):
    for a, b in zip(getattr(source._optimizer, group),  # pylint: disable=protected-access
                    getattr(target._optimizer, group)):  # pylint: disable=protected-access
      np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert target.hyperparameters == source.hyperparameters
  assert (source.num_steps, target.num_steps) == (2, 1)
  source.step()
  target.step()
  for a, b in zip(source_net.trainable_variables,
                  target_net.trainable_variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-8)

  bad = dict(state, network=state['network'][:-1])
  with pytest.raises(ValueError, match='network arrays'):
    target.set_training_state(bad)
  wrong = dict(state, optimizer=[np.zeros((3, 3))] + state['optimizer'][1:])
  with pytest.raises(ValueError, match=r'shape \(3, 3\)'):
    target.set_training_state(wrong)


class _UnrollOnly(snt.Module):
  """A network with `unroll` alone, as a user's may be: the learner hands
  it the batch transposed to time-major instead of embedding the frames
  batch-major (IMPALANetwork's `embed_sequence`)."""

  def __init__(self, net):
    super().__init__(name='unroll_only')
    self._net = net

  def unroll(self, inputs, state, start_of_episode):
    return self._net.unroll(inputs, state, start_of_episode)

  def initial_state(self, batch_size):
    return self._net.initial_state(batch_size)


def test_compile_modes_agree(filled_queue):
  """XLA, the ops' threading and the batch-major torso must not change the
  maths: two updates from the same weights and batch give the same new
  weights in every compile mode, with each op on one thread or on
  TensorFlow's pool, and for a network the learner can only `unroll`."""
  server, spec, config = filled_queue
  batch = _batches(server, 1)[0]
  results = {}
  runs = {mode: config.replace(compile_mode=mode)
          for mode in config_lib.COMPILE_MODES}
  for threads in (0, 1):
    runs[f'threads={threads}'] = config.replace(
        learner_intra_op_threads=threads)
  runs['unroll only'] = config
  for mode, cfg in runs.items():
    net = _network(cfg, spec, seed=1)
    learner_net = _UnrollOnly(net) if mode == 'unroll only' else net
    learner = learning.IMPALALearner(learner_net, iter([batch, batch]), cfg,
                                     logger=loggers.InMemoryLogger())
    learner.step()
    learner.step()
    results[mode] = [v.numpy() for v in net.trainable_variables]
  for mode in ('full', 'none', 'threads=0', 'threads=1', 'unroll only'):
    for a, b in zip(results['vtrace_and_optimizer'], results[mode]):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_intra_op_threads_is_one_for_the_mlp_torso_unless_set():
  config = config_lib.IMPALAConfig()
  assert config.learner_intra_op_threads is None
  assert learning.intra_op_threads(config.replace(network='mlp_lstm')) == 1
  for network in ('shallow', 'deep', 'minatar'):
    assert learning.intra_op_threads(config.replace(network=network)) == 0
  assert learning.intra_op_threads(config.replace(
      network='mlp_lstm', learner_intra_op_threads=0)) == 0
  assert learning.intra_op_threads(config.replace(
      network='deep', learner_intra_op_threads=2)) == 2


def test_bfloat16_torso_updates_track_float32(bfloat16_runs):
  """The shallow torso in bfloat16 must not change what the learner learns:
  from the same weights, 12 updates on the same batches of real Breakout
  items (frames, life-loss episode ends) move the weights as float32's do,
  to within 5 % of float32's own change, and the two networks' policies on
  the batch stay within a KL of 1e-4."""
  # The same items on every run: over 25 batches sampled at random the gap
  # ranged 0.7-6.5 % of float32's change (its size depends on the batch), so
  # a random draw made the 5 % bound a coin with a heavy tail. These items
  # give 2.0 % (AMD EPYC with AVX512-BF16, on one core or two). A mean square
  # started at 1 keeps RMSProp's first updates linear in the gradient, so the
  # gap measures bfloat16's gradients; started at 0 (the default) they are
  # ~10 lr sign(g), and gradients within rounding of 0 flip (3.8 % here).
  config = _config(env_id='ALE/Breakout-v5', network='shallow',
                   learning_rate=1e-3, rmsprop_initial_mean_square=1.)
  server, spec = _filled_server(config, num_steps=150, in_order=True)
  try:
    batches = _batches(server, 3)
  finally:
    server.stop()
  sequence = tf2_utils.batch_to_sequence(batches[0].data)  # [T+1, B, ...]
  weights = {}
  for dtype in config_lib.TORSO_DTYPES:
    cfg = config.replace(torso_dtype=dtype)
    net = _network(cfg, spec, seed=3)
    start = [v.numpy().copy() for v in net.trainable_variables]
    learner = learning.IMPALALearner(net, iter(batches * 4), cfg,
                                     logger=loggers.InMemoryLogger())
    for _ in range(12):
      learner.step()
    weights[dtype] = [v.numpy() for v in net.trainable_variables]
    (logits, _), _ = net.unroll(
        sequence.observation,
        tree.map_structure(lambda x: x[0], sequence.extras['core_state']))
    weights[dtype + '_logits'] = tf.nn.log_softmax(logits).numpy()
  total_change = total_gap = 0.
  for v, w0, f32, bf16 in zip(net.trainable_variables, start,
                              weights['float32'], weights['bfloat16']):
    change, gap = np.linalg.norm(f32 - w0), np.linalg.norm(bf16 - f32)
    # Every variable learns as float32's does (a torso cut off from its
    # gradients would not move: gap == change); the first layer's bias,
    # whose gradient sums many cancelling terms, is the least precise (up
    # to 0.3 of its tiny change in repeated runs).
    assert gap < 0.75 * change, (v.name, gap, change)
    total_change += change ** 2
    total_gap += gap ** 2
  assert total_gap < 0.05 ** 2 * total_change, (total_gap, total_change)
  p_f32, p_bf16 = weights['float32_logits'], weights['bfloat16_logits']
  kl = (np.exp(p_f32) * (p_f32 - p_bf16)).sum(-1)
  assert kl.max() < 1e-4, kl.max()


def test_learning_rate_anneals_linearly_to_zero(filled_queue):
  server, spec, config = filled_queue
  batch = _batches(server, 1)[0]
  cfg = config.replace(lr_anneal_steps=4, learning_rate=1e-3)
  logger = loggers.InMemoryLogger()
  learner = learning.IMPALALearner(_network(cfg, spec), iter([batch] * 6),
                                   cfg, logger=logger)
  for _ in range(6):
    learner.step()
  lrs = [r['learning_rate'] for r in logger.data]
  np.testing.assert_allclose(lrs, [1e-3, 7.5e-4, 5e-4, 2.5e-4, 0., 0.],
                             atol=1e-9)


def test_get_variables_honours_names(filled_queue):
  server, spec, config = filled_queue
  net = _network(config, spec)
  learner = learning.IMPALALearner(net, iter(_batches(server, 1)), config,
                                   logger=loggers.InMemoryLogger())
  learner.step()
  steps, policy = learner.get_variables(['learner_steps', 'policy'])
  assert steps == [1]
  assert len(policy) == len(net.variables)
  np.testing.assert_array_equal(policy[0], net.variables[0].numpy())
  assert learner.get_variables(['policy'])[0][0].shape == policy[0].shape
  with pytest.raises(ValueError, match="'critic'"):
    learner.get_variables(['critic'])


def test_weights_version_changes_exactly_when_the_weights_may_have(
    filled_queue):
  """The served `weights_version` (what VersionedVariableClient compares)
  stays put while nothing changes the weights, moves with each step and
  with a copied training state even at the same step count, and differs
  between two learners (processes) at the same step; it is read before the
  weights of the same call."""
  server, spec, config = filled_queue
  batches = _batches(server, 2)

  def version(learner):
    return tuple(learner.get_variables([types.WEIGHTS_VERSION])[0][0])

  net = _network(config, spec, seed=1)
  learner = learning.IMPALALearner(net, iter(batches), config,
                                   logger=loggers.NoOpLogger())
  other = learning.IMPALALearner(_network(config, spec, seed=1),
                                 iter(batches), config,
                                 logger=loggers.NoOpLogger())
  v0 = version(learner)
  assert v0[1] == 0 and version(learner) == v0
  assert version(other) != v0  # Another process's weights at step 0.
  learner.step()
  v1 = version(learner)
  assert v1 == (v0[0], 1) and version(learner) == v1
  digest = learner.set_training_state(other.get_training_state())
  assert digest == other.training_state_digest()
  v2 = version(learner)
  assert v2[1] == 1 and v2 != v1  # New weights at the same step.
  served, policy = learner.get_variables([types.WEIGHTS_VERSION, 'policy'])
  assert tuple(served[0]) == v2
  np.testing.assert_array_equal(policy[0], net.variables[0].numpy())


def test_step_count_moves_only_after_every_weight_update():
  """Graph functions order stateful ops per variable only: without a
  control dependency the step count, which the served version carries,
  could be incremented before the new weights are written, and an actor
  would take old weights for new ones. In the traced update the
  increment depends on every RMSProp apply, in each compile mode."""
  for mode in config_lib.COMPILE_MODES:
    config = _config(compile_mode=mode)
    env = registry.make_environment(config.env_id, seed=0)
    spec = specs.make_environment_spec(env)
    env.close()
    net = _network(config, spec)
    builder = builder_lib.IMPALABuilder(config, spec)
    learner = builder.make_learner(net, iter(()), logger=loggers.NoOpLogger())
    sample = builder.warm_up_batch(net)
    graph = learner._step_fn.get_concrete_function(  # pylint: disable=protected-access
        *learner._update_arguments(sample)).graph  # pylint: disable=protected-access
    increments = [op for op in graph.get_operations()
                  if op.type == 'AssignAddVariableOp']
    assert len(increments) == 1, mode

    def ancestors(op):
      seen, stack = set(), [op]
      while stack:
        child = stack.pop()
        for parent in list(child.control_inputs) + [
            t.op for t in child.inputs]:
          if parent not in seen:
            seen.add(parent)
            stack.append(parent)
      return seen

    def applies(op):
      """The RMSProp applies `op` runs: itself, or in the function it
      calls (the XLA-compiled apply: a call returns once its body ran)."""
      if op.type == 'ResourceApplyRMSProp':
        return 1
      if op.type.endswith('PartitionedCall'):
        body = graph._get_function(op.get_attr('f').name).graph  # pylint: disable=protected-access
        return sum(applies(inner) for inner in body.get_operations())
      return 0

    total = sum(applies(op) for op in graph.get_operations())
    assert total == len(net.trainable_variables), mode
    before = sum(applies(op) for op in ancestors(increments[0]))
    assert before == total, mode


class _NoSnapshots:
  """Stands in for Acme's Snapshotter, which exports a SavedModel to
  ~/acme at the learner's first step: outside the test's directory, and
  most of the test's time."""

  def __init__(self, *unused_args, **unused_kwargs):
    pass

  def save(self, force=False):
    del force
    return False


def test_acme_learner_trains_on_items_from_our_actor(filled_queue,
                                                      monkeypatch):
  monkeypatch.setattr(acme_learning.tf2_savers, 'Snapshotter', _NoSnapshots)
  server, spec, config = filled_queue
  net = _network(config, spec, seed=2)
  ds = datasets.make_reverb_dataset(
      server_address=f'localhost:{server.port}', table=types.QUEUE_TABLE,
      batch_size=B, num_parallel_calls=1)
  acme_learner = acme_learning.IMPALALearner(
      environment_spec=spec, network=net, dataset=ds, learning_rate=1e-3,
      logger=loggers.InMemoryLogger())
  before = [v.numpy().copy() for v in net.trainable_variables]
  acme_learner.step()
  acme_learner.step()
  after = [v.numpy() for v in net.trainable_variables]
  assert any(not np.allclose(a, b) for a, b in zip(before, after))


def _short_cartpole(max_episode_steps, seed):
  """CartPole whose episodes are truncated after `max_episode_steps`."""
  return adapter.ObservationActionRewardWrapper(
      adapter.GymnasiumToDMEnv(
          gymnasium.make('CartPole-v1', max_episode_steps=max_episode_steps),
          seed=seed))


def _zero_pad_rows(data):
  """Per row of [N, T+1] items: 'terminal' / 'truncation' when an episode
  ends inside the item followed by the adder's dummy step and at least one
  ZERO_PAD step (all zeros, no episode start) to the end; else None."""
  logits = np.asarray(data.extras['logits'])
  written = np.all(logits == 0, axis=-1)  # [N, T+1]
  discount = np.asarray(data.discount)
  start = np.asarray(data.start_of_episode)
  flat = [np.asarray(x).reshape(logits.shape[:2] + (-1,))
          for x in tf.nest.flatten(data)]
  all_zero = np.all([np.all(x == 0, axis=-1) for x in flat], axis=0)
  kinds = []
  for b in range(logits.shape[0]):
    kind = None
    for t in range(T - 1):
      # Step t is the episode's last real step, t+1 the dummy (holding the
      # final observation), t+2.. T zero padding.
      if (not written[b, t] and written[b, t + 1] and
          not all_zero[b, t + 1] and np.all(all_zero[b, t + 2:]) and
          not np.any(start[b, t + 1:])):
        kind = 'terminal' if discount[b, t] == 0 else 'truncation'
        break
    kinds.append(kind)
  return kinds


def test_our_learner_trains_on_items_from_acme_actor_and_adder():
  """Acme's IMPALA actor and Acme's default SequenceAdder (ZERO_PAD): the
  learner's first update is computed on exactly the loss the independent
  reference (tests/learner_reference.py) gives for the batch it read,
  padding included."""
  config = _config(record_policy_version=False)
  # Short episodes (a time limit of 12 steps, and CartPole's own terminals
  # under a near-uniform policy) end inside items.
  env = _short_cartpole(max_episode_steps=12, seed=1)
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
  client = reverb.Client(address)
  adder = acme_adders.SequenceAdder(client=client, period=T,
                                    sequence_length=T + 1)
  assert adder._end_of_episode_behavior is acme_adders.EndBehavior.ZERO_PAD  # pylint: disable=protected-access
  acme_actor = acme_acting.IMPALAActor(net, adder)
  acme.EnvironmentLoop(env, acme_actor, should_update=False,
                       logger=loggers.NoOpLogger()).run(num_steps=500)
  num_items = client.server_info()[
      acme_adders.DEFAULT_PRIORITY_TABLE].current_size
  assert num_items >= 3 * B
  ds = datasets.make_reverb_dataset(server_address=address,
                                    batch_size=num_items,
                                    num_parallel_calls=1)
  items = tf2_utils.to_numpy(next(iter(ds)).data)  # Every item, in order.
  del adder
  server.stop()

  # The first learner batch: one item ending in a terminal then ZERO_PAD,
  # one ending in a truncation then ZERO_PAD, the first item of an episode
  # and one from an episode's middle (its recorded LSTM state nonzero).
  kinds = _zero_pad_rows(items)
  start0 = items.start_of_episode[:, 0]
  hidden0 = items.extras['core_state'].hidden[:, 0]
  whole = [b for b in range(num_items) if kinds[b] is None and
           not items.start_of_episode[b].any() and
           not np.all(items.extras['logits'][b] == 0, axis=-1).any()]
  assert 'terminal' in kinds and 'truncation' in kinds and whole, (
      'the run should end episodes inside items both ways, and have an item '
      f'inside an episode: {collections.Counter(kinds)}')
  rows = [kinds.index('terminal'), kinds.index('truncation'),
          int(np.flatnonzero(start0)[0]), whole[0]]
  assert np.any(hidden0[rows[3]] != 0)
  assert len(set(rows)) == B
  rest = [b for b in range(num_items) if b not in rows]
  select = lambda idx: tf.nest.map_structure(
      lambda x: tf.constant(x[idx]), items)
  batch = select(rows)
  later = [select(rest[:B]), select(rest[B:2 * B])]

  # The batch really holds ZERO_PAD padding after both kinds of episode end:
  # steps after a discount-0 step with no episode start, all zeros.
  assert _zero_pad_rows(batch)[:2] == ['terminal', 'truncation']
  for b in (0, 1):
    dummy = np.flatnonzero(np.all(
        batch.extras['logits'][b].numpy() == 0, axis=-1))[0]
    assert batch.discount[b, dummy] == 0
    assert not batch.start_of_episode[b, dummy:].numpy().any()
    assert dummy + 1 <= T
    assert np.all(batch.observation.observation[b, dummy + 1:].numpy() == 0)

  # The independent reference, on the weights the first update starts from.
  expected, mask = learner_reference.learner_loss(net, batch, config)
  got_mask = learning.valid_transitions(
      tf.transpose(batch.start_of_episode),
      tf.transpose(batch.discount[:, :-1]),
      tf.transpose(batch.extras['logits'][:, :-1], [1, 0, 2])).numpy().T
  np.testing.assert_array_equal(got_mask, mask)
  assert 0 < mask.sum() < B * T  # Padding was masked out, real steps kept.

  logger = loggers.InMemoryLogger()
  learner = learning.IMPALALearner(net, iter([batch] + later), config,
                                   logger=logger)
  before = [v.numpy().copy() for v in net.trainable_variables]
  for _ in range(3):
    learner.step()
  after = [v.numpy() for v in net.trainable_variables]
  assert any(not np.allclose(a, b) for a, b in zip(before, after))
  assert np.isfinite(logger.data[-1]['loss'])
  # The data is on-policy (pi = mu up to float rounding), so every rho sits
  # on the clipping threshold 1 and which side of it the reference's float64
  # ratios land on is rounding: clipped_rho_fraction is left out.
  learner_reference.assert_logged_matches(
      logger.data[0], expected,
      keys=tuple(k for k in learner_reference.LOSS_KEYS +
                 learner_reference.DIAGNOSTIC_KEYS
                 if k != 'clipped_rho_fraction'))
  # Same network, data just written: on-policy, so no rho was clipped at
  # the first update (the learner has not moved yet; its unroll reproduces
  # the actor's float32 logits).
  np.testing.assert_allclose(logger.data[0]['mean_rho'], 1., atol=1e-5)
  assert logger.data[0]['clipped_rho_fraction'] == 0.


def test_trust_region_rejects_off_policy_transitions(filled_queue):
  """With a tiny KL threshold and a learner network unlike the actor's,
  transitions are masked out and counted; without one, none are."""
  server, spec, config = filled_queue
  batch = _batches(server, 1)[0]
  rejected = {}
  for b in (None, 1e-6):
    cfg = config.replace(kl_threshold=b)
    logger = loggers.InMemoryLogger()
    learner = learning.IMPALALearner(_network(cfg, spec, seed=7),
                                     iter([batch]), cfg, logger=logger)
    learner.step()
    rejected[b] = logger.data[0]['rejected_fraction_online']
    assert np.isnan(logger.data[0]['rejected_fraction_replay'])  # f = 0
  assert rejected[None] == 0.
  assert rejected[1e-6] > 0.5


def test_entropy_on_online_rows_only(filled_queue):
  """The batch says which rows are online (types.Batch.online); with
  entropy_on_online_only the entropy is measured on those rows only."""
  server, spec, config = filled_queue
  sample = _batches(server, 1)[0]
  batch = types.Batch(data=sample.data,
                      online=tf.constant([True] * (B // 2) +
                                         [False] * (B - B // 2)))
  entropies = {}
  for online_only in (False, True):
    cfg = config.replace(replay_fraction=0.5, replay_core_state='stored',
                         entropy_on_online_only=online_only)
    logger = loggers.InMemoryLogger()
    learner = learning.IMPALALearner(_network(cfg, spec, seed=5),
                                     iter([batch]), cfg, logger=logger)
    learner.step()
    entropies[online_only] = logger.data[0]['entropy']
  half = tf.nest.map_structure(lambda x: x[:B // 2], sample.data)
  cfg = config.replace(replay_fraction=0.)
  logger = loggers.InMemoryLogger()
  learning.IMPALALearner(_network(cfg, spec, seed=5), iter([half]), cfg,
                         logger=logger).step()
  np.testing.assert_allclose(entropies[True], logger.data[0]['entropy'],
                             rtol=1e-5)
  assert entropies[True] != entropies[False]


def test_data_metrics_measure_staleness_on_this_agents_rows_only():
  """In a shared replay, rows written by another agent's actors carry that
  agent's step counter: they are left out of this learner's staleness."""
  t, b = 3, 4
  mask = tf.ones([t, b])
  online = tf.constant([1., 0., 0., 0.])
  # Rows: online (agent 0, version 9), replayed from agent 0 (versions 4
  # and 6) and replayed from agent 1 (version 100, another counter).
  versions = np.array([9, 4, 6, 100], np.int64)
  agents = np.array([0, 0, 0, 1], np.int32)
  extras = {
      'policy_version': tf.constant(np.tile(versions, (t + 1, 1))),
      'agent_id': tf.constant(np.tile(agents, (t + 1, 1))),
  }
  metrics = learning.data_metrics(mask, online, None, extras,
                                  learner_step=10, agent_id=0)
  # Hand-worked: lag 10 - 9 = 1 online; staleness mean of 10 - 4 and 10 - 6.
  assert float(metrics['policy_lag_mean']) == 1.
  assert float(metrics['policy_lag_max']) == 1.
  assert float(metrics['replay_staleness_mean']) == 5.
  # Agent 1's learner sees its own row only (100 is ahead of its step 120).
  other = learning.data_metrics(mask, online, None, extras,
                                learner_step=120, agent_id=1)
  assert float(other['replay_staleness_mean']) == 20.
  assert np.isnan(float(other['policy_lag_mean']))
  # Without agent ids (an older or foreign actor) every row counts.
  del extras['agent_id']
  mixed = learning.data_metrics(mask, online, None, extras,
                                learner_step=10, agent_id=0)
  np.testing.assert_allclose(float(mixed["replay_staleness_mean"]),
                             (6 + 4 - 90) / 3, rtol=1e-6)


def test_burn_in_warms_replayed_states_with_the_current_network(filled_queue):
  """replay_core_state='burn_in': a replayed row's stored state is run
  through its first k steps by the learner's network, those transitions are
  not learned from and pass no gradient. Reference: the same network stepped
  one step at a time over the k steps (resetting at episode starts), then an
  ordinary learner on the remaining steps from that state: same loss, same
  gradient (its norm; any gradient through the burn-in would change it)."""
  server, spec, config = filled_queue
  k = 2
  sample = _batches(server, 1)[0].data
  replayed = types.Batch(data=sample, online=tf.constant([False] * B))
  cfg = config.replace(replay_fraction=1.0, replay_core_state='burn_in',
                       burn_in_length=k)
  logger = loggers.InMemoryLogger()
  learning.IMPALALearner(_network(cfg, spec, seed=5), iter([replayed]), cfg,
                         logger=logger).step()
  burned = logger.data[0]

  net = _network(config, spec, seed=5)
  data = tf2_utils.batch_to_sequence(sample)  # [T+1, B, ...]
  state = tree.map_structure(lambda s: s[0],
                             data.extras[types.CORE_STATE])
  zero = net.initial_state(B)
  for t in range(k):
    reset = tf.cast(data.start_of_episode[t], tf.bool)[:, None]
    state = tree.map_structure(lambda z, s, r=reset: tf.where(r, z, s),
                               zero, state)
    _, state = net(tree.map_structure(lambda x, t=t: x[t], data.observation),
                   state)
  rest = tree.map_structure(lambda x: x[:, k:], sample)
  extras = dict(rest.extras)
  # The reference starts the remaining steps from the stepped state.
  extras[types.CORE_STATE] = tree.map_structure(
      lambda s, full: tf.concat([s[:, None], full[:, 1:]], 1), state,
      rest.extras[types.CORE_STATE])
  rest = rest._replace(extras=extras)
  logger = loggers.InMemoryLogger()
  learning.IMPALALearner(net, iter([rest]), config, logger=logger).step()
  reference = logger.data[0]
  for key in ('loss', 'policy_loss', 'baseline_loss', 'entropy', 'grad_norm',
              'num_valid_steps'):
    np.testing.assert_allclose(burned[key], reference[key], rtol=2e-4,
                               err_msg=key)

  # Without burn-in the same batch learns from every transition.
  cfg = config.replace(replay_fraction=1.0, replay_core_state='stored')
  logger = loggers.InMemoryLogger()
  learning.IMPALALearner(_network(cfg, spec, seed=5), iter([replayed]), cfg,
                         logger=logger).step()
  assert logger.data[0]['num_valid_steps'] > burned['num_valid_steps']


def test_burn_in_mask_covers_replayed_rows_only():
  mask = learning.replay_burn_in_mask(tf.constant([True, False, False]), 4, 2)
  np.testing.assert_array_equal(mask.numpy(), [[0, 1, 1], [0, 1, 1],
                                               [0, 0, 0], [0, 0, 0]])


# -- LASER's recomputed states (replay_core_state='recompute'). --------------


def _step_network(net, weights, observations, starts, state):
  """Reference: `net` with `weights`, stepped one step at a time over
  [n, R, ...] observations from `state`, reset at episode starts as the
  actor resets it. Returns the state after the n steps."""
  for variable, value in zip(net.variables, weights):
    variable.assign(value)
  initial = net.initial_state(starts.shape[1])
  for t in range(starts.shape[0]):
    reset = tf.constant(starts[t])[:, None]
    state = tree.map_structure(lambda i, s, r=reset: tf.where(r, i, s),
                               initial, state)
    _, state = net(tree.map_structure(lambda x, t=t: x[t], observations),
                   state)
  return state


def _check_walks(learner, net, iterator, reference_net, num_online, steps,
                 reader_id=None):
  """Steps the learner and checks every replayed row's carried state
  against the reference chain started at each walk's first window.

  Returns per learner step the rows' stored core states at the first step
  of their windows and the reference states carried into them."""
  recorded = []

  def tap():
    for batch in iterator:
      recorded.append(batch)
      yield batch

  learner._iterator = tap()  # pylint: disable=protected-access
  reference, continued, comparisons = None, 0, []
  for _ in range(steps):
    weights = [v.numpy() for v in net.variables]
    learner.step()
    batch = recorded[-1]
    walk_start = batch.walk_start.numpy()[num_online:]
    data = tf2_utils.batch_to_sequence(tree.map_structure(
        lambda x: x[num_online:], batch.data))  # [T+1, R, ...]
    starts = data.start_of_episode.numpy().astype(bool)
    rows = len(walk_start)
    fresh = reference_net.initial_state(rows)
    if reference is None:
      reference = fresh
    entering = tree.map_structure(
        lambda f, r: tf.where(tf.constant(walk_start)[:, None], f, r),
        fresh, reference)
    continued += int((~walk_start).sum())
    if (~walk_start).any():
      stored = tree.map_structure(lambda s: s[0].numpy(),
                                  data.extras[types.CORE_STATE])
      comparisons.append((~walk_start, stored,
                          tree.map_structure(np.asarray, entering)))
    reference = _step_network(
        reference_net, weights,
        tree.map_structure(lambda x: x[:T], data.observation), starts[:T],
        entering)
    for got, want in zip(tree.flatten(learner.walk_states),
                         tree.flatten(reference)):
      np.testing.assert_allclose(got, want.numpy(), atol=2e-5)
    if reader_id is not None:
      writers = data.extras[types.AGENT_ID].numpy()
      assert (writers[~starts] != reader_id).all()
  assert continued >= 2 * T
  return comparisons


def _laser_setup(replay_fraction, seed, agent_id=0, builder=None, **kw):
  config = _config(replay_fraction=replay_fraction, replay_capacity=1000,
                   min_replay_size=6, **kw)
  env = registry.make_environment(config.env_id, seed=seed)
  spec = specs.make_environment_spec(env)
  builder = builder or builder_lib.IMPALABuilder(config, spec)
  return config, env, spec, builder


def test_recompute_carries_the_network_state_from_each_episode_start():
  """Each replayed row starts from the state the learner's network reaches
  when stepped one step at a time from its episode's first step, over the
  windows the row walked (with the weights the learner had when it learned
  from each window); online rows keep their stored state."""
  config, env, spec, builder = _laser_setup(0.5, seed=0)
  assert config.replay_core_state == 'recompute'  # The default with replay.
  server = reverb.Server(builder.make_replay_tables(), port=None)
  address = f'localhost:{server.port}'
  client = reverb.Client(address)
  adder = builder.make_adder(client, num_envs=1)
  actor = builder.make_actor(_network(config, spec, seed=1), adder, seed=0)
  acme.EnvironmentLoop(env, actor, should_update=False,
                       logger=loggers.NoOpLogger()).run(num_steps=800)
  adder.flush()
  net = _network(config, spec, seed=2)
  learner = builder.make_learner(net, None, logger=loggers.InMemoryLogger())
  _check_walks(learner, net, builder.make_dataset_iterator(address),
               _network(config, spec, seed=3), config.num_online, steps=12)
  server.stop()


def test_shared_replay_agent_recomputes_another_agents_episodes():
  """LASER's shared replay: agent 1 replays the episodes agent 0's actors
  wrote (with agent 0's network) from agent 1's own recomputed state, not
  from the state agent 0 stored."""
  writer_config, env, spec, _ = _laser_setup(0.5, seed=0)
  reader_config = writer_config.replace(replay_fraction=1.0,
                                        learning_rate=1e-3)
  writer = builder_lib.IMPALABuilder.for_sweep_agent(writer_config, spec, 0,
                                                     share_replay=True)
  reader = builder_lib.IMPALABuilder.for_sweep_agent(reader_config, spec, 1,
                                                     share_replay=True)
  server = reverb.Server(
      builder_lib.make_server_tables([writer, reader], share_replay=True),
      port=None)
  address = f'localhost:{server.port}'
  client = reverb.Client(address)
  adder = writer.make_adder(client, num_envs=1)
  actor = writer.make_actor(_network(writer_config, spec, seed=1), adder,
                            seed=0)
  acme.EnvironmentLoop(env, actor, should_update=False,
                       logger=loggers.NoOpLogger()).run(num_steps=800)
  adder.flush()
  net = _network(reader_config, spec, seed=2)
  learner = reader.make_learner(net, None, logger=loggers.InMemoryLogger())
  comparisons = _check_walks(
      learner, net, reader.make_dataset_iterator(address),
      _network(reader_config, spec, seed=3), 0, steps=12, reader_id=1)
  # The state agent 1 carried differs from the one agent 0 stored there.
  differences = [np.abs(stored[0][rows] - entering[0][rows]).max()
                 for rows, stored, entering in comparisons]
  assert min(differences) > 1e-2
  server.stop()


def test_walk_start_mask_keeps_a_walks_episode_only():
  starts = tf.constant([[False, True, False], [True, False, False],
                        [False, False, True], [False, True, False]])
  mask = learning.walk_start_mask(starts, tf.constant([True, True, False]))
  # Row 0 starts at step 1; row 1 at step 0; row 2 continues a walk.
  np.testing.assert_array_equal(mask.numpy(), [[0, 1, 1], [1, 1, 1],
                                               [1, 1, 1]])


def test_recompute_refuses_replayed_rows_without_walk_starts(filled_queue):
  server, spec, config = filled_queue
  sample = _batches(server, 1)[0]
  batch = types.Batch(data=sample.data, online=tf.constant([False] * B))
  cfg = config.replace(replay_fraction=1.0)
  learner = learning.IMPALALearner(_network(cfg, spec), iter([batch]), cfg,
                                   logger=loggers.InMemoryLogger())
  with pytest.raises(ValueError, match='walk_start'):
    learner.step()


@pytest.mark.parametrize('replay_fraction, kl_threshold',
                         [(0., None), (0.5, 0.5)])
def test_warm_up_compiles_the_update_and_puts_every_variable_back(
    replay_fraction, kl_threshold):
  """A distributed learner's warm-up (config.warm_up_update) on the
  builder's batch of zeros traces and compiles the very function the real
  batches then use (one pipeline, no second trace). A warm-up changes
  nothing: on a real batch, whose update does move the weights, slots and
  step, every variable is put back, the weights and step from before are
  served meanwhile, and the next updates are those of a learner that did
  not warm up."""
  config, env, spec, builder = _laser_setup(replay_fraction, seed=0,
                                            kl_threshold=kl_threshold)
  server = reverb.Server(builder.make_replay_tables(), port=None)
  address = f'localhost:{server.port}'
  adder = builder.make_adder(reverb.Client(address), num_envs=1)
  actor = builder.make_actor(_network(config, spec, seed=1), adder, seed=0)
  acme.EnvironmentLoop(env, actor, should_update=False,
                       logger=loggers.NoOpLogger()).run(num_steps=800)
  adder.flush()
  iterator = builder.make_dataset_iterator(address)
  batches = [next(iterator) for _ in range(3)]
  server.stop()
  if replay_fraction:
    assert not np.all(batches[-1].online)  # Replayed rows, walks: LASER.

  warm_net = _network(config, spec, seed=2)
  warm = builder.make_learner(warm_net, iter(batches),
                              logger=loggers.InMemoryLogger())
  seconds = warm.warm_up(builder.warm_up_batch(warm_net))
  assert warm.num_steps == 0

  variables = warm._state_variables()  # pylint: disable=protected-access
  before = [v.numpy().copy() for v in variables]
  weights_before = warm.get_variables([types.POLICY_VARIABLES])[0]
  update = warm._update  # pylint: disable=protected-access
  during = {}

  def spy(*args):
    result = update(*args)
    during['changed'] = sum(not np.array_equal(v.numpy(), b)
                            for v, b in zip(variables, before))
    during['served'] = warm.get_variables([types.POLICY_VARIABLES])[0]
    during['steps'] = (warm.num_steps, warm.get_variables(
        [types.LEARNER_STEPS])[0][0])
    return result

  warm._update = spy  # pylint: disable=protected-access
  warm.warm_up(batches[0])
  warm._update = update  # pylint: disable=protected-access
  # The throwaway update changed the weights, slots and step...
  assert during['changed'] > 2 * len(warm_net.trainable_variables)
  # ...which nobody was served, and which are all put back.
  for a, b in zip(during['served'], weights_before):
    np.testing.assert_array_equal(a, b)
  assert during['steps'] == (0, 0)
  for variable, value in zip(variables, before):
    np.testing.assert_array_equal(variable.numpy(), value, variable.name)
  assert warm.num_steps == 0

  cold_net = _network(config, spec, seed=2)
  cold = builder.make_learner(cold_net, iter(batches),
                              logger=loggers.InMemoryLogger())
  for _ in batches:
    warm.step()
    cold.step()
  # The real batches ran in the pipeline the zeros made: traced once.
  assert len(update._pipelines) == 1  # pylint: disable=protected-access
  for a, b in zip(warm_net.variables, cold_net.variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
  assert warm.num_steps == cold.num_steps == len(batches)
  # The compilation reported is the warm-up's.
  assert warm._logger.data[0]['compile_time_s'] == seconds  # pylint: disable=protected-access


def test_warm_up_refuses_a_replica_of_a_group(filled_queue):
  server, spec, config = filled_queue
  del server
  learner = learning.IMPALALearner(
      _network(config, spec), iter([]), config,
      logger=loggers.NoOpLogger(),
      replica_group=replicas_lib.Group(0, 2, gradient_sum=None,
                                       state_sum=None))
  with pytest.raises(ValueError, match='replica'):
    learner.warm_up(None)
