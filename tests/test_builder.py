"""IMPALABuilder with replay: tables, one write per trajectory, batches that
say which rows are online, every online trajectory learned from exactly
once, and replayed rows that walk whole episodes ('recompute'), from real
Reverb tables."""

import json
import subprocess
import sys
import threading

import acme
from acme import specs
from acme.utils import loggers
import dm_env
import numpy as np
import portpicker
import pytest
import reverb
import tensorflow as tf

from acme_impala.agent import builder as builder_lib
from acme_impala.agent import config as config_lib
from acme_impala.agent import datasets
from acme_impala.agent import types
from acme_impala.envs import registry

T = 5


def _setup(replay_fraction, batch_size=8, min_replay_size=4,
           core_state='stored'):
  config = config_lib.IMPALAConfig(
      unroll_length=T, batch_size=batch_size, lstm_size=8,
      replay_fraction=replay_fraction, replay_capacity=1000,
      min_replay_size=min_replay_size, max_queue_size=1000,
      replay_core_state=core_state)
  env = registry.make_environment(config.env_id, seed=0)
  builder = builder_lib.IMPALABuilder(config, specs.make_environment_spec(env))
  server = reverb.Server(builder.make_replay_tables(), port=None)
  return config, env, builder, server


def _act(builder, env, server, version, steps):
  client = reverb.Client(f'localhost:{server.port}')
  adder = builder.make_adder(client)
  actor = builder.make_actor(builder.make_network(), adder, None, seed=version,
                             policy_version=tf.Variable(version, tf.int64))
  acme.EnvironmentLoop(env, actor, should_update=False,
                       logger=loggers.NoOpLogger()).run(num_steps=steps)
  adder.flush()
  return client


def _inserts(client, table):
  return client.server_info()[table].rate_limiter_info.insert_stats.completed


def _sizes(client):
  info = client.server_info()
  return {name: t.current_size for name, t in info.items()}


@pytest.mark.parametrize('f,tables', [
    (0.0, {types.QUEUE_TABLE}), (0.5, {types.QUEUE_TABLE, types.REPLAY_TABLE}),
    (1.0, {types.REPLAY_TABLE})])
def test_tables_and_single_write(f, tables):
  config, env, builder, server = _setup(f)
  client = _act(builder, env, server, version=1, steps=200)
  sizes = _sizes(client)
  assert set(sizes) == tables
  # One item per T steps (plus a dummy step per episode end), written once
  # and referenced by every table: the same count in each.
  assert len(set(sizes.values())) == 1
  assert 200 // T - 1 <= min(sizes.values()) <= 2 * 200 // T
  server.stop()


def _drain(client, table):
  """Removes every item of a queue table; returns how many there were."""
  size = client.server_info()[table].current_size
  if size:
    list(client.sample(table, num_samples=size))
  return size


@pytest.mark.parametrize('f', [0.5, 0.875])
def test_batches_say_which_rows_are_online(f):
  config, env, builder, server = _setup(f, batch_size=8)
  address = f'localhost:{server.port}'
  client = _act(builder, env, server, version=1, steps=300)
  # Empty the queue: from now on it only holds version-2 trajectories, while
  # the replay keeps the version-1 ones too.
  assert _drain(client, types.QUEUE_TABLE) >= 40
  _act(builder, env, server, version=2, steps=300)

  iterator = builder.make_dataset_iterator(address)
  expected_online = int(round(8 * (1 - f)))
  saw_old_in_replay = False
  for _ in range(5):
    batch = next(iterator)
    assert isinstance(batch, types.Batch)
    online = batch.online.numpy()
    assert online.shape == (8,) and online.sum() == expected_online
    versions = batch.data.extras['policy_version'].numpy()
    starts = batch.data.start_of_episode.numpy()
    # Versions of the steps the actor acted in (a dummy step before an
    # episode start carries 0).
    real = np.concatenate([~starts[:, 1:], np.ones((8, 1), bool)], axis=1)
    for row in range(8):
      written = set(versions[row][real[row] & (versions[row] > 0)])
      if online[row]:
        assert written == {2}, (row, versions[row])  # Only the queue's.
      else:
        saw_old_in_replay |= 1 in written
  # Replay samples uniformly over both generations.
  assert saw_old_in_replay
  server.stop()


