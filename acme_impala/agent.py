"""Single-process IMPALA agent, for debugging and tests.

One process holds an in-process Reverb server with the FIFO trajectory queue,
one IMPALAActor and the IMPALALearner (sharing the network, so there is no
policy lag). After each environment step the learner trains on every full
batch in the queue. Use it inside Acme's EnvironmentLoop like any Acme agent.
The distributed agent (Launchpad) is built from the same components.
"""

from typing import Optional, Sequence

import acme
from acme import datasets
from acme import specs
from acme import types
from acme.adders import reverb as adders
from acme.tf import utils as tf2_utils
from acme.utils import counting
from acme.utils import loggers
import dm_env
import numpy as np
import reverb
import tensorflow as tf

from acme_impala import acting
from acme_impala import adders as adders_lib
from acme_impala import config as config_lib
from acme_impala import learning
from acme_impala import networks as networks_lib

QUEUE_TABLE = adders.DEFAULT_PRIORITY_TABLE


def queue_signature(environment_spec: specs.EnvironmentSpec, network,
                    config: config_lib.IMPALAConfig):
  """The Reverb signature of the trajectory items (Acme's SequenceAdder)."""
  extras = acting.extras_spec(network, environment_spec.actions.num_values,
                              config.record_policy_version)
  return adders.SequenceAdder.signature(
      environment_spec, extras_spec=extras,
      sequence_length=config.sequence_length)


def make_sequence_adder(client: reverb.Client,
                        config: config_lib.IMPALAConfig,
                        tables: Optional[Sequence[str]] = None
                        ) -> acme.adders.Adder:
  """Writes [T+1]-step items every T steps, across episode boundaries.

  Consecutive items overlap by one step so that every transition is learned
  from exactly once, with its bootstrap observation. CONTINUE keeps writing
  through episode ends, as the paper's actors do (n steps regardless of
  episodes): no zero-padding, so no wasted learner compute on short episodes.
  `config.adder` picks our one-append-per-item TrajectoryAdder or Acme's
  SequenceAdder; the items are the same.
  """
  tables = tables or [QUEUE_TABLE]
  if config.adder == 'trajectory':
    return adders_lib.TrajectoryAdder(
        client, sequence_length=config.sequence_length,
        period=config.unroll_length,
        priority_fns={name: None for name in tables})
  return adders.SequenceAdder(
      client=client,
      sequence_length=config.sequence_length,
      period=config.unroll_length,
      priority_fns={name: None for name in tables},
      end_of_episode_behavior=adders.EndBehavior.CONTINUE)


class IMPALA(acme.Actor):
  """A single-process IMPALA agent (actor + learner + in-process queue)."""

  def __init__(
      self,
      environment_spec: specs.EnvironmentSpec,
      config: config_lib.IMPALAConfig,
      network: Optional[networks_lib.IMPALANetwork] = None,
      counter: Optional[counting.Counter] = None,
      logger: Optional[loggers.Logger] = None,
  ):
    num_actions = environment_spec.actions.num_values
    self._config = config
    if network is None:
      tf.random.set_seed(config.seed)
      network = networks_lib.make_network(config, num_actions)
    tf2_utils.create_variables(network, [environment_spec.observations])
    self._network = network

    signature = queue_signature(environment_spec, network, config)
    queue = reverb.Table.queue(
        name=QUEUE_TABLE, max_size=config.max_queue_size, signature=signature)
    self._server = reverb.Server([queue], port=None)
    self._queue = queue
    address = f'localhost:{self._server.port}'

    self._client = reverb.Client(address)
    adder = make_sequence_adder(self._client, config)
    self._adder = adder
    dataset = datasets.make_reverb_dataset(
        server_address=address, table=QUEUE_TABLE,
        batch_size=config.batch_size, num_parallel_calls=1)
    counter = counter or counting.Counter()
    self._learner = learning.IMPALALearner(
        network=network,
        iterator=iter(dataset),
        config=config,
        counter=counting.Counter(counter, 'learner'),
        logger=logger)
    # The learner's step counter is the policy version: the actor shares
    # the network, so its recorded lag is 0 by construction.
    self._actor = acting.IMPALAActor(
        network, adder,
        policy_version=(self._learner._num_steps  # pylint: disable=protected-access
                        if config.record_policy_version else None),
        seed=config.seed)

  @property
  def learner(self) -> learning.IMPALALearner:
    return self._learner

  @property
  def server(self) -> reverb.Server:
    return self._server

  def select_action(self, observation: types.NestedArray) -> np.ndarray:
    return self._actor.select_action(observation)

  def observe_first(self, timestep: dm_env.TimeStep):
    self._actor.observe_first(timestep)

  def observe(self, action: types.NestedArray,
              next_timestep: dm_env.TimeStep):
    self._actor.observe(action, next_timestep)

  def update(self, wait: bool = False):
    del wait
    while self._queue.can_sample(self._config.batch_size):
      self._learner.step()

  def close(self):
    # Close the writer first: once the server is gone, a writer's flush on
    # deletion would wait out its timeout.
    adders_lib.close_adder(self._adder)
    self._server.stop()
