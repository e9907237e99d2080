"""IMPALABuilder: the one place that makes the agent's components.

With Acme's builder method names, `IMPALABuilder` makes the Reverb tables
(the FIFO trajectory queue and LASER's replay), the learner's data iterator,
the adders, the actors and the learner. The single-process agent
(`agent.IMPALA`) and every distributed program (`program.build_program`) are
assembled from it, and it is the only module that knows Reverb: table names
(from `types`), the trajectory signature, which adder writes, and how the
learner reads. Each piece can also be used on its own, e.g. to put our
learner or actor into another Acme agent.
"""

import queue
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from acme import adders as acme_adders
from acme import core
from acme import specs
from acme.adders import reverb as acme_reverb
from acme.tf import utils as tf2_utils
from acme.utils import counting
from acme.utils import loggers
from absl import logging
import numpy as np
import reverb
import tensorflow as tf
import tree

from acme_impala import acting
from acme_impala import adders as adders_lib
from acme_impala import config as config_lib
from acme_impala import learning
from acme_impala import networks as networks_lib
from acme_impala import types


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
    info = self._client.server_info(timeout=self._timeout_s)
    return info[self._table].current_size >= self._min_size


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


def _is_batched(num_envs: int, batched: Optional[bool]) -> bool:
  """An explicit choice, else batched for more than one environment."""
  return num_envs > 1 if batched is None else batched


