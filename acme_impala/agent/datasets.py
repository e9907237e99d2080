"""The learner's data pipeline: online and replayed rows mixed into batches.

`MixedBatches` takes `num_online` rows of each batch from the FIFO queue and
the rest from LASER's replay, all online until `ReplayReady` says the replay
can be sampled (the warm-up); `EpisodeWalks` turns replayed items into walks
from an episode's start; `BackgroundIterator` fetches the next batch on a
thread while the learner steps. `builder.IMPALABuilder.make_dataset_iterator`
assembles them.
"""

import queue
import threading
import time
from typing import Callable, Iterator, List, Optional

from absl import logging
import numpy as np
import reverb
import tensorflow as tf
import tree

from acme_impala.agent import types


class MixedBatches:
  """Learner batches: `num_online` rows from the queue, then `num_replayed`
  sampled from the replay, with the rows' origin said by `types.Batch.online`.

  Every online trajectory is learned from exactly once. Reverb removes a
  queue item when it is sampled, so rows already read are never dropped:
  the online dataset hands over partial batches when its wait times out
  (`drop_remainder=False`), and rows read while the replay part is not ready
  wait here for the next call. A wait that times out raises StopIteration;
  the next call resumes where it stopped, rebuilding only the dataset that
  ended.

  Warm-up: until `replay_ready()` says the replay can be sampled
  (`min_replay_size` reached), every row of a batch is online. Waiting for
  the replay instead would deadlock whenever the actors fill the queue
  before the replay reaches its minimum: the queue blocks their writes, so
  the replay never grows (issue 35). From a ready answer on, the batches
  mix; the replay removes only at capacity, so it stays sampleable, unless
  its server restarts from an older (or no) checkpoint: after an outage,
  or a replay read that timed out, the check is made again.
  """

  # Errors of a Reverb read while the server is away (e.g. restarting after
  # a crash). Reverb's datasets retry most of these themselves.
  _UNAVAILABLE = (tf.errors.UnavailableError, tf.errors.CancelledError,
                  tf.errors.AbortedError, reverb.errors.ReverbError)

  def __init__(self, make_online: Optional[Callable[[], Iterator]],
               make_replay: Optional[Callable[[], Iterator]],
               num_online: int, num_replayed: int,
               max_backoff_s: float = 10., walks: bool = False,
               replay_ready: Optional[Callable[[], bool]] = None):
    self._max_backoff_s = max_backoff_s
    self._backoff_s = 0.
    self._outage_since = None
    self._make_online = make_online
    self._make_replay = make_replay
    self._num_online = num_online
    self._num_replayed = num_replayed
    self._online = None
    self._replay = None
    self._rows: List = []  # Online rows read but not yet learned from.
    self._num_rows = 0
    self._online_flags = tf.constant([True] * num_online +
                                     [False] * num_replayed)
    # Replayed rows that walk episodes (`EpisodeWalks`) say where a walk
    # starts; online rows never do.
    self._walks = walks
    self._no_walk_starts = tf.zeros([num_online], tf.bool)
    # Without online rows (f = 1) nothing can be learned before the replay
    # is ready, and nothing blocks the actors: no warm-up.
    self._replay_ready = replay_ready
    self._always_mixing = (replay_ready is None or not num_online or
                           not num_replayed)
    self._mixing = self._always_mixing
    batch_size = num_online + num_replayed
    self._warm_up_flags = tf.constant([True] * batch_size)
    self._warm_up_walk_starts = (tf.zeros([batch_size], tf.bool) if walks
                                 else None)

  def __iter__(self):
    return self

  @classmethod
  def _unavailable(cls, error: Exception) -> bool:
    # TF 2.8 re-raises an UnavailableError of an eager op it does not count
    # as communication (e.g. MakeIterator of a TimestepDataset while the
    # server restarts) as InternalError, saying so in the message.
    return isinstance(error, cls._UNAVAILABLE) or (
        isinstance(error, tf.errors.InternalError) and
        'originally returned UnavailableError' in str(error))

  def _through_outage(self, read):
    """`read()` (building a dataset or reading it), or StopIteration after
    noting the outage when the server is away meanwhile."""
    try:
      return read()
    except Exception as error:  # pylint: disable=broad-except
      if not self._unavailable(error):
        raise
      self._lost_server(error)
      raise StopIteration from error

  def _next(self, iterator):
    sample = self._through_outage(lambda: next(iterator))
    if isinstance(sample, reverb.ReplaySample):
      return sample.data
    return sample

  def _lost_server(self, error):
    """Drops both datasets; the next call rebuilds them after a backoff.
    Rows already read stay in `_rows`."""
    self._online = self._replay = None
    self._mixing = self._always_mixing  # The replay may come back smaller.
    now = time.time()
    if self._outage_since is None:
      self._outage_since = now
      logging.warning('learner data: the Reverb server is unreachable (%s); '
                      'reconnecting with backoff.', error)
    self._backoff_s = min(max(2 * self._backoff_s, 0.5), self._max_backoff_s)

  def _reconnected(self):
    if self._outage_since is not None:
      logging.warning('learner data: reading again after %.1f s.',
                      time.time() - self._outage_since)
      self._outage_since, self._backoff_s = None, 0.

  @property
  def warming_up(self) -> bool:
    """Whether batches are still all online, waiting for the replay."""
    return not self._mixing

  def _fill_online(self, n: int):
    """Reads queue rows until `n` are held."""
    while self._num_rows < n:
      if self._online is None:
        self._online = self._through_outage(self._make_online)
      try:
        part = self._next(self._online)
      except StopIteration:
        self._online = None  # Ended by its timeout, nothing held back.
        raise
      self._rows.append(part)
      self._num_rows += int(tree.flatten(part)[0].shape[0])

  def _take_online(self, n: int):
    if len(self._rows) == 1 and self._num_rows == n:
      # The usual case, one full read: no copy.
      self._num_rows = 0
      return self._rows.pop()
    rows = (self._rows[0] if len(self._rows) == 1 else tree.map_structure(
        lambda *xs: tf.concat(xs, axis=0), *self._rows))
    self._num_rows -= n
    self._rows = ([tree.map_structure(lambda x: x[n:], rows)]
                  if self._num_rows else [])
    return tree.map_structure(lambda x: x[:n], rows)

  def __next__(self) -> types.Batch:
    if self._backoff_s:
      time.sleep(self._backoff_s)
    if not self._mixing:
      self._mixing = bool(self._through_outage(self._replay_ready))
    if not self._mixing:
      batch_size = self._num_online + self._num_replayed
      self._fill_online(batch_size)
      data = self._take_online(batch_size)
      self._reconnected()
      return types.Batch(data=data, online=self._warm_up_flags,
                         walk_start=self._warm_up_walk_starts)
    parts = []
    self._fill_online(self._num_online)
    if self._num_replayed:
      if self._replay is None:
        self._replay = self._through_outage(self._make_replay)
      try:
        replayed = self._next(self._replay)
      except StopIteration:
        # Sampling does not remove: nothing is lost. A replay read times
        # out only below min_replay_size: ask again before mixing.
        self._replay = None
        self._mixing = self._always_mixing
        raise
    # Online rows leave `_rows` only once the whole batch is there.
    walk_start = None
    if self._num_replayed and self._walks:
      replayed, walk_start = replayed.data, replayed.walk_start
      if self._num_online:
        walk_start = tf.concat([self._no_walk_starts, walk_start], axis=0)
    if self._num_online:
      parts.append(self._take_online(self._num_online))
    if self._num_replayed:
      parts.append(replayed)
    data = parts[0] if len(parts) == 1 else tree.map_structure(
        lambda a, b: tf.concat([a, b], axis=0), *parts)
    self._reconnected()
    return types.Batch(data=data, online=self._online_flags,
                       walk_start=walk_start)


