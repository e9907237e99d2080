"""The distributed IMPALA agent as a Launchpad program graph.

Nodes: `replay` (Reverb: the FIFO trajectory queue), `counter`,
`coordinator` (stops the program at the actor-step budget), `learner`
(also the variable source; checkpoints), `actor` × N (K environments each)
and `evaluator` (current policy, no writes, logs episode returns).

Every node runs its loop through `lifecycle.run_guarded` and polls
`lp.wait_for_stop`, so the program stops within seconds of the budget, a
signal or a failure (see lifecycle.py), with a final checkpoint.
"""

import dataclasses
import functools
import os
import queue
import threading
import time
from typing import Optional

import acme
from acme import specs
from acme.tf import savers as tf2_savers
from acme.utils import counting
from absl import logging
import dm_env
import launchpad as lp
import numpy as np
import reverb
import tensorflow as tf

from acme_impala import adders as adders_lib
from acme_impala import builder as builder_lib
from acme_impala import config as config_lib
from acme_impala import environments
from acme_impala import lifecycle
from acme_impala import loggers as loggers_lib
from acme_impala import loops


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """Where and how long a program runs (not hyperparameters)."""
  logdir: str
  max_actor_steps: int
  num_actors: int = 2
  restore: bool = False
  evaluator: bool = True
  eval_interval_s: float = 2.0
  # Agent name within a sweep ('' for a single agent): prefixes node labels,
  # log directories and checkpoint subdirectories.
  agent: str = ''

  def label(self, name: str) -> str:
    return f'{self.agent}/{name}' if self.agent else name

  @property
  def status_dir(self) -> str:
    return os.path.join(self.logdir, 'status')

  @property
  def checkpoint_dir(self) -> str:
    return os.path.join(self.logdir, 'checkpoints')


def derive_seed(*parts: int) -> int:
  """Independent, reproducible seeds for every node and environment."""
  return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def has_checkpoint(checkpoint_dir: str, agent: str = '') -> bool:
  learner_dir = os.path.join(checkpoint_dir, agent, 'learner')
  return tf.train.latest_checkpoint(learner_dir) is not None


def validate_run(config: config_lib.IMPALAConfig, options: RunOptions) -> None:
  """Fails before any process starts, naming the bad value."""
  config.validate()
  environments.validate_environment_id(config.env_id)
  if options.num_actors < 1:
    raise ValueError(f'num_actors={options.num_actors!r} is invalid: '
                     'expected an integer >= 1.')
  if options.max_actor_steps < 1:
    raise ValueError(f'max_actor_steps={options.max_actor_steps!r} is '
                     'invalid: expected an integer >= 1.')
  if not options.logdir:
    raise ValueError('logdir must be a non-empty path.')
  exists = has_checkpoint(options.checkpoint_dir, options.agent)
  if options.restore and not exists:
    raise ValueError(f'restore=True but there is no learner checkpoint under '
                     f'{options.checkpoint_dir!r}; run without restore first.')
  if not options.restore and exists:
    raise ValueError(f'logdir {options.logdir!r} already holds checkpoints; '
                     'pass restore=True (--restore) to resume, or choose a '
                     'new logdir.')


def _checkpointer(obj, key: str, options: RunOptions,
                  config: config_lib.IMPALAConfig) -> tf2_savers.Checkpointer:
  # Acme's Checkpointer restores the latest checkpoint in its directory on
  # construction; validate_run makes sure one exists only with --restore.
  return tf2_savers.Checkpointer(
      objects_to_save={key: obj},
      directory=options.logdir,  # Acme appends 'checkpoints/<subdirectory>'.
      subdirectory=options.label(key),
      time_delta_minutes=config.checkpoint_period_minutes,
      add_uid=False)


def wait_for_variables(actor, label: str, timeout_s: float = 300.) -> bool:
  """Blocks until the learner serves its weights; False if stopping first.

  Learner calls do not wait for the server to be ready (so that they fail
  instead of hanging once it has stopped); at start-up the learner may still
  be building its network, so retry until it answers.
  """
  deadline = time.time() + timeout_s
  while True:
    try:
      actor.update(wait=True)
      return True
    except Exception as error:  # pylint: disable=broad-except
      if lp.wait_for_stop(0.5):
        return False
      if time.time() > deadline:
        raise TimeoutError(f'{label}: the learner did not serve its variables '
                           f'within {timeout_s:.0f} s') from error


