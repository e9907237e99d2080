"""K synchronous learner replicas: the gradient sum and a real 2-process
group (agent/replicas.py, distributed/collective.py)."""

import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import tree

from acme_impala.agent import losses
from acme_impala.agent import replicas
from acme_impala.distributed import collective

import replica_worker

T, B, A, F = 5, 6, 3, 4


def _loss_inputs(seed):
  rng = np.random.default_rng(seed)
  features = tf.constant(rng.normal(size=(T + 1, B, F)), tf.float32)
  mask = (rng.random((T, B)) < 0.8).astype(np.float32)
  mask[:, 2] = 0.  # A row with no valid step.
  relevance = (rng.random((T, B)) < 0.7).astype(np.float32)
  # Full last rows: the replicas' shares have different numbers of valid
  # steps, where a plain mean of their mean-reduced gradients is wrong.
  mask[:, 3:] = relevance[:, 3:] = 1.
  return dict(
      features=features,
      behaviour_logits=tf.constant(rng.normal(size=(T, B, A)), tf.float32),
      actions=tf.constant(rng.integers(0, A, size=(T, B)), tf.int32),
      rewards=tf.constant(rng.normal(size=(T, B)), tf.float32),
      discounts=tf.constant(0.99 * (rng.random((T, B)) < 0.9), tf.float32),
      mask=tf.constant(mask),
      relevance_mask=tf.constant(relevance))


def _gradients(params, inputs, rows, reduction):
  """Gradients of impala_loss on `rows` (a [B] subset) with logits and
  values linear in the features through the shared `params`: every row
  contributes to every parameter."""
  w_pi, w_v = params
  pick = lambda x: tf.gather(x, rows, axis=1)
  with tf.GradientTape() as tape:
    features = pick(inputs['features'])
    logits = tf.einsum('tbf,fa->tba', features, w_pi)
    values = tf.einsum('tbf,f->tb', features, w_v)
    loss, metrics = losses.impala_loss(
        logits[:-1], pick(inputs['behaviour_logits']),
        pick(inputs['actions']), pick(inputs['rewards']),
        pick(inputs['discounts']), values[:-1], values[-1],
        mask=pick(inputs['mask']),
        relevance_mask=pick(inputs['relevance_mask']),
        entropy_cost=0.01, reduction=reduction)
  return tape.gradient(loss, params), metrics['num_valid_steps']


class _InProcessSum:
  """AllReduceSum over replicas run one after the other in this process:
  a first pass records each replica's contribution, the second returns the
  sum of all of them."""

  def __init__(self):
    self.recorded, self.total = [], None

  def __call__(self, tensors):
    if self.total is None:
      self.recorded.append([t.numpy() for t in tensors])
      return list(tensors)
    return [tf.constant(t) for t in self.total]

  def finish(self):
    self.total = [sum(parts) for parts in zip(*self.recorded)]


@pytest.mark.parametrize('reduction', ['mean', 'sum'])
@pytest.mark.parametrize('num_replicas', [2, 3])
def test_replica_gradients_sum_to_the_whole_batch_gradient(reduction,
                                                           num_replicas):
  """Each replica's gradient on its rows, combined, is the gradient of the
  loss on every row (shared parameters, masks, a row with no valid step,
  the trust-region mask): for the mean reduction N_k-weighted, not a plain
  mean of the replicas' means, which differs here."""
  inputs = _loss_inputs(seed=num_replicas)
  rng = np.random.default_rng(0)
  params = [tf.Variable(rng.normal(size=(F, A)), dtype=tf.float32),
            tf.Variable(rng.normal(size=(F,)), dtype=tf.float32)]
  whole, _ = _gradients(params, inputs, np.arange(B), reduction)
  shares = np.array_split(np.arange(B), num_replicas)
  per_replica = [_gradients(params, inputs, rows, reduction)
                 for rows in shares]
  fake = _InProcessSum()
  for grads, num_valid in per_replica:
    replicas.combine_gradients(grads, num_valid, reduction, fake)
  fake.finish()
  for grads, num_valid in per_replica:
    combined = replicas.combine_gradients(grads, num_valid, reduction, fake)
    for got, want in zip(combined, whole):
      np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5,
                                 atol=1e-6)
  if reduction == 'mean':
    assert len({float(n) for _, n in per_replica}) > 1
    plain = [sum(g[i] for g, _ in per_replica) / num_replicas
             for i in range(2)]
    assert not all(np.allclose(p.numpy(), w.numpy(), atol=1e-4)
                   for p, w in zip(plain, whole))


