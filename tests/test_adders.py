"""TrajectoryAdder writes exactly the items of Acme's SequenceAdder(CONTINUE).

Both adders see the same stream of timesteps (short random episodes, so that
windows cross episode ends in every position) and write to real Reverb
servers; the items are read back in FIFO order and compared array by array.
"""

import os
import subprocess
import sys
import threading
import time

from acme import specs
from acme.adders import reverb as acme_adders
import dm_env
import numpy as np
import portpicker
import pytest
import reverb
import tensorflow as tf
import tree

from acme_impala.agent import adders
from acme_impala.agent import compat
from acme_impala.envs import adapter

OBS_DIM, NUM_ACTIONS, STATE = 3, 2, 4


def _env_spec():
  return specs.EnvironmentSpec(
      observations=specs.Array((OBS_DIM,), np.float32),
      actions=specs.DiscreteArray(NUM_ACTIONS, dtype=np.int32),
      rewards=specs.Array((), np.float32),
      discounts=specs.BoundedArray((), np.float32, 0., 1.))


def _extras_spec():
  return {'logits': tf.TensorSpec([NUM_ACTIONS], tf.float32),
          'core_state': (tf.TensorSpec([STATE], tf.float32),
                         tf.TensorSpec([STATE], tf.float32))}


def _stream(num_steps, seed):
  """(kind, payload) events of a dm_env stream with random episode ends."""
  rng = np.random.default_rng(seed)
  events = []
  obs = lambda: rng.normal(size=OBS_DIM).astype(np.float32)
  events.append(('first', dm_env.restart(obs())))
  for _ in range(num_steps):
    action = np.int32(rng.integers(NUM_ACTIONS))
    reward = np.float32(rng.normal())
    extras = {'logits': rng.normal(size=NUM_ACTIONS).astype(np.float32),
              'core_state': (rng.normal(size=STATE).astype(np.float32),
                             rng.normal(size=STATE).astype(np.float32))}
    u = rng.random()
    if u < 0.15:
      ts = dm_env.TimeStep(dm_env.StepType.LAST, reward, np.float32(0.),
                           obs())
    elif u < 0.2:
      ts = dm_env.truncation(reward, obs(), discount=np.float32(1.))
    else:
      ts = dm_env.transition(reward, obs(), discount=np.float32(1.))
    events.append(('add', (action, ts, extras)))
    if ts.last():
      events.append(('first', dm_env.restart(obs())))
  return events


def _run(make_adder, length, events, tables):
  signature = acme_adders.SequenceAdder.signature(
      _env_spec(), _extras_spec(), sequence_length=length)
  server = reverb.Server(
      [reverb.Table.queue(name, 100_000, signature=signature)
       for name in tables], port=None)
  client = reverb.Client(f'localhost:{server.port}')
  adder = make_adder(client)
  for kind, payload in events:
    if kind == 'first':
      adder.add_first(payload)
    else:
      adder.add(*payload)
  if isinstance(adder, adders.TrajectoryAdder):
    adder.close(timeout_ms=10_000)
  else:
    del adder
  items = {}
  for name in tables:
    size = client.server_info()[name].current_size
    items[name] = [sample.data for sample in client.sample(
        name, num_samples=size, emit_timesteps=False,
        unpack_as_table_signature=True)]
  server.stop()
  return items


@pytest.mark.parametrize('length,period', [(11, 10), (6, 5), (4, 4), (5, 2),
                                           (3, 1)])