class BackgroundIterator:
  """Reads a dataset iterator in a daemon thread; `next` never blocks a stop.

  A tf.data read from Reverb can block without end once the server is gone;
  the learner's main loop instead polls this queue and returns promptly when
  the program stops (the daemon reader dies with the process). A reader
  that ends because no data came within the dataset's timeout is rebuilt.
  """

  def __init__(self, make_iterator, should_stop, capacity: int = 2):
    self._make_iterator = make_iterator
    self._should_stop = should_stop
    self._queue = queue.Queue(maxsize=capacity)
    self._thread = threading.Thread(target=self._fill, daemon=True,
                                    name='learner-data')
    self._thread.start()

  def _fill(self):
    try:
      iterator = self._make_iterator()
      while not self._should_stop():
        try:
          item = next(iterator)
        except StopIteration:
          iterator = self._make_iterator()
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


class CounterNode(counting.Counter):
  """The program's Acme Counter, checkpointed on a timer and at stop."""

  def __init__(self, options: RunOptions, config: config_lib.IMPALAConfig):
    super().__init__()
    self._options = options
    self._checkpointer = _checkpointer(self, 'counter', options, config)

  def run(self):
    def loop():
      try:
        while not lp.wait_for_stop(1.0):
          self._checkpointer.save()
      finally:
        self._checkpointer.save(force=True)
    lifecycle.run_guarded(self._options.label('counter'),
                          self._options.status_dir, loop)


class LearnerNode:
  """IMPALALearner serving variables over courier, checkpointing, stoppable."""

  def __init__(self, builder: builder_lib.IMPALABuilder,
               replay: reverb.Client, counter: counting.Counter,
               options: RunOptions):
    config = builder.config
    self._options = options
    self._builder = builder
    self._address = replay.server_address
    network = builder.make_network()
    iterator = BackgroundIterator(
        lambda: builder.make_dataset_iterator(self._address),
        lifecycle.stop_requested)
    self._learner = builder.make_learner(
        network, iterator,
        counter=counting.Counter(counter, 'learner'),
        logger=loggers_lib.make_logger(
            options.label('learner'), options.logdir,
            steps_key='learner_steps',
            terminal_time_delta=5.0, csv_time_delta=1.0,
            tensorboard_time_delta=1.0))
    # Checkpoint the TF state (network, optimiser, step), not the Python
    # object: Acme's Checkpointer would call Learner.save() otherwise.
    self._checkpointer = _checkpointer(self._learner.state, 'learner',
                                       options, config)
    logging.info('learner: starting at learner step %d.',
                 self._learner.num_steps)

  def get_variables(self, names):
    return self._learner.get_variables(names)

  def run(self):
    def loop():
      try:
        while not lp.wait_for_stop(0):
          try:
            self._learner.step()
          except StopIteration:
            break  # The program is stopping (see BackgroundIterator).
          self._checkpointer.save()
      finally:
        self._checkpointer.save(force=True)
        logging.info('learner: checkpointed at learner step %d.',
                     self._learner.num_steps)
    lifecycle.run_guarded(self._options.label('learner'),
                          self._options.status_dir, loop)