def test_from_first_gives_every_replica_the_first_ones_values():
  values = {0: [tf.constant([1.5, -2.]), tf.constant(7., tf.float64)],
            1: [tf.constant([9., 9.]), tf.constant(3., tf.float64)]}
  fake = _InProcessSum()
  for index in (0, 1):
    replicas.from_first(values[index], tf.constant(index == 0), fake)
  fake.finish()
  for index in (0, 1):
    got = replicas.from_first(values[index], tf.constant(index == 0), fake)
    np.testing.assert_array_equal(got[0].numpy(), [1.5, -2.])
    assert float(got[1].numpy()) == 7.


def test_bad_groups_are_refused():
  with pytest.raises(ValueError, match='group_size=1'):
    replicas.CollectiveSum(1, replicas.GRADIENTS_KEY)
  with pytest.raises(ValueError, match='index=2 is out of range'):
    replicas.Group.collective(2, 2)
  with pytest.raises(ValueError, match="reduction='max'"):
    replicas.combine_gradients([], tf.constant(1.), 'max', list)
  assert collective.local_addresses(1) == []
  two = collective.local_addresses(2)
  assert len(set(two)) == 2 and all(a.startswith('localhost:') for a in two)


def _whole_batches(config, num_batches, seed):
  """`num_batches` whole batches of the builder's own iterator on a Reverb
  server our actor filled (LASER: online rows, then replayed episode walks
  with their walk starts), as numpy; and the network's initial weights."""
  import acme  # pylint: disable=g-import-not-at-top
  import reverb  # pylint: disable=g-import-not-at-top
  from acme import specs  # pylint: disable=g-import-not-at-top
  from acme.tf import utils as tf2_utils  # pylint: disable=g-import-not-at-top
  from acme.utils import loggers  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import builder as builder_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import networks  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import registry  # pylint: disable=g-import-not-at-top
  env = registry.make_environment(config.env_id, seed=seed)
  spec = specs.make_environment_spec(env)
  builder = builder_lib.IMPALABuilder(config, spec)
  server = reverb.Server(builder.make_replay_tables(), port=None)
  try:
    address = f'localhost:{server.port}'
    tf.random.set_seed(seed)
    net = networks.make_network(config, spec.actions.num_values)
    tf2_utils.create_variables(net, [spec.observations])
    adder = builder.make_adder(reverb.Client(address), num_envs=1)
    actor = builder.make_actor(net, adder, seed=seed)
    acme.EnvironmentLoop(env, actor, should_update=False,
                         logger=loggers.NoOpLogger()).run(num_steps=900)
    adder.flush()
    iterator = builder.make_dataset_iterator(address)
    batches = [tree.map_structure(
        lambda x: None if x is None else np.asarray(x), next(iterator))
               for _ in range(num_batches)]
    return batches, [v.numpy() for v in net.variables], net, spec
  finally:
    env.close()
    server.stop()