def _write_numbered_items(builder, client, first, count):
  """Writes `count` items; item k's first step has policy_version
  first + k, which names it."""
  spec = builder.environment_spec
  net = builder.make_network()
  adder = builder.make_adder(client)
  state = tf.nest.map_structure(lambda s: s.numpy()[0], net.initial_state(1))

  def observation():
    return tf.nest.map_structure(lambda s: s.generate_value(),
                                 spec.observations)

  adder.add_first(dm_env.restart(observation()))
  # One more step than count * T: the last item's bootstrap observation.
  for i in range(count * T + 1):
    extras = {types.LOGITS: np.ones(2, np.float32),
              types.CORE_STATE: state,
              types.POLICY_VERSION: np.int64(first + i // T),
              types.AGENT_ID: np.int32(0)}
    adder.add(np.int32(0), dm_env.transition(np.float32(1.), observation(),
                                             np.float32(1.)), extras)
  adder.flush()


def test_every_online_trajectory_is_learned_from_exactly_once():
  """While the replay is below min_replay_size the batches are all online
  (waiting for the replay instead deadlocked once the actors had filled
  the queue: issue 35); from the first batch after it can be sampled they
  mix. Every queue item is learned from once, in the queue's order, across
  the switch; rows read when a wait times out are held, not dropped."""
  config, _, builder, server = _setup(0.5, batch_size=8, min_replay_size=50)
  address = f'localhost:{server.port}'
  client = reverb.Client(address)
  _write_numbered_items(builder, client, first=1, count=33)
  iterator = builder.make_dataset_iterator(address, timeout_ms=300)
  seen = []

  def take(batch):
    online = batch.online.numpy()
    seen.extend(batch.data.extras['policy_version'].numpy()[:, 0][online])
    return online

  # Replay holds 33 < 50 items: four all-online batches of 8, then the
  # 33rd item waits for the next call.
  for _ in range(4):
    assert take(next(iterator)).tolist() == [True] * 8
  with pytest.raises(StopIteration):
    next(iterator)
  assert _sizes(client)[types.QUEUE_TABLE] == 0
  assert _sizes(client)[types.REPLAY_TABLE] == 33
  _write_numbered_items(builder, client, first=34, count=40)
  mixed = 0
  while True:
    try:
      batch = next(iterator)
    except StopIteration:
      break  # The queue is empty.
    assert take(batch).tolist() == [True] * 4 + [False] * 4
    mixed += 1
  # 73 items: the 32 of the warm-up, then 4 online rows per mixed batch,
  # all but the last one (held), each once, in the queue's order.
  assert mixed == 10
  assert seen == list(range(1, 73))
  server.stop()


def test_background_iterator_returns_when_stopped():
  config, env, builder, server = _setup(0.5, min_replay_size=1000)
  stop = threading.Event()
  iterator = builder.make_dataset_iterator(
      f'localhost:{server.port}', timeout_ms=200, should_stop=stop.is_set)
  # Nothing can be read (an empty queue; min_replay_size is never
  # reached): next() waits until the stop, then ends instead of blocking.
  threading.Timer(1.0, stop.set).start()
  with pytest.raises(StopIteration):
    next(iterator)
  server.stop()


def test_replay_fraction_must_give_whole_trajectories():
  with pytest.raises(config_lib.ConfigError, match='whole number'):
    config_lib.IMPALAConfig(batch_size=8, replay_fraction=0.3)
  with pytest.raises(config_lib.ConfigError, match='min_replay_size'):
    config_lib.IMPALAConfig(replay_capacity=10, min_replay_size=20)


def test_recompute_replay_holds_whole_episodes():
  """'recompute': the queue gets every trajectory, the replay every
  finished episode (one item each, no second copy of the data)."""
  config, env, builder, server = _setup(0.5, core_state='recompute')
  client = reverb.Client(f'localhost:{server.port}')
  adder = builder.make_adder(client)
  actor = builder.make_actor(builder.make_network(), adder, None, seed=0)
  acme.EnvironmentLoop(env, actor, should_update=False,
                       logger=loggers.NoOpLogger()).run(num_episodes=12)
  adder.flush()
  sizes = _sizes(client)
  # The last episode's final window waits for the next episode's steps.
  assert sizes[types.REPLAY_TABLE] in (11, 12)
  assert sizes[types.QUEUE_TABLE] >= 12
  server.stop()


def test_recompute_rows_walk_episodes_and_online_rows_stay_exact():
  """Each replayed row of successive batches walks one episode window by
  window from the window holding its first step, then starts another; the
  online part stays exact: 4 of 8 rows per batch, every queue trajectory
  once, also across timeouts while the replay is below min_replay_size."""
  config, env, builder, server = _setup(0.5, batch_size=8,
                                        min_replay_size=25,
                                        core_state='recompute')
  address = f'localhost:{server.port}'
  client = _act(builder, env, server, version=1, steps=150)
  assert _sizes(client)[types.REPLAY_TABLE] < 25
  iterator = builder.make_dataset_iterator(address, timeout_ms=300)
  online_rows, walks, lengths = [], [], []
  # Below min_replay_size: all-online batches, no walk, until the queue
  # is drained (the rest of a batch waits in the iterator).
  warm_up = 0
  while True:
    try:
      batch = next(iterator)
    except StopIteration:
      break
    assert batch.online.numpy().all() and not batch.walk_start.numpy().any()
    obs = batch.data.observation.observation.numpy()
    online_rows += [tuple(obs[r, :2].ravel()) for r in range(8)]
    warm_up += 1
  assert warm_up >= 2
  _act(builder, env, server, version=2, steps=900)
  written = _inserts(client, types.QUEUE_TABLE)
  previous = None
  while True:
    try:
      batch = next(iterator)
    except StopIteration:
      break  # The queue is empty.
    online = batch.online.numpy()
    walk_start = batch.walk_start.numpy()
    assert online.tolist() == [True] * 4 + [False] * 4
    assert not walk_start[:4].any()
    obs = batch.data.observation.observation.numpy()  # [8, T+1, 4]
    starts = batch.data.start_of_episode.numpy()
    online_rows += [tuple(obs[r, :2].ravel()) for r in range(4)]
    for r in range(4, 8):
      if walk_start[r]:
        # The walk's first window holds its episode's first transition.
        assert starts[r, :T].any()
        walks.append(r)
        lengths.append(1)
      else:
        # The same row's next window: it begins with the previous one's
        # bootstrap step.
        np.testing.assert_array_equal(obs[r, 0], previous[r, T])
        lengths[len(lengths) - 1 - walks[::-1].index(r)] += 1
    previous = obs
  # Every queue trajectory learned from once, across the switch to mixed
  # batches (the last partial batch of fewer than 4 waits in the iterator
  # for more data).
  assert written - 4 < len(online_rows) <= written
  assert len(set(online_rows)) == len(online_rows)
  assert len(walks) >= 8 and max(lengths) >= 3
  server.stop()


_SERVER = """
import json
import sys
from acme import specs
import reverb
from acme_impala.agent import builder
from acme_impala.agent import config
from acme_impala.envs import registry
cfg = config.IMPALAConfig(**json.loads(sys.argv[1]))
env = registry.make_environment(cfg.env_id, seed=0)
tables = builder.IMPALABuilder(
    cfg, specs.make_environment_spec(env)).make_replay_tables()
server = reverb.Server(tables, port=int(sys.argv[2]))
print('serving', flush=True)
server.wait()
"""


def test_recompute_rows_wait_out_a_replay_server_outage():
  """A replay server that is away (not started yet, or killed and started
  again) is an outage the replayed rows wait out, not a learner failure:
  rebuilt while a killed server was away, the rows' TimestepDatasets failed
  from MakeIterator with an InternalError ('Socket closed'). The server runs
  in its own process, as in a program (in-process, Reverb samples the table
  directly and never sees the server go), and the iterator reads in the
  background as the learner's does, so that a read blocked on the killed
  server cannot hang the test."""
  settings = dict(
      unroll_length=T, batch_size=4, lstm_size=8, replay_fraction=1.0,
      replay_capacity=1000, min_replay_size=2, replay_core_state='recompute')
  config = config_lib.IMPALAConfig(**settings)
  env = registry.make_environment(config.env_id, seed=0)
  builder = builder_lib.IMPALABuilder(config, specs.make_environment_spec(env))
  port = portpicker.pick_unused_port()
  address = f'localhost:{port}'
  stop = threading.Event()
  watchdog = threading.Timer(240, stop.set)
  watchdog.start()
  iterator = builder.make_dataset_iterator(address, timeout_ms=1000,
                                           should_stop=stop.is_set)
  server = None
  try:
    for attempt in range(2):  # Started late; then killed and started again.
      server = subprocess.Popen(
          [sys.executable, '-c', _SERVER, json.dumps(settings), str(port)],
          stdout=subprocess.PIPE, text=True)
      assert server.stdout.readline().strip() == 'serving'
      client = reverb.Client(address)
      adder = builder.make_adder(client)
      actor = builder.make_actor(builder.make_network(), adder, None,
                                 seed=attempt)
      acme.EnvironmentLoop(env, actor, should_update=False,
                           logger=loggers.NoOpLogger()).run(num_steps=300)
      adder.flush()
      # Within a few batches every row walks an episode of this server
      # (the key of its sample changes, so a walk starts).
      restarted = np.zeros(4, bool)
      for _ in range(20):
        batch = next(iterator)  # StopIteration only from the watchdog.
        assert batch.data.observation.observation.shape[:2] == (4, T + 1)
        restarted |= batch.walk_start.numpy()
        if restarted.all():
          break
      assert restarted.all(), restarted
      server.kill()
      server.wait(timeout=30)
  finally:
    stop.set()
    watchdog.cancel()
    if server is not None and server.poll() is None:
      server.kill()
      server.wait(timeout=30)


def test_an_unavailable_server_reported_as_internal_error_is_an_outage():
  """TF 2.8 re-raises UnavailableError from MakeIterator as InternalError
  (the CI failure behind the test above: a race with the server's death
  that no test can time): MixedBatches must treat it as the outage it is,
  and any other InternalError as the failure it is."""
  def failing(message):
    def make():
      raise tf.errors.InternalError(None, None, message)
    return make

  replaced = ('Socket closed\nExecuting non-communication op <MakeIterator> '
              'originally returned UnavailableError, and was replaced by '
              'InternalError to avoid invoking TF network error handling '
              'logic. [Op:MakeIterator]')
  batches = datasets.MixedBatches(None, failing(replaced), 0, 4,
                                     max_backoff_s=0.01, walks=True)
  with pytest.raises(StopIteration):
    next(batches)
  batches = datasets.MixedBatches(None, failing('a real bug'), 0, 4,
                                     walks=True)
  with pytest.raises(tf.errors.InternalError, match='a real bug'):
    next(batches)


def test_a_replay_that_stops_answering_is_checked_again_before_mixing():
  """A replay read that times out (a replay server restarted from an older
  or no checkpoint is below min_replay_size again) sends the batches back
  to all-online rows until the replay is ready again, instead of waiting on
  it while the queue fills; online rows stay exact across both switches."""
  chunks = iter(tf.constant([[2 * i], [2 * i + 1]]) for i in range(10))
  answers = iter([True, False, True])
  replays = []

  def make_replay():
    # The first replay iterator gives one part, then times out; the next
    # one keeps giving.
    first = not replays
    replays.append(1)
    parts = [tf.constant([[-1], [-1]])] * (1 if first else 10)
    return iter(parts)

  batches = datasets.MixedBatches(
      lambda: chunks, make_replay, num_online=2, num_replayed=2,
      replay_ready=lambda: next(answers))
  seen, kinds = [], []

  def take(batch):
    online = batch.online.numpy()
    kinds.append(online.tolist())
    seen.extend(batch.data.numpy()[online, 0].tolist())

  take(next(batches))  # Ready: mixed.
  with pytest.raises(StopIteration):
    next(batches)  # The replay timed out; rows 2 and 3 are held.
  take(next(batches))  # Not ready: all online.
  take(next(batches))  # Ready again: mixed.
  assert kinds == [[True, True, False, False], [True] * 4,
                   [True, True, False, False]]
  assert seen == list(range(8))
  assert len(replays) == 2


_INIT = r'''
import hashlib, sys
from acme import specs
from acme_impala.agent import builder, presets
from acme_impala.envs import registry
def weights(seed):
  config = presets.get_config('minatar')
  spec = specs.make_environment_spec(registry.make_environment(config.env_id))
  net = builder.IMPALABuilder(config, spec).make_network(seed=seed)
  return hashlib.sha256(b''.join(v.numpy().tobytes()
                                for v in net.variables)).hexdigest()
if __name__ == '__main__':
  print(' '.join(weights(int(s)) for s in sys.argv[1:]))
'''


def test_a_seeded_network_starts_from_the_same_weights_in_any_process():
  """The learner's initial weights are a function of the seed alone (issue
  37): a fresh process and this one, which has run many random ops, make
  the same weights from one seed; another seed makes others."""
  proc = subprocess.run([sys.executable, '-c', _INIT, '7', '8'],
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  fresh_7, fresh_8 = proc.stdout.split()[-2:]
  namespace = {}
  exec(_INIT, namespace)  # pylint: disable=exec-used
  tf.random.normal([5])  # Random ops run before, as a learner process may.
  assert namespace['weights'](7) == fresh_7
  assert fresh_8 != fresh_7


def test_the_learner_init_seed_is_the_config_seed_and_agent():
  from acme_impala.distributed import nodes  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import program  # pylint: disable=g-import-not-at-top
  config = config_lib.IMPALAConfig(seed=3)
  options = program.RunOptions(logdir='/x', max_actor_steps=1)
  seed = nodes.learner_init_seed(config, options)
  assert seed == nodes.learner_init_seed(config, options)
  assert seed != nodes.learner_init_seed(config.replace(seed=4), options)
  assert seed != nodes.learner_init_seed(
      config, program.RunOptions(logdir='/x', max_actor_steps=1,
                                 agent='agent_1', agent_index=1))


def test_replay_readiness_call_cut_by_the_server_dying_is_an_outage():
  """Reverb's client raises a bare RuntimeError('Socket closed') when the
  replay's process dies during server_info (CI: a SIGKILLed replay failed
  the LASER learner, which must wait the outage out): ReplayReady says
  ServerAway, a ReverbError that MixedBatches waits out; other
  RuntimeErrors stay failures."""
  ready = datasets.ReplayReady('localhost:1', 'replay', 1, 1000)

  class Client:
    def __init__(self, error):
      self.error = error

    def server_info(self, timeout):
      del timeout
      raise self.error
  ready._client = Client(RuntimeError('Socket closed'))  # pylint: disable=protected-access
  with pytest.raises(datasets.ServerAway, match='localhost:1: Socket closed'):
    ready()
  assert datasets.MixedBatches._unavailable(datasets.ServerAway('x'))  # pylint: disable=protected-access
  ready._client = Client(RuntimeError('table replay not found'))  # pylint: disable=protected-access
  with pytest.raises(RuntimeError, match='table replay not found'):
    ready()
  assert not datasets.is_transport_failure(RuntimeError('a real bug'))