def test_items_equal_acme_sequence_adder(length, period):
  events = _stream(400, seed=length * 10 + period)
  tables = ('queue', 'replay')
  fns = {name: None for name in tables}
  ours = _run(lambda c: adders.TrajectoryAdder(c, length, period, fns),
              length, events, tables)
  acme = _run(lambda c: acme_adders.SequenceAdder(
      c, sequence_length=length, period=period, priority_fns=fns,
      end_of_episode_behavior=acme_adders.EndBehavior.CONTINUE),
              length, events, tables)
  for name in tables:
    assert len(ours[name]) == len(acme[name]) > 400 // period - 2
    for mine, theirs in zip(ours[name], acme[name]):
      tf.nest.assert_same_structure(mine, theirs)
      for a, b in zip(tf.nest.flatten(mine), tf.nest.flatten(theirs)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
  # Windows do cross episode ends (a start flag inside an item).
  starts = np.stack([t.start_of_episode for t in ours['queue']])
  assert starts[:, 1:].any()


def test_priority_fn_sees_numpy_trajectory():
  events = _stream(60, seed=3)
  seen = []

  def priority(trajectory):
    seen.append(trajectory)
    return float(trajectory.reward.sum() ** 2 + 1.)

  _run(lambda c: adders.TrajectoryAdder(c, 6, 5, {'q': priority}), 6,
       events, ('q',))
  assert len(seen) >= 60 // 5 - 1
  assert seen[0].observation.shape == (6, OBS_DIM)
  assert isinstance(seen[0].reward, np.ndarray)


def test_bad_arguments_raise():
  with pytest.raises(ValueError, match='period=7'):
    adders.TrajectoryAdder(None, 6, 7, {'q': None})
  with pytest.raises(ValueError, match='priority_fns'):
    adders.TrajectoryAdder(None, 6, 5, {})
  adder = adders.TrajectoryAdder(None, 6, 5, {'q': None})
  with pytest.raises(ValueError, match='add_first'):
    adder.add(np.int32(0), dm_env.transition(np.float32(0), np.zeros(3)))
  with pytest.raises(ValueError, match='step_type'):
    adder.add_first(dm_env.transition(np.float32(0), np.zeros(3)))


def _read(client, name):
  size = client.server_info()[name].current_size
  return [sample.data for sample in client.sample(
      name, num_samples=size, emit_timesteps=False,
      unpack_as_table_signature=True)]


@pytest.mark.parametrize('length,period,restart', [
    (11, 10, 'immediate'), (4, 3, 'immediate'), (4, 3, 'auto')])
def test_batched_adder_equals_k_acme_adders(length, period, restart):
  """K streams added as [K, ...] batches give each stream Acme's items,
  whether an ended stream restarts before the next batch ('immediate') or
  comes back as a FIRST row of it ('auto': dm_env's auto-reset, EnvPool's)."""
  k, steps = 5, 120
  rng = np.random.default_rng(length)
  signature = acme_adders.SequenceAdder.signature(
      _env_spec(), _extras_spec(), sequence_length=length)
  server = reverb.Server(
      [reverb.Table.queue(f'acme_{i}', 10_000, signature=signature)
       for i in range(k)] +
      [reverb.Table.queue('batched', 10_000, signature=signature)], port=None)
  client = reverb.Client(f'localhost:{server.port}')
  theirs = [acme_adders.SequenceAdder(
      client, sequence_length=length, period=period,
      priority_fns={f'acme_{i}': None},
      end_of_episode_behavior=acme_adders.EndBehavior.CONTINUE)
            for i in range(k)]
  ours = adders.BatchedTrajectoryAdder(client, k, length, period,
                                       {'batched': None})

  def obs(i):
    # Feature 0 names the stream, so items can be told apart when read.
    return np.array([i, *rng.normal(size=OBS_DIM - 1)], np.float32)

  current = [dm_env.restart(obs(i)) for i in range(k)]
  for i in range(k):
    theirs[i].add_first(current[i])
    ours.add_first(i, current[i])
  for _ in range(steps):
    actions = rng.integers(NUM_ACTIONS, size=k).astype(np.int32)
    extras = {'logits': rng.normal(size=(k, NUM_ACTIONS)).astype(np.float32),
              'core_state': (rng.normal(size=(k, STATE)).astype(np.float32),
                             rng.normal(size=(k, STATE)).astype(np.float32))}
    nexts = []
    for i in range(k):
      if restart == 'auto' and current[i].last():
        nexts.append(dm_env.restart(obs(i)))
        continue
      reward = np.float32(rng.normal())
      if rng.random() < 0.2:
        nexts.append(dm_env.TimeStep(dm_env.StepType.LAST, reward,
                                     np.float32(0.), obs(i)))
      else:
        nexts.append(dm_env.transition(reward, obs(i), np.float32(1.)))
      theirs[i].add(actions[i], nexts[i],
                    _row(extras, i))
    # The batched adder builds its steps from the same arguments.
    ours.add(actions, adapter.stack_timesteps(nexts), extras)
    for i in range(k):
      if restart == 'immediate' and nexts[i].last():
        nexts[i] = dm_env.restart(obs(i))
      if nexts[i].first():
        theirs[i].add_first(nexts[i])
        ours.add_first(i, nexts[i])
    current = nexts
  ours.close(timeout_ms=10_000)
  for adder in theirs:
    compat.acme_adder_writer(adder).flush(0)
  batched = _read(client, 'batched')
  total = 0
  for i in range(k):
    expected = _read(client, f'acme_{i}')
    mine = [t for t in batched if t.observation[0, 0] == i]
    assert len(mine) == len(expected) >= steps // period - 1
    total += len(mine)
    for a_item, b_item in zip(mine, expected):
      for a, b in zip(tf.nest.flatten(a_item), tf.nest.flatten(b_item)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
  assert total == len(batched)
  server.stop()


def _row(nest, i):
  return tf.nest.map_structure(lambda x: x[i], nest)


def test_close_adder_after_server_stop_drops_writer():
  """Shutdown order of the nodes: the server may be gone before the adder."""
  signature = acme_adders.SequenceAdder.signature(
      _env_spec(), _extras_spec(), sequence_length=6)
  server = reverb.Server([reverb.Table.queue('q', 100, signature=signature)],
                         port=None)
  client = reverb.Client(f'localhost:{server.port}')
  ours = adders.TrajectoryAdder(client, 6, 5, {'q': None})
  theirs = acme_adders.SequenceAdder(
      client, sequence_length=6, period=5, priority_fns={'q': None},
      end_of_episode_behavior=acme_adders.EndBehavior.CONTINUE)
  for kind, payload in _stream(30, seed=5):
    for adder in (ours, theirs):
      if kind == 'first':
        adder.add_first(payload)
      else:
        adder.add(*payload)
  assert client.server_info()['q'].current_size > 0
  server.stop()
  for adder in (ours, theirs):
    adders.close_adder(adder)
    adders.close_adder(adder)  # A second close is a no-op.
  assert ours._windows._writer is None  # pylint: disable=protected-access
  assert compat.acme_adder_writer(theirs) is None


_STOP_WORKER = os.path.join(os.path.dirname(__file__), 'adder_stop_worker.py')
_SERVER = """
import sys, time, reverb
server = reverb.Server([reverb.Table.queue('q', 10**6)], port=int(sys.argv[1]))
print('up', flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize('kind', ['trajectory', 'acme_sequence'])
def test_a_stop_request_ends_writes_waiting_on_a_lost_replay(kind):
  """An actor whose replay has gone waits in the adder's flush; its stop
  request (a SIGTERM handler that closes the adder, as the actor node's)
  must still run and end the loop. tests/adder_stop_worker.py is the actor's
  loop; the replay is a Reverb server in its own process, SIGKILLed while
  the loop writes. With an unbounded flush (either adder) the main thread
  never came back from Reverb and the worker exited 3."""
  port = portpicker.pick_unused_port()
  server = subprocess.Popen([sys.executable, '-c', _SERVER, str(port)],
                            stdout=subprocess.PIPE, text=True)
  worker = None
  try:
    assert server.stdout.readline().strip() == 'up'
    worker = subprocess.Popen(
        [sys.executable, _STOP_WORKER, str(port), kind],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in worker.stdout:
      lines.append(line)
      if line.strip() == 'writing':
        break
    assert lines and lines[-1].strip() == 'writing', ''.join(lines)[-3000:]
    server.kill()
    server.wait()
    out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, (worker.returncode, out[-3000:])
    assert out.splitlines()[-1] == 'ended after the stop', out[-3000:]
  finally:
    for proc in (server, worker):
      if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize('kind', ['trajectory', 'acme_sequence'])
def test_a_stop_request_ends_a_first_write_to_an_absent_replay(kind):
  """A writer's creation fetches the tables' signatures from the server
  (Reverb's C++, up to the adder's 300 s while the server is away): an actor
  stopped just as its replay stopped, before its first write, waited there
  until its pod's deadline. Its stop request must end it."""
  proc = subprocess.run(
      [sys.executable, _STOP_WORKER, str(portpicker.pick_unused_port()),
       kind, 'absent'],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      timeout=90)
  assert proc.returncode == 0, (proc.returncode, proc.stdout[-3000:])
  assert proc.stdout.splitlines()[-1] == 'ended after the stop', (
      proc.stdout[-3000:])


@pytest.mark.parametrize('kind', ['trajectory', 'acme_sequence'])
def test_a_closed_adder_opens_no_new_writer(kind):
  """After close (a node's stop handler), a loop that writes on gets an
  error, not a new writer to a server that may be gone (Acme's adder opens
  one whenever it has none)."""
  server = reverb.Server([reverb.Table.queue('q', 1000)], port=None)
  try:
    client = reverb.Client(f'localhost:{server.port}')
    if kind == 'trajectory':
      ours = adders.BatchedTrajectoryAdder(client, 2, 3, 2, {'q': None})
      writers = lambda: [ours._windows._writer]  # pylint: disable=protected-access,unnecessary-lambda-assignment
    else:
      ours = adders.PerStreamAdders([
          adders.acme_sequence_adder(client, 3, 2, {'q': None})
          for _ in range(2)])
      writers = lambda: [compat.acme_adder_writer(a) for a in ours.adders]  # pylint: disable=unnecessary-lambda-assignment
    mid = np.full(2, int(dm_env.StepType.MID), np.int32)
    step = lambda: ours.add(np.zeros(2, np.int32), dm_env.TimeStep(  # pylint: disable=unnecessary-lambda-assignment
        mid, np.ones(2, np.float32), np.ones(2, np.float32),
        np.ones((2, OBS_DIM), np.float32)))
    for i in range(2):
      ours.add_first(i, dm_env.restart(np.ones(OBS_DIM, np.float32)))
    for _ in range(3):
      step()  # The first window of each stream is written.
    ours.flush(timeout_ms=10_000)
    assert client.server_info()['q'].current_size == 2
    adders.close_adder(ours)
    with pytest.raises(RuntimeError, match='closed'):
      for _ in range(3):
        step()
    assert writers() == [None] * len(writers())
  finally:
    server.stop()


def test_episode_items_hold_each_episode_from_its_first_window():
  """LASER's replay of whole episodes: every episode of every stream gets
  one item, its windows in order from the one holding its first transition
  to the one holding its last (cut at max_episode_windows), priority = its
  length in windows; the window items are unchanged."""
  k, length, period, cap, steps = 4, 5, 4, 6, 150
  rng = np.random.default_rng(0)
  signature = acme_adders.SequenceAdder.signature(
      _env_spec(), _extras_spec(), sequence_length=length)
  server = reverb.Server(
      [reverb.Table.queue('windows', 10_000, signature=signature),
       # Episode items are [n, L, ...]: no fixed signature (see builder).
       reverb.Table.queue('episodes', 10_000)], port=None)
  client = reverb.Client(f'localhost:{server.port}')
  ours = adders.BatchedTrajectoryAdder(
      client, k, length, period, {'windows': None},
      episode_tables=['episodes'], max_episode_windows=cap)
  counts = np.zeros(k, int)  # Steps (observations) of each stream so far.
  episodes = [[] for _ in range(k)]  # (first step, terminal step) per stream.

  def obs(i):
    # Features: the stream, and the index of this step within the stream.
    counts[i] += 1
    return np.array([i, counts[i] - 1, 0], np.float32)

  starts = [0] * k
  for i in range(k):
    ours.add_first(i, dm_env.restart(obs(i)))
  for t in range(steps):
    extras = {'logits': rng.normal(size=(k, NUM_ACTIONS)).astype(np.float32),
              'core_state': (rng.normal(size=(k, STATE)).astype(np.float32),
                             rng.normal(size=(k, STATE)).astype(np.float32))}
    nexts = []
    for i in range(k):
      # Stream 0 runs one long episode (cut at the cap) after step 30;
      # the others end episodes often, down to a single step.
      ends = rng.random() < (0.0 if (i == 0 and 30 < t < 120) else 0.25)
      if ends:
        episodes[i].append((starts[i], int(counts[i])))
        nexts.append(dm_env.TimeStep(dm_env.StepType.LAST, np.float32(1.),
                                     np.float32(0.), obs(i)))
      else:
        nexts.append(dm_env.transition(np.float32(1.), obs(i),
                                       np.float32(1.)))
    ours.add(np.zeros(k, np.int32), adapter.stack_timesteps(nexts),
             extras)
    for i in [i for i in range(k) if nexts[i].last()]:
      starts[i] = int(counts[i])
      ours.add_first(i, dm_env.restart(obs(i)))
  ours.close(timeout_ms=10_000)

  expected, truncated = [], 0
  for i in range(k):
    # The stream's windows written so far: window w holds steps
    # w*period .. w*period + length - 1.
    written = (counts[i] - 1 - length) // period + 1 if counts[i] else 0
    open_first = starts[i] // period
    for first_step, terminal in episodes[i] + [(starts[i], None)]:
      first = first_step // period
      last = (terminal - 1) // period if terminal is not None else None
      if last is None or last - first + 1 > cap:
        if (first + cap - 1 < written and
            (last is not None or first == open_first)):
          expected.append((i, first, cap))
          truncated += 1
        continue
      if last < written:
        expected.append((i, first, last - first + 1))
  size = client.server_info()['episodes'].current_size
  got = []
  for sample in client.sample('episodes', num_samples=size,
                              emit_timesteps=False):
    observation = sample.data[_observation_column(signature)]  # [n, L, 3]
    n = observation.shape[0]
    assert sample.info.priority == n
    stream = int(observation[0, 0, 0])
    first = int(observation[0, 0, 1]) // period
    # The windows in order, each the stream's window w (feature 1 counts
    # the stream's steps).
    np.testing.assert_array_equal(
        observation[:, :, 1],
        (first + np.arange(n))[:, None] * period + np.arange(length))
    assert (observation[:, :, 0] == stream).all()
    got.append((stream, first, n))
  assert sorted(got) == sorted(expected)
  assert len(got) >= 4 * k
  assert truncated >= 1 and ours._windows.truncated_episodes == truncated  # pylint: disable=protected-access
  # The window items: one per `period` steps of each stream, as before.
  windows = client.server_info()['windows'].current_size
  assert windows == sum((c - length) // period + 1 for c in counts)
  server.stop()


def _observation_column(signature):
  """Index of the observation in an item's flattened columns."""
  paths = [path for path, _ in tree.flatten_with_path(signature)]
  return paths.index(('observation',))


def test_a_full_queue_keeps_pending_items_under_reverbs_warning(
    capfd, monkeypatch):
  """K = 40 streams at 2 items each may not leave 80 items pending on one
  writer: while the queue is full, Reverb logs its "did you forget to call
  Flush?" warning from 50 pending. The control, the same adder flushed down
  to 2K items as before, logs it in the same set-up, so the captured stderr
  is where the warning would appear."""
  k, length, drain_every_s = 40, 2, 0.002
  signature = acme_adders.SequenceAdder.signature(
      _env_spec(), _extras_spec(), sequence_length=length)
  server = reverb.Server([reverb.Table.queue('queue', 8, signature=signature)],
                         port=None)
  client = reverb.Client(f'localhost:{server.port}')
  stop = threading.Event()

  def drain():
    # Slowly, so that the queue stays full and inserts wait on it.
    while not stop.is_set():
      try:
        next(iter(client.sample('queue', num_samples=1,
                                emit_timesteps=False)))
      except Exception:  # pylint: disable=broad-except
        return  # The server stopped.
      time.sleep(drain_every_s)

  def fill():
    """Stderr while an adder writes 15 windows of each of the K streams."""
    rng = np.random.default_rng(0)
    adder = adders.BatchedTrajectoryAdder(client, k, length, 1,
                                          {'queue': None})
    for i in range(k):
      adder.add_first(i, dm_env.restart(np.zeros(OBS_DIM, np.float32)))
    for _ in range(15):
      adder.add(rng.integers(NUM_ACTIONS, size=k).astype(np.int32),
                adapter.stack_timesteps([dm_env.transition(
                    np.float32(0.),
                    rng.normal(size=OBS_DIM).astype(np.float32),
                    np.float32(1.)) for _ in range(k)]),
                {'logits': np.zeros((k, NUM_ACTIONS), np.float32),
                 'core_state': (np.zeros((k, STATE), np.float32),
                                np.zeros((k, STATE), np.float32))})
    adder.close(timeout_ms=60_000)
    return capfd.readouterr().err

  drainer = threading.Thread(target=drain, daemon=True)
  drainer.start()
  try:
    ours = fill()
    monkeypatch.setattr(adders, '_MAX_PENDING_ITEMS', 2 * k)
    theirs = fill()
  finally:
    stop.set()
    server.stop()
    drainer.join(timeout=10)
  warning = 'did you forget to call Flush'
  assert warning in theirs, theirs[-2000:]
  assert warning not in ours, ours[-2000:]
