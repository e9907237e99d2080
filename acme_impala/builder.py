"""IMPALABuilder: the agent's components, with Acme's builder method names.

`make_replay_tables`, `make_dataset_iterator`, `make_adder`, `make_actor` and
`make_learner` build the pieces that `acme_impala.program.make_program` wires
into a Launchpad graph; each can also be used on its own, e.g. to put our
learner or actor into another Acme agent.
"""

from typing import Iterator, List, Optional, Sequence

from acme import core
from acme import specs
from acme.tf import utils as tf2_utils
from acme.utils import counting
from acme.utils import loggers
import reverb
import tensorflow as tf
import tree

from acme_impala import acting
from acme_impala import adders as adders_lib
from acme_impala import agent as agent_lib
from acme_impala import config as config_lib
from acme_impala import learning
from acme_impala import networks as networks_lib

QUEUE_TABLE = agent_lib.QUEUE_TABLE
REPLAY_TABLE = 'replay'


class MixedIterator:
  """Concatenates an online batch [B(1-f), ...] and a replay batch [Bf, ...].

  Rows [0, B(1-f)) of every batch are online, the rest replayed (the learner
  relies on this order). Either part may be absent (f = 0 or f = 1).
  """

  def __init__(self, online: Optional[Iterator], replay: Optional[Iterator]):
    self._online = online
    self._replay = replay

  def __iter__(self):
    return self

  def __next__(self):
    parts = [next(it).data for it in (self._online, self._replay) if it]
    if len(parts) == 1:
      return parts[0]
    return tree.map_structure(lambda a, b: tf.concat([a, b], axis=0), *parts)


class IMPALABuilder:
  """Builds IMPALA's Reverb tables, dataset, adder, actor and learner."""

  def __init__(self, config: config_lib.IMPALAConfig,
               environment_spec: specs.EnvironmentSpec,
               queue_table: str = QUEUE_TABLE,
               replay_table: str = REPLAY_TABLE):
    """Table names are parameters so that agents of a sweep can each have
    their own queue and share one replay table in one Reverb server."""
    self._config = config
    self._spec = environment_spec
    self._queue_table = queue_table
    self._replay_table = replay_table

  @property
  def uses_queue(self) -> bool:
    return self._config.num_online > 0

  @property
  def uses_replay(self) -> bool:
    return self._config.num_replayed > 0

  @property
  def config(self) -> config_lib.IMPALAConfig:
    return self._config

  @property
  def environment_spec(self) -> specs.EnvironmentSpec:
    return self._spec

  def make_network(self) -> networks_lib.IMPALANetwork:
    """A network with its variables created (same order in every process)."""
    net = networks_lib.make_network(self._config,
                                    self._spec.actions.num_values)
    tf2_utils.create_variables(net, [self._spec.observations])
    return net

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
    signature = agent_lib.queue_signature(self._spec, self.make_network(),
                                          cfg)
    tables = []
    if self.uses_queue:
      tables.append(reverb.Table.queue(name=self._queue_table,
                                       max_size=cfg.max_queue_size,
                                       signature=signature))
    if self.uses_replay and include_replay:
      tables.append(self.make_replay_table(signature))
    return tables

  def make_replay_table(self, signature=None) -> reverb.Table:
    cfg = self._config
    if signature is None:
      signature = agent_lib.queue_signature(self._spec, self.make_network(),
                                            cfg)
    return reverb.Table(
        name=self._replay_table,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=cfg.replay_capacity,
        rate_limiter=reverb.rate_limiters.MinSize(cfg.min_replay_size),
        signature=signature)

  def _table_iterator(self, server_address, table, batch_size, timeout_ms):
    dataset = reverb.TrajectoryDataset.from_table_signature(
        server_address=server_address,
        table=table,
        max_in_flight_samples_per_worker=2 * batch_size,
        num_workers_per_iterator=1,
        rate_limiter_timeout_ms=timeout_ms)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    if self._config.prefetch_size:
      dataset = dataset.prefetch(self._config.prefetch_size)
    return iter(dataset)

  def make_dataset_iterator(self, server_address: str,
                            timeout_ms: int = 2000) -> Iterator:
    """Batches of [B, T+1] trajectories: B(1-f) online rows, then Bf replayed.

    `timeout_ms` bounds each wait for data: when a table has nothing to give
    for that long, the iterator ends (StopIteration) instead of blocking
    forever, so the learner can check whether the program is stopping.
    """
    cfg = self._config
    online = replay = None
    if self.uses_queue:
      online = self._table_iterator(server_address, self._queue_table,
                                    cfg.num_online, timeout_ms)
    if self.uses_replay:
      replay = self._table_iterator(server_address, self._replay_table,
                                    cfg.num_replayed, timeout_ms)
    return MixedIterator(online, replay)

  def make_adder(self, replay_client: reverb.Client, num_envs: int = 1):
    """Writes each trajectory once; the queue and replay items reference
    the same data in Reverb (one item per table, no second copy).

    With num_envs == 1, one Acme adder. With K > 1 environments per actor,
    one BatchedTrajectoryAdder (config.adder == 'trajectory') or a list of
    K Acme SequenceAdders ('acme_sequence'); both write the items of K
    single-environment adders.
    """
    tables = []
    if self.uses_queue:
      tables.append(self._queue_table)
    if self.uses_replay:
      tables.append(self._replay_table)
    cfg = self._config
    if num_envs > 1 and cfg.adder == 'trajectory':
      return adders_lib.BatchedTrajectoryAdder(
          replay_client, num_envs, sequence_length=cfg.sequence_length,
          period=cfg.unroll_length,
          priority_fns={name: None for name in tables})
    made = [agent_lib.make_sequence_adder(replay_client, cfg, tables=tables)
            for _ in range(num_envs)]
    return made[0] if num_envs == 1 else made

  def make_actor(
      self,
      network: networks_lib.IMPALANetwork,
      adder_or_adders=None,
      variable_source: Optional[core.VariableSource] = None,
      seed: Optional[int] = None,
      num_envs: int = 1,
  ):
    """An IMPALAActor (num_envs == 1) or a BatchedIMPALAActor.

    With a variable source, the actor refreshes its weights (and the policy
    version it records) every `variable_update_period` actor steps.
    """
    cfg = self._config
    version = None
    if cfg.record_policy_version or variable_source is not None:
      version = tf.Variable(0, dtype=tf.int64, trainable=False)
    client = None
    if variable_source is not None:
      client = acting.make_variable_client(
          variable_source, network, cfg.variable_update_period, version)
    record = version if cfg.record_policy_version else None
    if num_envs == 1:
      adder = adder_or_adders
      if isinstance(adder, Sequence):
        adder = adder[0]
      return acting.IMPALAActor(network, adder, client,
                                policy_version=record, seed=seed)
    if isinstance(adder_or_adders, adders_lib.BatchedTrajectoryAdder):
      return acting.BatchedIMPALAActor(network, num_envs, None, client,
                                       adder=adder_or_adders,
                                       policy_version=record, seed=seed)
    return acting.BatchedIMPALAActor(network, num_envs, adder_or_adders,
                                     client, policy_version=record,
                                     seed=seed)

  def make_learner(
      self,
      network: networks_lib.IMPALANetwork,
      iterator: Iterator,
      counter: Optional[counting.Counter] = None,
      logger: Optional[loggers.Logger] = None,
  ) -> learning.IMPALALearner:
    return learning.IMPALALearner(network, iterator, self._config,
                                  counter=counter, logger=logger)
