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

from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from acme import adders as acme_adders
from acme import core
from acme import specs
from acme.adders import reverb as acme_reverb
from acme.tf import utils as tf2_utils
from acme.utils import counting
from acme.utils import loggers
import numpy as np
import reverb
import tensorflow as tf
import tree

from acme_impala.agent import acting
from acme_impala.agent import adders as adders_lib
from acme_impala.agent import config as config_lib
from acme_impala.agent import datasets
from acme_impala.agent import learning
from acme_impala.agent import networks as networks_lib
from acme_impala.agent import replicas
from acme_impala.agent import types
from acme_impala.envs import multitask



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

  def for_replica_group(self, num_learners: int) -> 'IMPALABuilder':
    """This agent as seen by one of `num_learners` synchronous learner
    replicas (agent/replicas.py): the same tables, each learner batch a
    1/num_learners share (B / K rows: B(1-f) / K online, Bf / K replayed).
    ValueError when the batch does not split so."""
    config = self._config
    config_lib.validate_num_learners(config, num_learners)
    replayed = config.num_replayed
    share = config.replace(batch_size=config.batch_size // num_learners)
    if share.num_replayed * num_learners != replayed:
      # round(B f / K) per share could differ from B f / K.
      raise ValueError(
          f'num_learners={num_learners}: a share of batch_size='
          f'{share.batch_size} replays {share.num_replayed} rows, not '
          f'{replayed} / {num_learners}.')
    return IMPALABuilder(share, self._spec, agent_id=self._agent_id,
                         queue_table=self._queue_table,
                         replay_table=self._replay_table)

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

  def make_network(self, seed: Optional[int] = None
                   ) -> networks_lib.IMPALANetwork:
    """A network with its variables created (same order in every process).

    With `seed`, its initial weights are a function of the seed alone: the
    global TensorFlow seed is set just before the variables are made (in
    eager mode that also restarts the op-seed counter), so whatever random
    ops this process ran before does not matter. The learner's network is
    made so; the other processes' copies take the learner's weights.
    """
    if seed is not None:
      tf.random.set_seed(seed)
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

  def warm_up_batch(self, network=None) -> types.Batch:
    """Zeros shaped as a batch of `make_dataset_iterator` (B items of the
    trajectory signature, every row online, walk starts where the replay
    walks episodes): what `IMPALALearner.warm_up` traces the update on."""
    batch_size = self._config.batch_size
    data = tree.map_structure(
        lambda s: np.zeros((batch_size,) + tuple(s.shape),
                           s.dtype.as_numpy_dtype),
        self.trajectory_signature(network))
    return types.Batch(
        data=data, online=np.ones(batch_size, bool),
        walk_start=(np.zeros(batch_size, bool) if self.replays_episodes
                    else None))

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
      make_replay = lambda: datasets.EpisodeWalks(
          server_address, self._replay_table, cfg.num_replayed,
          window_signature, timeout_ms, cfg.prefetch_size)
    elif self.uses_replay:
      make_replay = lambda: self._table_dataset(
          server_address, self._replay_table, cfg.num_replayed, timeout_ms,
          drop_remainder=True)
    replay_ready = None
    if make_online and make_replay:
      replay_ready = datasets.ReplayReady(server_address, self._replay_table,
                                 cfg.min_replay_size, timeout_ms)
    batches = datasets.MixedBatches(make_online, make_replay, cfg.num_online,
                           cfg.num_replayed, walks=self.replays_episodes,
                           replay_ready=replay_ready)
    if should_stop is None:
      return batches
    return datasets.BackgroundIterator(batches, should_stop)

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
    return adders_lib.acme_sequence_adder(
        client, sequence_length=cfg.sequence_length,
        period=cfg.unroll_length, priority_fns=priority_fns)

  @property
  def tasks(self) -> Tuple[str, ...]:
    """The environment ids this agent acts in: `config.env_ids`' tasks
    (multi-task), else `(config.env_id,)`."""
    return (multitask.task_ids(self._config.env_ids) or
            (self._config.env_id,))

  def task_of_actor(self, actor_id: int) -> str:
    """The task actor `actor_id` plays for the whole run: the tasks in
    turn, so each gets num_actors / len(tasks) actors (IMPALA section 5.3's
    fixed number of actors per task)."""
    return self.tasks[actor_id % len(self.tasks)]

  @property
  def environment_kwargs(self) -> Dict[str, object]:
    """`registry.make_environment` arguments that give every task this
    builder's `environment_spec` (`registry.task_kwargs`): the full action
    set and the suite's channel count for a multi-task agent, none
    otherwise."""
    if not self._config.env_ids:
      return {}
    observation = self._spec.observations
    observation = getattr(observation, 'observation', observation)  # OAR.
    return dict(full_action_set=True, channels=int(observation.shape[-1]))

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
      variable_update_period: Optional[int] = None,
  ):
    """An IMPALAActor or a BatchedIMPALAActor (`batched`; by default when
    num_envs > 1).

    With a variable source (an IMPALALearner, or anything serving its
    variable groups, `types.WEIGHTS_VERSION` among them), the actor asks for
    new weights (and the policy version it records) every
    `variable_update_period` actor steps (the config's unless given: an
    evaluator gives 1, so that each round plays the weights current at its
    start) and copies them when they have changed
    (acting.VersionedVariableClient). Without one, `policy_version` is the
    variable it records (e.g. the learner's step counter when actor and
    learner share the network).
    """
    cfg = self._config
    if policy_version is None and (cfg.record_policy_version or
                                   variable_source is not None):
      policy_version = tf.Variable(0, dtype=tf.int64, trainable=False)
    client = None
    if variable_source is not None:
      client = acting.make_variable_client(
          variable_source, network,
          variable_update_period or cfg.variable_update_period,
          policy_version, versioned=True)
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
      replica_group: Optional[replicas.Group] = None,
  ) -> learning.IMPALALearner:
    """The learner; `replica_group`: one of K synchronous replicas (this
    builder then being `for_replica_group(K)`'s)."""
    return learning.IMPALALearner(network, iterator, self._config,
                                  counter=counter, logger=logger,
                                  agent_id=self._agent_id,
                                  replica_group=replica_group)


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