class ActorNode:
  """`envs_per_actor` environments acting with the latest learner weights."""

  def __init__(self, builder: builder_lib.IMPALABuilder, replay: reverb.Client,
               variable_source: acme.VariableSource,
               counter: counting.Counter, actor_id: int, options: RunOptions):
    config = builder.config
    self._label = options.label(f'actor_{actor_id}')
    self._options = options
    k = config.envs_per_actor
    self._envs = [
        environments.make_environment(
            config.env_id, seed=derive_seed(config.seed, 1, actor_id, j))
        for j in range(k)]
    network = builder.make_network()
    made = builder.make_adder(replay, num_envs=k)
    self._adders = made if isinstance(made, list) else [made]
    self._actor = builder.make_actor(
        network, made, variable_source,
        seed=derive_seed(config.seed, 2, actor_id), num_envs=k)
    self._counter = counting.Counter(counter, 'actor', time_delta=1.0)
    self._logger = loggers_lib.make_logger(
        self._label, options.logdir, steps_key='actor_steps',
        terminal_time_delta=10.0, csv_time_delta=0.0,
        tensorboard_time_delta=1.0)

  def _close_adders(self):
    for adder in self._adders:
      adders_lib.close_adder(adder)

  def run(self):
    # A writer blocked on a full queue (the learner has stopped) only returns
    # when its stream is closed: close them as soon as a stop is requested.
    lp.register_stop_handler(self._close_adders)

    def loop():
      # Wait for the learner's weights: acting with the random initial
      # weights of this process would write useless off-policy data.
      if not wait_for_variables(self._actor, self._label):
        return
      try:
        if len(self._envs) == 1:
          acme.EnvironmentLoop(self._envs[0], self._actor, self._counter,
                               self._logger).run()
        else:
          loops.BatchedEnvironmentLoop(
              self._envs, self._actor, self._counter, self._logger).run(
                  should_stop=lambda: lp.wait_for_stop(0))
      finally:
        self._close_adders()
        lp.unregister_stop_handler(self._close_adders)
        self._logger.close()
        for env in self._envs:
          env.close()
    lifecycle.run_guarded(self._label, self._options.status_dir, loop)


class EvaluatorNode:
  """Runs the current policy (no writes to Reverb) and logs episode returns."""

  def __init__(self, builder: builder_lib.IMPALABuilder,
               variable_source: acme.VariableSource,
               counter: counting.Counter, options: RunOptions):
    config = builder.config
    self._options = options
    self._interval_s = options.eval_interval_s
    self._env = environments.make_environment(
        config.env_id, seed=derive_seed(config.seed, 3), evaluation=True)
    network = builder.make_network()
    self._actor = builder.make_actor(
        network, None, variable_source, seed=derive_seed(config.seed, 4))
    self._counter = counter
    self._logger = loggers_lib.make_logger(
        options.label('evaluator'), options.logdir, steps_key='actor_steps',
        terminal_time_delta=0.0)

  def _episode(self):
    timestep = self._env.reset()
    self._actor.observe_first(timestep)
    episode_return, length = 0., 0
    start = time.time()
    while not timestep.last():
      action = self._actor.select_action(timestep.observation)
      timestep = self._env.step(action)
      episode_return += float(timestep.reward)
      length += 1
      if length % 100 == 0 and lp.wait_for_stop(0):
        return None
    return {'episode_return': episode_return, 'episode_length': length,
            'steps_per_second': length / max(time.time() - start, 1e-9)}

  def run(self):
    def loop():
      try:
        while not lp.wait_for_stop(0):
          if not wait_for_variables(self._actor,
                                    self._options.label('evaluator')):
            break
          result = self._episode()
          if result is None:
            break
          counts = self._counter.get_counts()
          result['actor_steps'] = counts.get('actor_steps', 0)
          result['learner_steps'] = counts.get('learner_steps', 0)
          self._logger.write(result)
          # Evaluation shares the cores with acting and learning: pace it.
          if lp.wait_for_stop(self._interval_s):
            break
      finally:
        self._logger.close()
        self._env.close()
    lifecycle.run_guarded(self._options.label('evaluator'),
                          self._options.status_dir, loop)


class CoordinatorNode:
  """Stops the program once the actors have taken `max_actor_steps` steps."""

  def __init__(self, counter: counting.Counter, options: RunOptions):
    self._counter = counter
    self._options = options

  def run(self):
    def loop():
      while not lp.wait_for_stop(0.5):
        try:
          steps = self._counter.get_counts().get('actor_steps', 0)
        except Exception as error:  # pylint: disable=broad-except
          # The counter node may still be starting.
          logging.warning('coordinator: counter not reachable yet (%s).',
                          error)
          continue
        if steps >= self._options.max_actor_steps:
          logging.info('coordinator: %d actor steps >= max_actor_steps=%d; '
                       'stopping the program.', steps,
                       self._options.max_actor_steps)
          lp.stop()
          return
    lifecycle.run_guarded('coordinator', self._options.status_dir, loop)