class ReplayReady:
  """Whether a replay table holds the items it needs before it can be
  sampled (`min_size`): one server_info call, bounded by `timeout_ms`
  (an unreachable server raises, which `MixedBatches` waits out)."""

  def __init__(self, server_address: str, table: str, min_size: int,
               timeout_ms: int):
    self._address = server_address
    self._client = None
    self._table = table
    self._min_size = min_size
    self._timeout_s = max(1, timeout_ms // 1000)

  def __call__(self) -> bool:
    if self._client is None:
      self._client = reverb.Client(self._address)
    try:
      info = self._client.server_info(timeout=self._timeout_s)
    except RuntimeError as error:
      if not is_transport_failure(error):
        raise
      raise ServerAway(f'{self._address}: {error}') from error
    return info[self._table].current_size >= self._min_size


class ServerAway(reverb.errors.ReverbError):
  """A Reverb call that failed because the server went away mid-call."""


# What gRPC says when the server's process dies during a call; Reverb's
# client raises them as bare RuntimeErrors (seen: "Socket closed", from
# server_info while the replay node was SIGKILLed and restarted).
_TRANSPORT_FAILURES = ('socket closed', 'connection reset', 'broken pipe',
                       'failed to connect', 'connection refused',
                       'unavailable')


def is_transport_failure(error: Exception) -> bool:
  """Whether `error` (a RuntimeError of Reverb's client) says the server
  went away, not that the call was wrong."""
  message = str(error).lower()
  return any(m in message for m in _TRANSPORT_FAILURES)


class EpisodeWalks:
  """R replayed rows, each walking episodes one trajectory at a time.

  LASER Appendix A.2: "we uniformly sample an episode. Then we replay each
  episode from the beginning". Row r reads its own Reverb `TimestepDataset`
  of the replay's episode items (see adders.py): a sample is one episode,
  its timesteps are the episode's [T+1, ...] windows in order, so row r
  yields an episode's windows on successive calls and then samples the next
  episode. Only the window being learned from is decompressed into the
  batch; Reverb's sampler holds the current episode's compressed chunks.

  An episode item's priority is its length in windows (uniform sampling
  ignores it), which says where a walk ends even when the same episode is
  sampled twice in a row. A rebuilt `EpisodeWalks` (after a timeout or an
  outage) starts every row on a new episode.

  Yields `types.ReplayRows`: data [R, T+1, ...] and walk_start [R] bool,
  True where the row's window is the first of its episode.
  """

  def __init__(self, server_address: str, table: str, num_rows: int,
               window_signature, timeout_ms: int, prefetch_size: int):
    # TimestepDataset waits 30 s per row for an absent server and then
    # samples unchecked; asking first turns an outage into a prompt
    # DeadlineExceededError, which MixedBatches waits out with backoff.
    reverb.Client(server_address).server_info(
        timeout=max(1, timeout_ms // 1000))
    dtypes = tree.map_structure(lambda spec: spec.dtype, window_signature)
    shapes = tree.map_structure(lambda spec: spec.shape, window_signature)
    rows = tuple(
        reverb.TimestepDataset(
            server_address=server_address, table=table, dtypes=dtypes,
            shapes=shapes, max_in_flight_samples_per_worker=2,
            num_workers_per_iterator=1, rate_limiter_timeout_ms=timeout_ms)
        for _ in range(num_rows))
    # Not converted by AutoGraph (no Python control flow on tensors): its
    # conversion of dm-tree's code costs about a second at start-up.
    stack = tf.autograph.experimental.do_not_convert(
        lambda *samples: tree.map_structure(lambda *x: tf.stack(x), *samples))
    dataset = tf.data.Dataset.zip(rows).map(stack)
    if prefetch_size:
      dataset = dataset.prefetch(prefetch_size)
    self._iterator = iter(dataset)
    self._keys = np.zeros(num_rows, np.uint64)
    self._remaining = np.zeros(num_rows, np.int64)  # Windows left to walk.

  def __iter__(self):
    return self

  def __next__(self) -> types.ReplayRows:
    sample = next(self._iterator)
    keys = sample.info.key.numpy()
    lengths = sample.info.priority.numpy().astype(np.int64)
    start = (self._remaining <= 0) | (keys != self._keys)
    self._remaining = np.where(start, lengths, self._remaining) - 1
    self._keys = keys
    return types.ReplayRows(data=sample.data, walk_start=tf.constant(start))


class BackgroundIterator:
  """Reads an iterator in a daemon thread; `next` never blocks a stop.

  A tf.data read from Reverb can block without end once the server is gone;
  the learner's main loop instead polls this queue and returns promptly when
  the program stops (the daemon reader dies with the process). The wrapped
  iterator's StopIteration means "nothing within its timeout": it is asked
  again (MixedBatches resumes without losing rows).
  """

  def __init__(self, iterator: Iterator, should_stop: Callable[[], bool],
               capacity: int = 2):
    self._iterator = iterator
    self._should_stop = should_stop
    self._queue = queue.Queue(maxsize=capacity)
    self._thread = threading.Thread(target=self._fill, daemon=True,
                                    name='learner-data')
    self._thread.start()

  def _fill(self):
    try:
      while not self._should_stop():
        try:
          item = next(self._iterator)
        except StopIteration:
          continue
        while not self._should_stop():
          try:
            self._queue.put(item, timeout=0.5)
            break
          except queue.Full:
            continue
    except Exception as error:  # pylint: disable=broad-except
      self._queue.put(error)

  def __iter__(self):
    return self

  def __next__(self):
    while True:
      if self._should_stop():
        raise StopIteration
      try:
        item = self._queue.get(timeout=0.5)
      except queue.Empty:
        continue
      if isinstance(item, Exception):
        raise item
      return item