def test_two_replicas_on_halves_end_each_step_as_one_learner_on_the_batch(
    tmp_path):
  """Two learner processes joined by TensorFlow's collectives, each given
  half of every batch, hold after several steps the weights one learner
  given the whole batches holds (V-trace batches, and LASER batches: online
  and replayed rows, the trust region, recomputed walk states, each replica
  keeping its replayed rows' states). Replica 1 starts from other weights:
  the start-up sync gives it replica 0's. A replica on its half alone ends
  elsewhere: the comparison can fail."""
  from acme.utils import loggers  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import config as config_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import learning  # pylint: disable=g-import-not-at-top
  steps = 4
  common = dict(unroll_length=T, batch_size=4, lstm_size=16,
                max_queue_size=1000)
  cases = {
      'vtrace': dict(common),
      'laser': dict(common, replay_fraction=0.5, replay_capacity=1000,
                    min_replay_size=6, kl_threshold=0.5),
  }
  inputs, wholes = {}, {}
  for name, kwargs in cases.items():
    config = config_lib.IMPALAConfig(**kwargs)
    batches, weights, net, _ = _whole_batches(config, steps, seed=0)
    if name == 'laser':
      assert (~batches[-1].online).sum() == 2  # Replayed rows present.
    inputs[name] = dict(config=kwargs, weights=weights,
                        batches=[replica_worker.encode(b) for b in batches])
    learner = learning.IMPALALearner(net, iter(batches), config,
                                     logger=loggers.NoOpLogger())
    for _ in range(steps):
      learner.step()
    wholes[name] = ([v.numpy() for v in net.variables], learner.walk_states)
    # One replica's half alone: what the comparison must tell apart.
    half = config.replace(batch_size=2)
    for variable, value in zip(net.variables, weights):
      variable.assign(value)
    alone = learning.IMPALALearner(
        net, iter([replica_worker.split(b, config.num_online, 0, 2)
                   for b in batches]), half, logger=loggers.NoOpLogger())
    for _ in range(steps):
      alone.step()
    assert max(np.abs(a.numpy() - w).max() for a, w in zip(
        net.variables, wholes[name][0])) > 1e-3
  cases_path = tmp_path / 'cases.pkl'
  with open(cases_path, 'wb') as f:
    pickle.dump(inputs, f)
  addresses = ','.join(collective.local_addresses(2))
  worker = os.path.join(os.path.dirname(__file__), 'replica_worker.py')
  procs = [subprocess.Popen(
      [sys.executable, worker, str(cases_path), str(tmp_path / f'out{i}.pkl'),
       str(i), addresses], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
      text=True) for i in range(2)]
  try:
    outputs = [p.communicate(timeout=240)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for p, out in zip(procs, outputs):
    assert p.returncode == 0, out[-3000:]
  results = []
  for i in range(2):
    with open(tmp_path / f'out{i}.pkl', 'rb') as f:
      results.append(pickle.load(f))
  for name in cases:
    want_weights, want_walks = wholes[name]
    assert results[0][name]['digest'] == results[1][name]['digest']
    for i, result in enumerate(results):
      assert result[name]['num_steps'] == steps
      for got, want in zip(result[name]['weights'], want_weights):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5,
                                   err_msg=f'{name}, replica {i}')
    if name == 'laser':
      # Replica i's replayed row j is the whole batch's replayed row i + j.
      for i, result in enumerate(results):
        for got, want in zip(tree.flatten(result[name]['walk_states']),
                             tree.flatten(want_walks)):
          np.testing.assert_allclose(got, want[i:i + 1], rtol=1e-4,
                                     atol=1e-5)


def test_joining_after_tensorflow_ran_an_op_is_refused_saying_why(
    monkeypatch):
  """A replica joins before its first op; this test process has run many,
  which is what a node built in the wrong order would meet."""
  monkeypatch.setenv('TF_CONFIG', '')
  tf.constant(1.) + 1.  # pylint: disable=expression-not-assigned
  with pytest.raises(RuntimeError, match='learner replica 1: TensorFlow ran '
                     'an op in this process before the collective group'):
    collective.join(collective.local_addresses(2), 1)
  with pytest.raises(ValueError, match='index=2 is out of range'):
    collective.join(['localhost:1', 'localhost:2'], 2)
  monkeypatch.setenv(collective.ADDRESSES_ENV, 'localhost:1,localhost')
  with pytest.raises(ValueError, match='expected 2 comma-separated'):
    collective.addresses_from_env(2)
  monkeypatch.setenv(collective.ADDRESSES_ENV, 'localhost:1,localhost:2')
  assert collective.addresses_from_env(2) == ['localhost:1', 'localhost:2']