class IMPALABuilder:
  """Builds IMPALA's Reverb tables, data iterator, adders, actors, learner."""

  def __init__(self, config: config_lib.IMPALAConfig,
               environment_spec: specs.EnvironmentSpec,
               agent_id: int = 0,
               queue_table: str = types.QUEUE_TABLE,
               replay_table: str = types.REPLAY_TABLE):
    """Creates the builder.

    Args:
      config: the agent's hyperparameters.
      environment_spec: the environment's specs.
      agent_id: this agent's index within a sweep; its actors record it with
        every step, so that a learner reading a shared replay can tell its
        own agent's trajectories apart.
      queue_table, replay_table: table names; agents of a sweep each have
        their own queue and may share one replay table in one Reverb server.
    """
    self._config = config
    self._spec = environment_spec
    self._agent_id = agent_id
    self._queue_table = queue_table
    self._replay_table = replay_table

  @classmethod
  def for_sweep_agent(cls, config: config_lib.IMPALAConfig,
                      environment_spec: specs.EnvironmentSpec, agent_id: int,
                      share_replay: bool) -> 'IMPALABuilder':
    """Agent `agent_id` of a sweep: its own queue, and the shared replay
    table or one of its own."""
    replay = (types.REPLAY_TABLE if share_replay else
              f'{types.REPLAY_TABLE}_{agent_id}')
    return cls(config, environment_spec, agent_id=agent_id,
               queue_table=f'{types.QUEUE_TABLE}_{agent_id}',
               replay_table=replay)

  @property
  def config(self) -> config_lib.IMPALAConfig:
    return self._config

  @property
  def environment_spec(self) -> specs.EnvironmentSpec:
    return self._spec

  @property
  def agent_id(self) -> int:
    return self._agent_id

  @property
  def uses_queue(self) -> bool:
    return self._config.num_online > 0

  @property
  def uses_replay(self) -> bool:
    return self._config.num_replayed > 0

  @property
  def queue_table(self) -> Optional[str]:
    return self._queue_table if self.uses_queue else None

  @property
  def replay_table(self) -> Optional[str]:
    return self._replay_table if self.uses_replay else None

  @property
  def table_names(self) -> List[str]:
    """The tables this agent's actors write into."""
    return [t for t in (self.queue_table, self.replay_table) if t]

  @property
  def replays_episodes(self) -> bool:
    """The replay holds whole episodes (replay_core_state='recompute')."""
    return self._config.replays_episodes

  @property
  def _trajectory_tables(self) -> List[str]:
    """Tables that get each trajectory (window) as an item."""
    if self.replays_episodes:
      return [t for t in (self.queue_table,) if t]
    return self.table_names

  @property
  def _episode_tables(self) -> List[str]:
    """Tables that get each episode as an item."""
    return [self.replay_table] if self.replays_episodes else []

  def table_roles(self, prefix: str = '') -> Dict[str, Tuple[str, str]]:
    """{table name: (role, unit of its items)} for progress reports, e.g.
    {'priority_table': ('queue', 'trajectories'), 'replay': ('replay',
    'episodes')}; roles start with `prefix` (a sweep's 'agent_0 ')."""
    roles = {}
    if self.uses_queue:
      roles[self._queue_table] = (prefix + 'queue', 'trajectories')
    if self.uses_replay:
      roles[self._replay_table] = (
          prefix + 'replay',
          'episodes' if self.replays_episodes else 'trajectories')
    return roles

  def make_network(self) -> networks_lib.IMPALANetwork:
    """A network with its variables created (same order in every process)."""
    net = networks_lib.make_network(self._config,
                                    self._spec.actions.num_values)
    tf2_utils.create_variables(net, [self._spec.observations])
    return net

  def trajectory_signature(self, network=None):
    """The Reverb signature of the trajectory items (Acme's SequenceAdder)."""
    network = network or self.make_network()
    extras = acting.extras_spec(network, self._spec.actions.num_values,
                                self._config.record_policy_version)
    return acme_reverb.SequenceAdder.signature(
        self._spec, extras_spec=extras,
        sequence_length=self._config.sequence_length)

  def make_replay_tables(self, include_replay: bool = True
                         ) -> List[reverb.Table]:
    """The FIFO trajectory queue and, with replay_fraction > 0, the replay.

    A Reverb queue blocks inserts when it holds `max_queue_size` items: that
    is the back-pressure that keeps actors from running ahead of the learner
    (and bounds policy lag) instead of growing the queue without bound. The
    replay samples uniformly, removes the oldest item at capacity, and never
    blocks inserts; sampling waits for `min_replay_size` items. With f = 1
    there is no queue, so nothing can block the actors.
    `include_replay=False` leaves the replay out (a sweep's shared replay is
    made once, by `make_replay_table`).
    """
    cfg = self._config
    signature = self.trajectory_signature()
    tables = []
    if self.uses_queue:
      tables.append(reverb.Table.queue(name=self._queue_table,
                                       max_size=cfg.max_queue_size,
                                       signature=signature))
    if self.uses_replay and include_replay:
      tables.append(self.make_replay_table(signature))
    return tables

  def make_replay_table(self, signature=None) -> reverb.Table:
    """LASER's replay: uniform sampling, FIFO removal, `replay_capacity`
    items (whole episodes under 'recompute', trajectories otherwise)."""
    cfg = self._config
    signature = signature or self.trajectory_signature()
    if self.replays_episodes:
      # Episode items are [n, T+1, ...], read one [T+1, ...] window at a time
      # by TimestepDatasets, which Reverb 0.7 checks against the table
      # signature as [T+1, ...]: no single signature serves both, so the
      # table has none. The writer still checks the same windows against
      # the queue's signature.
      signature = None
    return reverb.Table(
        name=self._replay_table,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=cfg.replay_capacity,
        rate_limiter=reverb.rate_limiters.MinSize(cfg.min_replay_size),
        signature=signature)

  def _table_dataset(self, server_address: str, table: str, batch_size: int,
                     timeout_ms: int, drop_remainder: bool) -> Iterator:
    dataset = reverb.TrajectoryDataset.from_table_signature(
        server_address=server_address,
        table=table,
        max_in_flight_samples_per_worker=2 * batch_size,
        num_workers_per_iterator=1,
        rate_limiter_timeout_ms=timeout_ms)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    if self._config.prefetch_size:
      dataset = dataset.prefetch(self._config.prefetch_size)
    return iter(dataset)

  def make_dataset_iterator(
      self, server_address: str, timeout_ms: int = 2000,
      should_stop: Optional[Callable[[], bool]] = None) -> Iterator:
    """`types.Batch`es of [B, T+1] items: B(1-f) online rows, then Bf replayed.

    Under replay_core_state='recompute' the replayed rows walk episodes
    (`EpisodeWalks`) and the batch says where each walk starts. Until the
    replay holds `min_replay_size` items every row is online (see
    `MixedBatches`).

    `timeout_ms` bounds each wait for data: when a table has nothing to give
    for that long, `next` raises StopIteration and the next call resumes
    (no row taken from the queue is lost). With `should_stop`, the iterator
    reads in a background thread and `next` returns (StopIteration) within
    0.5 s of `should_stop()` turning True, however Reverb behaves.
    """
    cfg = self._config
    make_online = make_replay = None
    if self.uses_queue:
      # Partial batches are handed over at a timeout, not dropped: the
      # queue has already removed those items.
      make_online = lambda: self._table_dataset(
          server_address, self._queue_table, cfg.num_online, timeout_ms,
          drop_remainder=False)
    if self.uses_replay and self.replays_episodes:
      window_signature = self.trajectory_signature()
      make_replay = lambda: EpisodeWalks(
          server_address, self._replay_table, cfg.num_replayed,
          window_signature, timeout_ms, cfg.prefetch_size)
    elif self.uses_replay:
      make_replay = lambda: self._table_dataset(
          server_address, self._replay_table, cfg.num_replayed, timeout_ms,
          drop_remainder=True)
    replay_ready = None
    if make_online and make_replay:
      replay_ready = ReplayReady(server_address, self._replay_table,
                                 cfg.min_replay_size, timeout_ms)
    batches = MixedBatches(make_online, make_replay, cfg.num_online,
                           cfg.num_replayed, walks=self.replays_episodes,
                           replay_ready=replay_ready)
    if should_stop is None:
      return batches
    return BackgroundIterator(batches, should_stop)

  def _single_adder(self, client: reverb.Client) -> acme_adders.Adder:
    """Writes [T+1]-step items every T steps, across episode boundaries.

    Consecutive items overlap by one step so that every transition is learned
    from exactly once, with its bootstrap observation. CONTINUE keeps writing
    through episode ends, as the paper's actors do (n steps regardless of
    episodes): no zero-padding, so no wasted learner compute on short
    episodes. `config.adder` picks our one-append-per-item TrajectoryAdder or
    Acme's SequenceAdder; the items are the same.
    """
    cfg = self._config
    priority_fns = {name: None for name in self._trajectory_tables}
    if cfg.adder == 'trajectory':
      return adders_lib.TrajectoryAdder(
          client, sequence_length=cfg.sequence_length,
          period=cfg.unroll_length, priority_fns=priority_fns,
          episode_tables=self._episode_tables,
          max_episode_windows=cfg.max_episode_trajectories)
    return acme_reverb.SequenceAdder(
        client=client, sequence_length=cfg.sequence_length,
        period=cfg.unroll_length, priority_fns=priority_fns,
        end_of_episode_behavior=acme_reverb.EndBehavior.CONTINUE)

  @property
  def batched_acting(self) -> bool:
    """Whether actors step their environments as one batch: with K > 1
    environments, and always with EnvPool (a pool even of one)."""
    cfg = self._config
    return cfg.envs_per_actor > 1 or cfg.env_engine == 'envpool'

  def make_adder(self, replay_client: reverb.Client, num_envs: int = 1,
                 batched: Optional[bool] = None):
    """Writes each trajectory once; the queue and replay items reference
    the same data in Reverb (one item per table, no second copy). Under
    'recompute' the replay's items are whole episodes of those trajectories.

    Unbatched (the default for num_envs == 1), one Acme adder. Batched (the
    default for K > 1 environments per actor; see `batched_acting`), one
    batched adder (`add_first(index, timestep)`,
    `add(actions, timesteps, extras)`): a BatchedTrajectoryAdder
    (config.adder == 'trajectory') or K Acme SequenceAdders behind
    `PerStreamAdders` ('acme_sequence'); both write the items of K
    single-environment adders.
    """
    cfg = self._config
    if not _is_batched(num_envs, batched):
      return self._single_adder(replay_client)
    if cfg.adder == 'trajectory':
      return adders_lib.BatchedTrajectoryAdder(
          replay_client, num_envs, sequence_length=cfg.sequence_length,
          period=cfg.unroll_length,
          priority_fns={name: None for name in self._trajectory_tables},
          episode_tables=self._episode_tables,
          max_episode_windows=cfg.max_episode_trajectories)
    return adders_lib.PerStreamAdders(
        [self._single_adder(replay_client) for _ in range(num_envs)])

  def make_actor(
      self,
      network: networks_lib.IMPALANetwork,
      adder=None,
      variable_source: Optional[core.VariableSource] = None,
      seed: Optional[int] = None,
      num_envs: int = 1,
      policy_version: Optional[tf.Variable] = None,
      batched: Optional[bool] = None,
  ):
    """An IMPALAActor or a BatchedIMPALAActor (`batched`; by default when
    num_envs > 1).

    With a variable source, the actor refreshes its weights (and the policy
    version it records) every `variable_update_period` actor steps. Without
    one, `policy_version` is the variable it records (e.g. the learner's step
    counter when actor and learner share the network).
    """
    cfg = self._config
    if policy_version is None and (cfg.record_policy_version or
                                   variable_source is not None):
      policy_version = tf.Variable(0, dtype=tf.int64, trainable=False)
    client = None
    if variable_source is not None:
      client = acting.make_variable_client(
          variable_source, network, cfg.variable_update_period,
          policy_version)
    recorded = policy_version if cfg.record_policy_version else None
    if not _is_batched(num_envs, batched):
      return acting.IMPALAActor(network, adder, client, seed=seed,
                                policy_version=recorded,
                                agent_id=self._agent_id)
    return acting.BatchedIMPALAActor(network, num_envs, adder, client,
                                     seed=seed, policy_version=recorded,
                                     agent_id=self._agent_id)

  def make_learner(
      self,
      network: networks_lib.IMPALANetwork,
      iterator: Iterator,
      counter: Optional[counting.Counter] = None,
      logger: Optional[loggers.Logger] = None,
  ) -> learning.IMPALALearner:
    return learning.IMPALALearner(network, iterator, self._config,
                                  counter=counter, logger=logger,
                                  agent_id=self._agent_id)


def make_server_tables(builders: Sequence[IMPALABuilder],
                       share_replay: bool) -> List[reverb.Table]:
  """The tables of one Reverb server holding several agents' data: every
  agent's queue, and one replay table that all of them write into and sample
  from (`share_replay`, LASER's shared replay) or each agent's own."""
  tables = []
  for b in builders:
    tables.extend(b.make_replay_tables(include_replay=not share_replay))
  with_replay = [b for b in builders if b.uses_replay]
  if share_replay and with_replay:
    tables.append(with_replay[0].make_replay_table())
  return tables