def make_program(config: config_lib.IMPALAConfig,
                 num_actors: int,
                 max_actor_steps: int,
                 logdir: str,
                 restore: bool = False,
                 evaluator: bool = True,
                 environment_spec: Optional[specs.EnvironmentSpec] = None
                 ) -> lp.Program:
  """Builds the IMPALA Launchpad program (validated before returning)."""
  options = RunOptions(logdir=os.path.abspath(logdir),
                       max_actor_steps=max_actor_steps,
                       num_actors=num_actors, restore=restore,
                       evaluator=evaluator)
  validate_run(config, options)
  if config.replay_fraction == 1.0:
    logging.warning(
        'replay_fraction=1: the learner sees no online data. LASER '
        '(Schmitt et al. 2019, Proposition 2) shows that learning only from '
        'replayed off-policy data with truncated importance weights can '
        'converge to a wrong policy; expect degraded results.')
  if config.anneal_learning_rate and config.lr_anneal_steps is None:
    config = config.replace(lr_anneal_steps=max(
        1, max_actor_steps // (config.batch_size * config.unroll_length)))
  if environment_spec is None:
    environment_spec = environments.environment_spec(config.env_id)
  os.makedirs(options.logdir, exist_ok=True)
  lifecycle.clear_failures(options.status_dir)
  builder = builder_lib.IMPALABuilder(config, environment_spec)
  guard = functools.partial(guarded_node, options=options)

  program = lp.Program(name='impala')
  with program.group('replay'):
    replay = program.add_node(lp.ReverbNode(builder.make_replay_tables))
  with program.group('counter'):
    counter = program.add_node(lp.CourierNode(
        guard(CounterNode, 'counter'), options, config))
  with program.group('coordinator'):
    program.add_node(lp.CourierNode(
        guard(CoordinatorNode, 'coordinator'), counter, options))
  with program.group('learner'):
    learner = program.add_node(
        lp.CourierNode(guard(LearnerNode, 'learner'), builder, replay,
                       counter, options))
  # Calls to a node that has already stopped must fail, not hang: a stuck
  # call would outlive Launchpad's termination notice (10 s) and get the
  # whole program killed. The counter may still be starting when first
  # called, so its calls wait for it, but only for a few seconds.
  learner.set_client_kwargs(call_timeout=5, wait_for_ready=False)
  counter.set_client_kwargs(call_timeout=5, wait_for_ready=True)
  with program.group('actor'):
    for i in range(num_actors):
      program.add_node(lp.CourierNode(guard(ActorNode, f'actor_{i}'),
                                      builder, replay, learner, counter, i,
                                      options))
  if evaluator:
    with program.group('evaluator'):
      program.add_node(lp.CourierNode(guard(EvaluatorNode, 'evaluator'),
                                      builder, learner, counter, options))
  return program


def guarded_node(constructor, key: str, options: RunOptions):
  """A node constructor whose failure stops the program, naming the node."""
  return lifecycle.guarded_constructor(constructor, options.label(key),
                                       options.status_dir)


def launch_and_wait(program: lp.Program, logdir: str,
                    launch_type: str = 'local_mp') -> int:
  """Launches `program`, waits for every node, returns the exit status.

  0 when the program stopped normally (step budget, Ctrl-C, SIGTERM); 1 with
  the failing node's message when a node failed.
  """
  status_dir = os.path.join(os.path.abspath(logdir), 'status')
  kwargs = {}
  if launch_type == 'local_mp':
    kwargs['terminal'] = 'current_terminal'
  manager = lp.launch(program, launch_type=launch_type, **kwargs)
  crashed = None
  try:
    manager.wait()
  except Exception as error:  # pylint: disable=broad-except
    # Thread-based launches re-raise a node's exception here.
    crashed = error
  failures = lifecycle.read_failures(status_dir)
  if failures:
    for message in failures:
      print(f'impala_lp: {message}', flush=True)
    print(f'impala_lp: details in {status_dir}', flush=True)
    return 1
  if crashed is not None:
    print(f'impala_lp: a node crashed: {crashed!r}', flush=True)
    return 1
  print('impala_lp: all nodes stopped; exiting with status 0.', flush=True)
  return 0
