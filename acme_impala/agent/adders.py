"""An Acme adder that writes each sequence with a single Reverb append.

`TrajectoryAdder` writes exactly the items of Acme's
`SequenceAdder(sequence_length=L, period=P,
end_of_episode_behavior=EndBehavior.CONTINUE)`: windows of L consecutive steps
every P steps, running through episode ends, where an episode's terminal
observation is a step of its own with zero action, reward, discount and extras.
Items have Acme's `Trajectory` layout and `SequenceAdder.signature`, so Acme's
learners read them and Acme's adder can be swapped back in.

Why it exists: Acme's adder calls Reverb's Python `TrajectoryWriter.append`
twice per environment step (a step, then the next observation as a partial
step) and reads the writer's history on every step. Profiled here, that is
about 450 us per environment step, which caps an actor process near 2000
steps per second however many environments it batches. This adder buffers the
steps in preallocated numpy arrays and appends the whole [L, ...] window once
per item as one Reverb step; the item references that step's columns squeezed
(`column[-1]`), so its tensors are [L, ...] exactly as Acme's. Items of all
tables reference the same chunk, so a trajectory sent to both the queue and the
replay is stored once. The price: the step shared by two consecutive windows
(P < L) is stored in both chunks, 1/L extra memory for IMPALA's P = L - 1.

For LASER's replay of whole episodes, both adders can also write episode
items to some tables: one item per episode, whose steps are the windows
from the one that holds the episode's first transition to the one that
holds its last, so that a reader can walk an episode window by window from
its start. They are written by a second writer per stream (see
`_Windows._episode_writer` for why).

`BatchedTrajectoryAdder` keeps K such streams, for an actor that steps K
environments in lockstep: each step arrives as one [K, ...] batch and is
buffered with one numpy assignment per leaf, so the per-environment Python
cost of adding is gone; its items are those of K separate TrajectoryAdders
(hence of K Acme SequenceAdders).
"""

import time
from typing import Any, Callable, List, Mapping, Optional, Sequence

from acme import adders
from acme import types
from acme.adders import reverb as acme_reverb
from acme.adders.reverb import base as reverb_base
import dm_env
import numpy as np
import reverb
import tree

from acme_impala.agent import compat
from acme_impala.envs import adapter

PriorityFn = Optional[Callable[[reverb_base.Trajectory], float]]


