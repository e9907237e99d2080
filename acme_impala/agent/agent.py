"""Single-process IMPALA (and LASER) agent, for debugging and tests.

One process holds an in-process Reverb server with the builder's tables (the
FIFO trajectory queue and, with replay_fraction > 0, the replay), one
IMPALAActor and the IMPALALearner, sharing the network, so there is no policy
lag. Use it inside Acme's EnvironmentLoop like any Acme agent. It is
assembled from `IMPALABuilder`, as the distributed program is.
"""

from typing import Optional

import acme
from acme import specs
from acme import types as acme_types
from acme.tf import utils as tf2_utils
from acme.utils import counting
from acme.utils import loggers
import dm_env
import numpy as np
import reverb
import tensorflow as tf

from acme_impala.agent import adders as adders_lib
from acme_impala.agent import builder as builder_lib
from acme_impala.agent import config as config_lib
from acme_impala.agent import learning
from acme_impala.agent import networks as networks_lib


class IMPALA(acme.Actor):
  """A single-process IMPALA agent (actor + learner + in-process tables).

  After each environment step the learner trains while a whole batch can be
  read without waiting: `num_online` new trajectories in the queue and, with
  replay, at least `min_replay_size` in the replay; until the replay has
  them, `batch_size` online trajectories (all-online batches, see
  `datasets.MixedBatches`). With replay_fraction = 1 (no queue) it takes one
  learner step per `num_replayed · unroll_length` environment steps, the
  rate at which new data enters the replay.
  """

  def __init__(
      self,
      environment_spec: specs.EnvironmentSpec,
      config: config_lib.IMPALAConfig,
      network: Optional[networks_lib.IMPALANetwork] = None,
      counter: Optional[counting.Counter] = None,
      logger: Optional[loggers.Logger] = None,
  ):
    self._config = config
    self._builder = builder_lib.IMPALABuilder(config, environment_spec)
    if network is None:
      tf.random.set_seed(config.seed)
      network = self._builder.make_network()
    else:
      tf2_utils.create_variables(network, [environment_spec.observations])

    tables = self._builder.make_replay_tables()
    self._tables = {table.name: table for table in tables}
    self._server = reverb.Server(tables, port=None)
    address = f'localhost:{self._server.port}'
    self._adder = self._builder.make_adder(reverb.Client(address))
    counter = counter or counting.Counter()
    self._learner = self._builder.make_learner(
        network, self._builder.make_dataset_iterator(address),
        counter=counting.Counter(counter, 'learner'), logger=logger)
    # The actor shares the learner's network: the policy version it records
    # is the learner's step, and its lag is 0 by construction.
    self._actor = self._builder.make_actor(
        network, self._adder, seed=config.seed,
        policy_version=self._learner.policy_version)
    self._new_steps = 0

  @property
  def learner(self) -> learning.IMPALALearner:
    return self._learner

  @property
  def server(self) -> reverb.Server:
    return self._server

  def select_action(self, observation: acme_types.NestedArray) -> np.ndarray:
    return self._actor.select_action(observation)

  def observe_first(self, timestep: dm_env.TimeStep):
    self._actor.observe_first(timestep)

  def observe(self, action: acme_types.NestedArray,
              next_timestep: dm_env.TimeStep):
    self._actor.observe(action, next_timestep)
    self._new_steps += 1

  def _batch_ready(self) -> bool:
    cfg, builder = self._config, self._builder
    replay_ready = (not builder.uses_replay or
                    self._tables[builder.replay_table].can_sample(1))
    if builder.uses_queue:
      # The warm-up reads the queue num_online rows at a time (see
      # datasets.MixedBatches) until it holds batch_size: whole reads, or
      # what the queue can hold, so that no read waits out its timeout.
      warm_up = min(-(-cfg.batch_size // cfg.num_online) * cfg.num_online,
                    cfg.max_queue_size)
      return self._tables[builder.queue_table].can_sample(
          cfg.num_online if replay_ready else warm_up)
    return replay_ready and (
        self._new_steps >= cfg.num_replayed * cfg.unroll_length)

  def update(self, wait: bool = False):
    del wait
    cfg = self._config
    while self._batch_ready():
      try:
        self._learner.step()
      except StopIteration:
        return  # Items still in flight to the server; no row is lost.
      if not self._builder.uses_queue:
        self._new_steps -= cfg.num_replayed * cfg.unroll_length

  def flush(self, timeout_ms: Optional[int] = None):
    """Waits until the server has confirmed every item written so far.

    The adder keeps a few items in flight per stream (max_in_flight_items),
    so table sizes read right after acting may lag the episodes played.
    """
    self._adder.flush(timeout_ms=timeout_ms)

  def close(self):
    # Close the writer first: once the server is gone, a writer's flush on
    # deletion would wait out its timeout.
    adders_lib.close_adder(self._adder)
    self._server.stop()