def test_program_with_two_learner_replicas_restarts_the_group_when_one_dies(
    tmp_path):
  """docs/running.md's `--num_learners=2` command under local_mp, with
  LASER's replay and a longer budget: both replicas learn in step (the
  same training state logged at the same learner steps), actors play
  replica 0's weights; replica 1 SIGKILLed: the supervisor restarts the
  group, replica 0 comes back from its checkpoint and the group goes on
  past the step it had reached; replica 0 SIGTERMed alone (exit 0): the
  group restarts again; SIGTERM ends the run with status 0 and no process
  left."""
  import re  # pylint: disable=g-import-not-at-top
  import shlex  # pylint: disable=g-import-not-at-top
  import signal  # pylint: disable=g-import-not-at-top
  import docs_commands  # pylint: disable=g-import-not-at-top
  import program_run  # pylint: disable=g-import-not-at-top
  command, = [c for doc, c in docs_commands.documented_commands()
              if doc == 'docs/running.md' and '--num_learners' in c]
  documented = [a for a in shlex.split(command)[2:]
                if not a.startswith('--max_actor_steps')]
  assert '--num_learners=2' in documented
  run = program_run.Run(tmp_path, documented + [
      '--max_actor_steps=10000000',
      '--config.replay_fraction=0.5', '--config.min_replay_size=8',
      '--config.replay_capacity=5000',
      '--config.checkpoint_period_minutes=0.05',
      '--config.replica_check_steps=10'], [
          '--config.unroll_length=10', '--config.lstm_size=16',
          '--config.envs_per_actor=2', '--config.max_queue_size=64',
          '--noevaluator', '--num_actors=2'])
  digests = re.compile(r'(learner(?:_replica_1)?): learner step (\d+), '
                       r'training state (\w+)')

  def agreeing_steps():
    seen = {}
    for who, step, digest in digests.findall(run.output()):
      seen.setdefault(int(step), {})[who] = digest
    both = {s: d for s, d in seen.items() if len(d) == 2}
    assert all(len(set(d.values())) == 1 for d in both.values()), both
    return sorted(both)

  def replica_0_starts():
    """The learner step replica 0 started at, each time it started."""
    return re.findall(
        r'\[learner/0\][^\n]*learner: starting at learner step (\d+)',
        run.output())

  try:
    # Digests come every 10 learner steps (replica_check_steps; at the
    # default 50 this test waited for steps 50 and 100, and took 54-143 s
    # of CI runs); every common one is checked for agreement, here and at
    # each later call.
    run.wait(lambda: agreeing_steps(), 'both replicas to log a common step',
             180)
    time.sleep(4)  # A checkpoint of replica 0 past its first steps.
    step_before = run.learner_step()
    pid = run.kill('learner/1')
    run.wait(lambda: run.restarted('learner/1', pid), 'learner/1 to restart',
             60)
    restart = run.wait(lambda: replica_0_starts()[1:],
                       'replica 0 to restart with the group', 120)
    assert 1 <= int(restart[0]) <= step_before + 60
    after = max(agreeing_steps())
    # The next common digest: logged by the re-formed group, past both the
    # old group's last one and the step it came back from.
    run.wait(lambda: max(agreeing_steps()) > max(after, int(restart[0])),
             'the re-formed group to go on in step', 180)
    # Replica 0 SIGTERMed on its own: it checkpoints and exits 0, which for
    # a replica is no finished work but a short group: restarted again, back
    # from its checkpoint. (That a restarted group goes on in step is shown
    # above; waiting for its next digest again cost 1 min of a CI run.)
    pid = run.nodes()['learner/0']['pid']
    os.kill(pid, signal.SIGTERM)
    run.wait(lambda: run.restarted('learner/0', pid), 'learner/0 to restart',
             120)
    run.wait(lambda: replica_0_starts()[2:], 'replica 0 to restart again',
             120)
    os.killpg(run.proc.pid, signal.SIGTERM)
    rc = run.finish()
    out = run.output()
    assert rc == 0, out[-5000:]
    # Each time the group restarted in one go: replica 0 stopped by the
    # launcher, or gone by itself (status 75) when its collective broke.
    summary = out.splitlines()[-1]
    # The second time, replica 1 may see its collective break and exit 75
    # before replica 0's exit 0 is noticed; then it leads the restart.
    assert re.search(r'learner/0 2 \((restarted with learner/1|exited with '
                     r'status 75), (exited with status 0|restarted with '
                     r'learner/1)\); learner/1 2 \(killed by SIGKILL, '
                     r'(restarted with learner/0|exited with status 75)\)',
                     summary), summary
    assert run.leftovers() == []
  finally:
    run.kill_if_running()