class _Windows:
  """K ring buffers of the last L steps, written as [L, ...] Reverb steps.

  Shared by both adders: streams count their steps separately (an episode
  end adds a terminal step to one stream only), and stream i writes its
  window whenever its count n_i reaches L + k P.
  """

  def __init__(self, client, num_streams, sequence_length, period,
               priority_fns, max_in_flight_items, get_signature_timeout_ms,
               episode_tables=(), max_episode_windows=1):
    if not 1 <= period <= sequence_length:
      raise ValueError(f'period={period!r} must be in [1, sequence_length='
                       f'{sequence_length}].')
    if not priority_fns and not episode_tables:
      raise ValueError('priority_fns or episode_tables must name at least '
                       'one table.')
    if episode_tables and period != sequence_length - 1:
      raise ValueError(
          f'episode_tables need windows that overlap by one step (period = '
          f'sequence_length - 1), got period={period!r}, sequence_length='
          f'{sequence_length!r}.')
    if max_episode_windows < 1:
      raise ValueError(f'max_episode_windows={max_episode_windows!r} must be '
                       '>= 1.')
    self._client = client
    self._k = num_streams
    self._length = sequence_length
    self._period = period
    self._priority_fns = dict(priority_fns)
    # Per stream, as Acme's adders (one writer serves all K streams here),
    # but below the count at which Reverb warns (see _MAX_PENDING_ITEMS).
    self._max_in_flight_items = min(max_in_flight_items * num_streams,
                                    _MAX_PENDING_ITEMS)
    self._get_signature_timeout_ms = get_signature_timeout_ms
    self._writer: Optional[reverb.TrajectoryWriter] = None
    self._structure: Any = None
    self._buffers: List[np.ndarray] = []  # One [K, L, ...] array per leaf.
    self._counts = np.zeros(num_streams, np.int64)  # Complete steps so far.
    self._episode_tables = list(episode_tables)
    self._max_episode_windows = max_episode_windows
    # Per stream, the episodes whose episode item is not written yet: the
    # current one and, until its last window is written, the one before.
    self._open: List[List[_OpenEpisode]] = [[] for _ in range(num_streams)]
    self._stream_max_in_flight_items = max_in_flight_items
    # One episode writer per stream (see _episode_writer).
    self._episode_writers: List[Optional[reverb.TrajectoryWriter]] = (
        [None] * num_streams)
    self._episode_appends = np.zeros(num_streams, np.int64)
    self.truncated_episodes = 0
    self._closed = False

  def push(self, step, streams: Optional[np.ndarray] = None,
           terminal: bool = False):
    """Appends one step to each of `streams` (all K when None).

    Args:
      step: Acme's step layout (observation, start_of_episode, action, reward,
        discount[, extras]) with a leading [len(streams)] (or [K]) axis.
      streams: int indices of the streams the rows belong to.
      terminal: the rows are Acme's terminal steps (an episode's final
        observation), which end the streams' episodes.
    """
    if streams is None:
      streams = np.arange(self._k)
    if self._episode_tables:
      # Before any window is written: this push may complete the window
      # that holds an episode's last transition.
      self._track_episodes(step, streams, terminal)
    leaves = tree.flatten(step)
    if self._structure is None:
      self._structure = step
      self._buffers = [
          np.zeros((self._k, self._length) + np.shape(leaf)[1:],
                   np.asarray(leaf).dtype) for leaf in leaves]
    rows = self._counts[streams] % self._length
    for buffer, leaf in zip(self._buffers, leaves):
      buffer[streams, rows] = leaf
    self._counts[streams] += 1
    n = self._counts[streams]
    ready = (n >= self._length) & ((n - self._length) % self._period == 0)
    for stream in streams[ready]:
      self._write(stream)

  def _track_episodes(self, step, streams, terminal: bool):
    """Opens an episode at each start step and closes it at its terminal.

    Window k of a stream holds steps kP..kP+P (P = L - 1); step s is the
    origin of a transition in window s // P, so an episode whose first step
    is s and whose terminal step is n spans windows s // P to (n - 1) // P.
    """
    starts = np.asarray(step['start_of_episode'], bool)
    for row, stream in enumerate(streams):
      index = int(self._counts[stream])  # This step's index in the stream.
      if terminal:
        current = [e for e in self._open[stream] if e.last is None]
        if current:  # None if the episode was cut at the length cap.
          current[-1].last = (index - 1) // self._period
      elif starts[row]:
        self._open[stream].append(_OpenEpisode(index // self._period))

  def _write(self, stream: int):
    # Rows in time order: the oldest of the stream's last L steps first.
    count = self._counts[stream]
    order = np.arange(count - self._length, count) % self._length
    window = tree.unflatten_as(
        self._structure, [buffer[stream, order] for buffer in self._buffers])
    writer = self.writer
    writer.append(window)
    if self._episode_tables:
      self._write_episodes(stream, (count - self._length) // self._period,
                           window)
    trajectory = reverb_base.Trajectory(
        **tree.map_structure(lambda column: column[-1], writer.history))
    numpy_trajectory = None
    for table, priority_fn in self._priority_fns.items():
      priority = 1.0
      if priority_fn is not None:
        if numpy_trajectory is None:
          numpy_trajectory = reverb_base.Trajectory(**window)
        priority = priority_fn(numpy_trajectory)
      writer.create_item(table, priority, trajectory)
      _flush(writer, self._max_in_flight_items)

  def _write_episodes(self, stream: int, index: int, window):
    """Adds window `index` of `stream` to the stream's open episodes and
    writes the episode items it completes."""
    needed = [e for e in self._open[stream] if index >= e.first]
    if not needed:
      return  # Only a cut episode's remainder: not replayed.
    writer = self._episode_writer(stream)
    writer.append(window)
    position = int(self._episode_appends[stream])
    self._episode_appends[stream] += 1
    still_open = []
    for episode in self._open[stream]:
      if index >= episode.first:
        episode.positions.append(position)
      cut = len(episode.positions) == self._max_episode_windows
      if episode.last == index or (cut and episode.last is None):
        if episode.last is None:
          # Replayed from its start up to the cap; the rest is not replayed.
          self.truncated_episodes += 1
        self._create_episode_item(writer, episode.positions)
      else:
        still_open.append(episode)
    self._open[stream] = still_open

  def _create_episode_item(self, writer, positions: List[int]):
    trajectory = reverb_base.Trajectory(**tree.map_structure(
        lambda column: column[positions], writer.history))
    # Uniform sampling ignores priorities: an episode item's priority is its
    # length in windows, so that a reader of its windows knows where the
    # episode ends (ReplaySample.info.priority).
    for table in self._episode_tables:
      writer.create_item(table, float(len(positions)), trajectory)
    _flush(writer, self._stream_max_in_flight_items)

  def _episode_writer(self, stream: int) -> reverb.TrajectoryWriter:
    """Stream `stream`'s writer of episode items, apart from the window
    writer: every item a writer sends names all the chunks it keeps
    referenceable, and an episode must stay referenceable until it ends.
    Kept in the window writer, that made each queue item's request carry a
    whole episode's chunk keys (measured: 83 ms per window at 2,000 kept
    windows). This writer sends one request per episode, and its chunks of
    several windows keep the list short. The price is a second compressed
    copy of each window in flight; the queue's copy is removed once learned
    from, so the replay still holds each window once."""
    if self._episode_writers[stream] is None:
      keep = self._max_episode_windows + 1
      self._episode_writers[stream] = _open_writer(
          lambda ms: compat.constant_chunk_trajectory_writer(
              self._client, chunk_length=min(keep, _EPISODE_CHUNK_WINDOWS),
              num_keep_alive_refs=keep, get_signature_timeout_ms=ms),
          self._get_signature_timeout_ms, lambda: self._closed)
    return self._episode_writers[stream]

  @property
  def writer(self) -> reverb.TrajectoryWriter:
    if self._writer is None:
      # One append per item: each chunk is one [L, ...] window and nothing
      # older needs to stay referenceable.
      self._writer = _open_writer(
          lambda ms: self._client.trajectory_writer(
              num_keep_alive_refs=1, get_signature_timeout_ms=ms),
          self._get_signature_timeout_ms, lambda: self._closed)
    return self._writer

  def _writers(self) -> List[reverb.TrajectoryWriter]:
    return [w for w in [self._writer] + self._episode_writers
            if w is not None]

  def flush(self, timeout_ms: Optional[int] = None):
    for writer in self._writers():
      writer.flush(0, timeout_ms=timeout_ms)

  def close(self, timeout_ms: Optional[int] = None):
    self._closed = True
    writers = self._writers()
    self._writer = None
    self._episode_writers = [None] * self._k
    try:
      if timeout_ms is not None:
        for writer in writers:
          writer.flush(0, timeout_ms=timeout_ms)
    finally:
      for writer in writers:
        writer.close()


# Reverb 0.7.0's writer logs "The number of pending items is alarmingly
# high, did you forget to call Flush?" while 50 or more items are unconfirmed
# (the fewest any of its warnings counted in the sweep's logs). One writer
# serving K = 32 streams at 2 items each kept up to 65 pending whenever the
# queue was full, which is most of a learner-bound run: about 1.3 lines a
# second in each actor's log (MinAtar sharing sweep, 622 lines in 8
# minutes). A flush down to 48 leaves room for the one item created before
# the next flush.
_MAX_PENDING_ITEMS = 48

# How long one wait for the server's confirmations may block before it
# returns to Python to wait again. A node's stop request is a signal
# handler, which Python runs only between bytecodes of the main thread:
# a flush without a bound never returned while its writer reconnected to a
# replay that had stopped for good (the replay restarted, then the program
# stopped), and the actor held its process until it was SIGKILLed.
_FLUSH_POLL_MS = 500


def _flush(writer: reverb.TrajectoryWriter, block_until_num_items: int):
  """`writer.flush(block_until_num_items)`, waiting in bounded slices: the
  same wait, but a stop request's handler runs between them (it closes the
  writer, and the next slice raises)."""
  while True:
    try:
      writer.flush(block_until_num_items, timeout_ms=_FLUSH_POLL_MS)
      return
    except reverb.errors.DeadlineExceededError:
      continue


def _open_writer(make: Callable[[int], Any], timeout_ms: Optional[int],
                 closed: Callable[[], bool]):
  """`make(get_signature_timeout_ms)`: a new Reverb writer, whose creation
  fetches the tables' signatures from the server, in C++. While the server
  is away that fetch waits up to its timeout (Acme's and ours: 300 s), where
  no stop handler can run: an actor whose replay stopped just before its
  first write held its pod until the deadline. Made here in slices of
  `_FLUSH_POLL_MS` up to `timeout_ms` in all (None: no bound).

  Raises RuntimeError once `closed()` (a stop handler closed the adder): a
  loop that goes on writing after its stop would otherwise open a new writer
  to a server that may be gone (a writer opened at shutdown once crashed its
  process in Reverb).
  """
  deadline = (None if timeout_ms is None
              else time.monotonic() + timeout_ms / 1000)
  while True:
    if closed():
      raise RuntimeError('the adder is closed: no writer is opened after '
                         'close().')
    slice_ms = _FLUSH_POLL_MS
    if deadline is not None:
      slice_ms = max(1, min(slice_ms,
                            int((deadline - time.monotonic()) * 1000)))
    try:
      return make(slice_ms)
    except RuntimeError as error:
      # Reverb 0.7 raises a bare RuntimeError('Deadline Exceeded') here.
      if ('deadline exceeded' not in str(error).lower() or
          (deadline is not None and time.monotonic() >= deadline)):
        raise


# Windows per chunk of an episode writer: a few keeps the list of chunks a
# writer keeps referenceable short, and bounds what it buffers uncompressed.
_EPISODE_CHUNK_WINDOWS = 8


class _OpenEpisode:
  """A stream's episode whose episode item is not written yet."""

  def __init__(self, first: int):
    self.first = first  # Window holding the episode's first transition.
    self.last: Optional[int] = None  # ... its last (known once it ended).
    self.positions: List[int] = []  # Its windows' steps in the episode
    # writer of its stream.


def _terminal_step(step, terminal_observation):
  """Acme's completion of an episode's last observation: zero action,
  reward, discount and extras, not a start of episode."""
  terminal = {key: tree.map_structure(np.zeros_like, value)
              for key, value in step.items()
              if key in ('action', 'reward', 'discount', 'extras')}
  terminal['observation'] = terminal_observation
  terminal['start_of_episode'] = np.zeros_like(step['start_of_episode'])
  return terminal


def _has_extras(extras) -> bool:
  return (len(extras) > 0 if hasattr(extras, '__len__')  # pylint: disable=g-explicit-length-test
          else extras is not None)


class _WindowsWriter:
  """Writer life cycle shared by both adders (they own a `_windows`)."""

  _windows: _Windows

  def flush(self, timeout_ms: Optional[int] = None):
    """Blocks until every item written so far is in its tables."""
    self._windows.flush(timeout_ms)

  def close(self, timeout_ms: Optional[int] = None):
    """Closes the writer; with a timeout, first waits for pending items."""
    self._windows.close(timeout_ms)

  def __del__(self):
    try:
      self.close(timeout_ms=10_000)
    except Exception:  # pylint: disable=broad-except
      pass


class TrajectoryAdder(_WindowsWriter, adders.Adder):
  """Writes Acme SequenceAdder(CONTINUE) items with one append per item."""

  def __init__(
      self,
      client: reverb.Client,
      sequence_length: int,
      period: int,
      priority_fns: Mapping[str, PriorityFn],
      max_in_flight_items: int = 2,
      get_signature_timeout_ms: Optional[int] = 300_000,
      episode_tables: Sequence[str] = (),
      max_episode_windows: int = 1,
  ):
    """Creates the adder.

    Args:
      client: a Reverb client.
      sequence_length: L, steps per item (IMPALA: unroll length + 1).
      period: P, steps between the starts of consecutive items, 1 <= P <= L.
      priority_fns: table name -> None (priority 1) or a function of the
        item's numpy `Trajectory`, as in Acme's adders. One item per table,
        all referencing the same data.
      max_in_flight_items: items not yet confirmed by the server before an
        insert blocks (the queue table's back-pressure reaches the actor
        through this), as in Acme's adders.
      get_signature_timeout_ms: time allowed to fetch the tables' signatures,
        against which the writer checks the first item (None: no check).
      episode_tables: tables that get one item per episode instead (LASER's
        replay of whole episodes): the item's steps are the [L, ...] windows
        from the one holding the episode's first transition to the one
        holding its last, in order, so an item of n windows has [n, L, ...]
        columns; its priority is n. Needs period = sequence_length - 1.
      max_episode_windows: the most windows of an episode item; a longer
        episode is written up to its first `max_episode_windows` windows.
    """
    self._windows = _Windows(client, 1, sequence_length, period, priority_fns,
                             max_in_flight_items, get_signature_timeout_ms,
                             episode_tables, max_episode_windows)
    # The observation awaiting its action (Acme's partial step).
    self._pending: Optional[tuple] = None

  def add_first(self, timestep: dm_env.TimeStep):
    if not timestep.first():
      raise ValueError('adder.add_first expects a first timestep (one for '
                       f'which timestep.first() is True), got step_type='
                       f'{timestep.step_type!r}.')
    self._pending = (timestep.observation, True)

  def add(self, action: types.NestedArray, next_timestep: dm_env.TimeStep,
          extras: types.NestedArray = ()):
    if self._pending is None:
      raise ValueError('adder.add_first must be called before adder.add.')
    observation, start = self._pending
    step = {
        'observation': observation,
        'start_of_episode': np.bool_(start),
        'action': action,
        'reward': next_timestep.reward,
        'discount': next_timestep.discount,
    }
    if _has_extras(extras):
      step['extras'] = extras
    batch = lambda x: np.expand_dims(x, 0)
    self._windows.push(tree.map_structure(batch, step))
    if next_timestep.last():
      self._windows.push(tree.map_structure(
          batch, _terminal_step(step, next_timestep.observation)),
                         terminal=True)
      self._pending = None
    else:
      self._pending = (next_timestep.observation, False)

  def reset(self):
    """As Acme's CONTINUE adder: the stream runs on across episodes."""


class BatchedTrajectoryAdder(_WindowsWriter):
  """K TrajectoryAdder streams fed one [K, ...] step at a time.

  The batched form of Acme's adder interface: `add_first(index, timestep)`
  starts stream `index`'s episode, `add(actions, timesteps, extras)` adds
  one step to every stream. The adder keeps each stream's pending
  observation (Acme's partial step) and whether it began an episode.
  """

  def __init__(
      self,
      client: reverb.Client,
      num_streams: int,
      sequence_length: int,
      period: int,
      priority_fns: Mapping[str, PriorityFn],
      max_in_flight_items: int = 2,
      get_signature_timeout_ms: Optional[int] = 300_000,
      episode_tables: Sequence[str] = (),
      max_episode_windows: int = 1,
  ):
    """As TrajectoryAdder, for `num_streams` environments stepped together.

    `max_in_flight_items` is per stream, as if there were K adders, up to
    48 items in all (Reverb warns from 50; see `_MAX_PENDING_ITEMS`); episode
    items are per stream, each one environment's episode.
    """
    self._k = num_streams
    self._windows = _Windows(client, num_streams, sequence_length, period,
                             priority_fns, max_in_flight_items,
                             get_signature_timeout_ms, episode_tables,
                             max_episode_windows)
    self._observations = None  # Pending observations, a nest of [K, ...].
    self._starts = np.zeros(num_streams, bool)
    self._pending = np.zeros(num_streams, bool)

  @property
  def num_streams(self) -> int:
    return self._k

  def add_first(self, index: int, timestep: dm_env.TimeStep):
    """Starts an episode in stream `index`."""
    if not timestep.first():
      raise ValueError('adder.add_first expects a first timestep (one for '
                       f'which timestep.first() is True), got step_type='
                       f'{timestep.step_type!r} for stream {index}.')
    if self._observations is None:
      self._observations = tree.map_structure(
          lambda x: np.zeros((self._k,) + np.shape(x), np.asarray(x).dtype),
          timestep.observation)
    for pending, value in zip(tree.flatten(self._observations),
                              tree.flatten(timestep.observation)):
      pending[index] = value
    self._starts[index] = True
    self._pending[index] = True

  def add(self, actions: np.ndarray, next_timesteps: dm_env.TimeStep,
          extras: Any = ()):
    """Adds one step to every stream with an episode under way: its pending
    observation, the action taken there, and the reward and discount that
    followed.

    Args:
      actions: [K] actions.
      next_timesteps: the K environments' timesteps after the actions, as
        one batch (`envs.batched.BatchedEnvironment`'s layout: [K] step
        types, rewards and discounts, [K, ...] observations). FIRST rows are
        environments that this step reset after their LAST one (dm_env's
        auto-reset): they add nothing; call `add_first` for them next.
      extras: a nest of [K, ...] arrays (e.g. the behaviour logits).
    Streams whose episode ended also get Acme's terminal step; call
    `add_first` for them before their next `add`.
    """
    step_types = np.asarray(next_timesteps.step_type)
    stepping = step_types != int(dm_env.StepType.FIRST)
    if not np.array_equal(stepping, self._pending):
      missing = np.flatnonzero(stepping & ~self._pending).tolist()
      if missing:
        raise ValueError(f'adder.add_first must be called for streams '
                         f'{missing} before adder.add.')
      raise ValueError(
          'adder.add got FIRST timesteps for streams '
          f'{np.flatnonzero(~stepping & self._pending).tolist()} in the '
          'middle of their episodes; an environment restarts only after a '
          'LAST timestep.')
    if stepping.all():
      streams, rows = None, slice(None)
    else:
      streams = np.flatnonzero(stepping)
      rows = streams
    take = lambda x: np.asarray(x)[rows]  # pylint: disable=unnecessary-lambda-assignment
    step = {
        'observation': tree.map_structure(take, self._observations),
        'start_of_episode': self._starts[rows],
        'action': take(actions),
        'reward': take(next_timesteps.reward),
        'discount': take(next_timesteps.discount),
    }
    if _has_extras(extras):
      step['extras'] = tree.map_structure(take, extras)
    self._windows.push(step, streams)
    # Copied into the adder's own arrays: the engine may reuse its buffers.
    for pending, value in zip(tree.flatten(self._observations),
                              tree.flatten(next_timesteps.observation)):
      pending[rows] = np.asarray(value)[rows]
    self._starts[rows] = False
    ended = step_types[rows] == int(dm_env.StepType.LAST)
    if ended.any():
      positions = np.flatnonzero(ended)
      ended_streams = (positions if streams is None else streams[positions])
      tail = tree.map_structure(
          lambda x: x[positions],
          {key: value for key, value in step.items() if key != 'observation'})
      terminal = tree.map_structure(lambda x: x[ended_streams],
                                    self._observations)
      self._windows.push(_terminal_step(tail, terminal), ended_streams,
                         terminal=True)
      self._pending[ended_streams] = False


class PerStreamAdders:
  """K single-environment Acme adders behind the batched adder interface.

  Lets the batched actor write through any Acme adder (e.g. Acme's own
  SequenceAdder, config.adder='acme_sequence'), one per environment.
  """

  def __init__(self, adders_: Sequence[adders.Adder]):
    self._adders = list(adders_)

  @property
  def num_streams(self) -> int:
    return len(self._adders)

  @property
  def adders(self) -> List[adders.Adder]:
    return list(self._adders)

  def add_first(self, index: int, timestep: dm_env.TimeStep):
    self._adders[index].add_first(timestep)

  def add(self, actions: np.ndarray, next_timesteps: dm_env.TimeStep,
          extras: Any = ()):
    """As `BatchedTrajectoryAdder.add` (FIRST rows add nothing)."""
    for i, adder in enumerate(self._adders):
      timestep = adapter.timestep_row(next_timesteps, i)
      if timestep.first():
        continue
      row = tree.map_structure(lambda x, i=i: x[i], extras)
      adder.add(actions[i], timestep, row)

  def flush(self, timeout_ms: Optional[int] = None):
    for adder in self._adders:
      writer = compat.acme_adder_writer(adder)
      if writer is not None:
        writer.flush(0, timeout_ms=timeout_ms)

  def close(self, timeout_ms: Optional[int] = None):
    del timeout_ms  # Acme's adders close without waiting (see close_adder).
    for adder in self._adders:
      close_adder(adder)


class _SlicedFlushWriter:
  """A Reverb TrajectoryWriter whose waits without a timeout (a flush, an
  episode's end) are made in bounded slices (`_flush`); everything else is
  the writer's."""

  def __init__(self, writer: reverb.TrajectoryWriter):
    self._writer = writer

  def flush(self, block_until_num_items: int = 0,
            timeout_ms: Optional[int] = None):
    if timeout_ms is None:
      _flush(self._writer, block_until_num_items)
    else:
      self._writer.flush(block_until_num_items, timeout_ms=timeout_ms)

  def end_episode(self, clear_buffers: bool = True,
                  timeout_ms: Optional[int] = None):
    if timeout_ms is None:
      # Its wait is a flush of the pending items; then nothing is left to
      # wait for.
      _flush(self._writer, 0)
    self._writer.end_episode(clear_buffers, timeout_ms=timeout_ms)

  def __getattr__(self, name: str):
    return getattr(self._writer, name)


class ClosableClient:
  """The Reverb client an Acme adder writes through, with our adders' stop
  behaviour: it opens writers and they flush in bounded slices, and once
  closed it opens none (Acme's adder reopens a writer whenever it has none).

  Acme 0.4.0's SequenceAdder flushes with no bound and opens its writers
  through `client.trajectory_writer`, its only use of the client.
  """

  def __init__(self, client: reverb.Client):
    self._client = client
    self._closed = False

  def trajectory_writer(self, num_keep_alive_refs: int, *,
                        get_signature_timeout_ms: Optional[int] = 3000
                        ) -> _SlicedFlushWriter:
    return _SlicedFlushWriter(_open_writer(
        lambda ms: self._client.trajectory_writer(
            num_keep_alive_refs, get_signature_timeout_ms=ms),
        get_signature_timeout_ms, lambda: self._closed))

  def close(self) -> None:
    self._closed = True

  def __getattr__(self, name: str):
    return getattr(self._client, name)


def acme_sequence_adder(client: reverb.Client, sequence_length: int,
                        period: int, priority_fns: Mapping[str, Any]
                        ) -> acme_reverb.SequenceAdder:
  """Acme's own SequenceAdder writing the items of `TrajectoryAdder`
  (`config.adder='acme_sequence'`), through a `ClosableClient`."""
  return acme_reverb.SequenceAdder(
      client=ClosableClient(client), sequence_length=sequence_length,
      period=period, priority_fns=priority_fns,
      end_of_episode_behavior=acme_reverb.EndBehavior.CONTINUE)


def close_adder(adder) -> None:
  """Closes an adder's Reverb writer without waiting for the server.

  Works for these adders and Acme 0.4.0's. Acme's adder flushes in __del__
  with a 10 s timeout; at shutdown the server may be gone, and 8 adders per
  actor would then hold the process for 80 s, past Launchpad's termination
  notice. Pending items are dropped, as they would be on any stop.
  """
  if isinstance(adder, (_WindowsWriter, PerStreamAdders)):
    adder.close()
    return
  client = getattr(adder, '_client', None)
  if isinstance(client, ClosableClient):
    client.close()  # Before the writer goes: Acme would open another.
  compat.close_acme_adder(adder)
