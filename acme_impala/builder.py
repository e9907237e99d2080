"""IMPALABuilder: the agent's components, with Acme's builder method names.

`make_replay_tables`, `make_dataset_iterator`, `make_adder`, `make_actor` and
`make_learner` build the pieces that `acme_impala.program.make_program` wires
into a Launchpad graph; each can also be used on its own, e.g. to put our
learner or actor into another Acme agent.
"""

from typing import Iterator, List, Optional, Sequence

from acme import core
from acme import specs
from acme.adders import reverb as adders
from acme.tf import utils as tf2_utils
from acme.utils import counting
from acme.utils import loggers
import reverb
import tensorflow as tf

from acme_impala import acting
from acme_impala import agent as agent_lib
from acme_impala import config as config_lib
from acme_impala import learning
from acme_impala import networks as networks_lib

QUEUE_TABLE = agent_lib.QUEUE_TABLE


class IMPALABuilder:
  """Builds IMPALA's Reverb tables, dataset, adder, actor and learner."""

  def __init__(self, config: config_lib.IMPALAConfig,
               environment_spec: specs.EnvironmentSpec):
    self._config = config
    self._spec = environment_spec

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

  def make_replay_tables(self) -> List[reverb.Table]:
    """The FIFO trajectory queue.

    A Reverb queue blocks inserts when it holds `max_queue_size` items: that
    is the back-pressure that keeps actors from running ahead of the learner
    (and bounds policy lag) instead of growing the queue without bound.
    """
    signature = agent_lib.queue_signature(self._spec, self.make_network(),
                                          self._config)
    return [reverb.Table.queue(name=QUEUE_TABLE,
                               max_size=self._config.max_queue_size,
                               signature=signature)]

  def make_dataset_iterator(self, server_address: str,
                            timeout_ms: int = 2000) -> Iterator:
    """Batches of [B, T+1] items from the queue.

    `timeout_ms` bounds each wait for data: when the queue stays empty that
    long, the iterator ends (StopIteration) instead of blocking forever, so
    the learner can check whether the program is stopping.
    """
    cfg = self._config
    dataset = reverb.TrajectoryDataset.from_table_signature(
        server_address=server_address,
        table=QUEUE_TABLE,
        max_in_flight_samples_per_worker=2 * cfg.batch_size,
        num_workers_per_iterator=1,
        rate_limiter_timeout_ms=timeout_ms)
    dataset = dataset.batch(cfg.batch_size, drop_remainder=True)
    if cfg.prefetch_size:
      dataset = dataset.prefetch(cfg.prefetch_size)
    return iter(dataset)

  def make_adder(self, replay_client: reverb.Client) -> adders.SequenceAdder:
    return agent_lib.make_sequence_adder(replay_client, self._config)

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
