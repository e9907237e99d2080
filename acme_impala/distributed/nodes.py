"""What each process of the program does: the Launchpad node classes.

Nodes: `CounterNode` (the agent's Acme counter, checkpointed), `LearnerNode`
(the learner, also the variable source; checkpoints), `ActorNode`
(K environments acting with the latest weights), `EvaluatorNode` (current
policy, no writes, logs episode returns) and `CoordinatorNode` (stops the
program at the actor-step budget, over one agent's counter or a sweep's).
`ReplayNode` is Launchpad's `ReverbNode` over the builder's tables,
checkpointed into the run's directory.

Every node gets its components from an `IMPALABuilder`, runs its loop
through `lifecycle.run_guarded` and polls `lp.wait_for_stop`, so the program
stops within seconds of the budget, a signal or a failure (lifecycle.py),
with a final checkpoint. `options` is the agent's `program.RunOptions`.
"""

import collections
import contextlib
import csv
import io
import json
import os
import sys
import threading
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import acme
from acme.tf import savers as tf2_savers
from acme.utils import counting
from absl import logging
import launchpad as lp
from launchpad import address as lp_address
import numpy as np
import reverb
import tensorflow as tf

from acme_impala.agent import adders as adders_lib
from acme_impala.agent import builder as builder_lib
from acme_impala.agent import loops
from acme_impala.agent import networks as networks_lib
from acme_impala.agent import replicas as replicas_lib
from acme_impala.distributed import collective
from acme_impala.distributed import lifecycle
from acme_impala.distributed import loggers as loggers_lib
from acme_impala.distributed import pbt
from acme_impala.envs import batched
from acme_impala.envs import multitask
from acme_impala.envs import registry

# Roles in seed derivation: each (agent, role, index) has its own stream.
(_ACTOR_ENV, _ACTOR_POLICY, _EVAL_ENV, _EVAL_POLICY,
 _LEARNER_INIT) = 1, 2, 3, 4, 5
# Seconds a PBT call waits for the learner's step to end (the courier
# client's timeout, program.LEARNER_CLIENT_KWARGS, is 5 s).
PBT_LOCK_TIMEOUT_S = 4.
# A learner replica's exit status when its group lost a member (it is
# restarted with the group; EX_TEMPFAIL: try again).
EXIT_REPLICA_LOST = 75
# Evaluation rounds an evaluator keeps for PBT's fitness (`recent_rounds`).
RECENT_ROUNDS = 10


def derive_seed(*parts: int) -> int:
  """Independent, reproducible seeds for every node and environment."""
  return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def node_seed(config, options, role: int, *index: int) -> int:
  """The seed of one role of one agent: agents of a sweep share
  `config.seed` but never a seed stream (their index is folded in), and a
  node restarted by the supervisor does not replay its first life's
  episodes (its restart count is folded in)."""
  restart = lifecycle.restart_count()
  return derive_seed(config.seed, options.agent_index, role, *index,
                     *((restart,) if restart else ()))


def learner_init_seed(config, options) -> int:
  """The seed of an agent's initial weights: `config.seed` and the agent's
  index in a sweep, nothing else."""
  return derive_seed(config.seed, options.agent_index, _LEARNER_INIT)


def _checkpointer(obj, key: str, options,
                  period_minutes: float) -> tf2_savers.Checkpointer:
  # Acme's Checkpointer restores the latest checkpoint in its directory on
  # construction; program.prepare_run makes sure one exists only with
  # --restore.
  return tf2_savers.Checkpointer(
      objects_to_save={key: obj},
      directory=options.logdir,  # Acme appends 'checkpoints/<subdirectory>'.
      subdirectory=options.label(key),
      time_delta_minutes=period_minutes,
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


class ReplayNode(lp.ReverbNode):
  """The Reverb server of the builder's tables, checkpointed into the run.

  Launchpad's ReverbNode with Reverb's own checkpointer writing into
  `<logdir>/checkpoints/replay`, on a timer and at stop. A server started on
  a directory that holds a checkpoint loads the latest one (Reverb's
  checkpointer does), so `--restore` brings the replay, and the queue, back
  with their contents; the tables must be configured as when they were
  saved. Runs through `lifecycle.run_guarded`: a failure names the node.
  """

  def __init__(self, make_tables, checkpoint_dir: str,
               period_minutes: float, label: str, status_dir: str,
               table_roles: Optional[Mapping[str, Tuple[str, str]]] = None):
    super().__init__(make_tables)
    self._make_tables = make_tables
    self._checkpoint_dir = checkpoint_dir
    self._period_s = period_minutes * 60.
    self._label = label
    self._status_dir = status_dir
    self._table_roles = dict(table_roles or {})

  @staticmethod
  def _sizes(client: reverb.Client):
    return {name: info.current_size
            for name, info in client.server_info().items()}

  @staticmethod
  def _inserts(client: reverb.Client, server_info=None):
    server_info = server_info or client.server_info()
    return {name: int(info.rate_limiter_info.insert_stats.completed)
            for name, info in server_info.items()}

  def _write_tables(self, server_info) -> None:
    """`<status_dir>/tables-<label>.json`: each table's role, size, capacity
    and the size sampling waits for, for the launcher's progress line
    (which reads files, not the server: progress.table_status)."""
    tables = {}
    for name, info in server_info.items():
      role, unit = self._table_roles.get(name, (name, 'items'))
      tables[name] = dict(
          role=role, unit=unit, size=int(info.current_size),
          max_size=int(info.max_size),
          min_to_sample=int(info.rate_limiter_info.min_size_to_sample))
    path = os.path.join(self._status_dir, f'tables-{self._label}.json')
    os.makedirs(self._status_dir, exist_ok=True)
    with open(path + '.tmp', 'w') as f:
      json.dump(tables, f)
    os.replace(path + '.tmp', path)

  @property
  def _ledger_path(self) -> str:
    # Beside Reverb's checkpoint directory, not in it.
    return self._checkpoint_dir.rstrip('/') + '_inserts.json'

  def _write_ledger(self, at_checkpoint, latest, clean=False) -> None:
    """Inserts counted at the last checkpoint and now, in this server's life:
    if it dies, the next life knows how many items went with it."""
    tmp = self._ledger_path + '.tmp'
    with open(tmp, 'w') as f:
      json.dump({'checkpoint': at_checkpoint, 'latest': latest,
                 'clean': clean}, f)
    os.replace(tmp, self._ledger_path)

  def _report_lost(self) -> None:
    """Counts and logs what the previous life inserted after its last
    checkpoint: those items died with it (never silent)."""
    try:
      with open(self._ledger_path) as f:
        ledger = json.load(f)
    except (OSError, ValueError):
      return
    lost = {name: latest - ledger['checkpoint'].get(name, 0)
            for name, latest in ledger['latest'].items()}
    if not ledger.get('clean'):
      logging.warning(
          '%s: items inserted after the previous server\'s last checkpoint '
          'were lost with it: %s (counted up to 1 s before it ended).',
          self._label, lost)
    else:
      logging.info('%s: the previous server ended at a checkpoint; nothing '
                   'it held was lost.', self._label)

  def run(self):
    def loop():
      os.makedirs(os.path.dirname(self._ledger_path), exist_ok=True)
      self._report_lost()
      server = reverb.Server(
          tables=self._make_tables(),
          port=lp_address.get_port_from_address(
              self.reverb_address.resolve()),
          checkpointer=reverb.checkpointers.DefaultCheckpointer(
              path=self._checkpoint_dir))
      client = server.localhost_client()
      sizes = self._sizes(client)
      if any(sizes.values()):
        logging.info('%s: restored tables from %s: %s', self._label,
                     self._checkpoint_dir, sizes)
      at_checkpoint = self._inserts(client)
      last_checkpoint = time.time()
      try:
        while not lp.wait_for_stop(1.0):
          if time.time() - last_checkpoint >= self._period_s:
            # Read before the checkpoint: what it holds is at least this.
            at_checkpoint = self._inserts(client)
            client.checkpoint()
            last_checkpoint = time.time()
          # One server_info call a second serves the ledger and the sizes.
          server_info = client.server_info()
          self._write_ledger(at_checkpoint,
                             self._inserts(client, server_info))
          self._write_tables(server_info)
      finally:
        # Writers may still insert while the checkpoint is taken: the saved
        # sizes lie between the sizes read before and after it.
        before = self._sizes(client)
        at_checkpoint = self._inserts(client)
        path = client.checkpoint()
        self._write_ledger(at_checkpoint, at_checkpoint, clean=True)
        logging.info('%s: checkpointed tables %s to %s (sizes when it ended: '
                     '%s).', self._label, before, path, self._sizes(client))
        server.stop()
    lifecycle.run_guarded(self._label, self._status_dir, loop)


class CounterState(tf.train.experimental.PythonState):
  """A counter's state as JSON inside its TensorFlow checkpoint.

  Acme's Checkpointer would wrap the Counter in its SaveableAdapter, which
  pickles the state: loading that file would run whatever whoever can write
  the logdir put in it. Counts and cache are numbers by name, so JSON holds
  them exactly; a pickled checkpoint of an older run is refused.
  """

  def __init__(self, counter: counting.Counter, label: str):
    self._counter = counter
    self._label = label

  def serialize(self) -> str:
    state = self._counter.save()
    return json.dumps({k: dict(v) for k, v in state.items()}, sort_keys=True)

  def deserialize(self, data) -> None:
    raw = data if isinstance(data, bytes) else str(data).encode()
    if raw[:1] == b'\x80':  # Pickle's protocol opcode.
      raise ValueError(
          f'{self._label}: its checkpoint holds a pickled state (written by '
          'an older version); it is not loaded, since unpickling a file runs '
          'code. Remove checkpoints/counter from the logdir to start the '
          'counts from 0.')
    try:
      state = json.loads(raw.decode())
      counts, cache = dict(state['counts']), dict(state['cache'])
    except (ValueError, KeyError, TypeError) as error:
      raise ValueError(f'{self._label}: its checkpoint is not a counter '
                       f'state: {error}') from error
    self._counter.restore({'counts': counts, 'cache': cache})


class CounterNode(counting.Counter):
  """The agent's Acme Counter, checkpointed on a timer and at stop.

  Its state is a few numbers, so it is saved every few seconds whatever the
  config's period: a counter restarted after a crash loses at most those
  seconds of counts (the budget then runs that much longer).
  """

  _PERIOD_MINUTES = 5 / 60

  def __init__(self, options, checkpoint_period_minutes: float):
    super().__init__()
    self._options = options
    self._checkpointer = _checkpointer(
        CounterState(self, options.label('counter')), 'counter', options,
        min(checkpoint_period_minutes, self._PERIOD_MINUTES))

  def _write_counts(self) -> None:
    """`<status_dir>/counts-<label>.json`: the counts and when they were
    read, for the launcher's final summary (which reads files, not the
    counter: lifecycle.read_counts)."""
    path = lifecycle.counts_path(self._options.status_dir, self._options.agent)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + '.tmp', 'w') as f:
      json.dump({'time': time.time(), 'counts': {
          k: float(v) for k, v in self.get_counts().items()}}, f)
    os.replace(path + '.tmp', path)

  def run(self):
    def loop():
      try:
        while not lp.wait_for_stop(1.0):
          self._checkpointer.save()
          self._write_counts()
      finally:
        self._checkpointer.save(force=True)
        self._write_counts()
        # The run's totals, which no learner restart rolls back: what
        # benchmarks/faults.py balances produced against learned with.
        logging.info('%s: final counts %s.', self._options.label('counter'),
                     {k: int(v) for k, v in sorted(self.get_counts().items())})
    lifecycle.run_guarded(self._options.label('counter'),
                          self._options.status_dir, loop)


class LearnerNode:
  """IMPALALearner serving variables over courier, checkpointing, stoppable."""

  def __init__(self, builder: builder_lib.IMPALABuilder,
               replay: reverb.Client, counter: counting.Counter, options,
               replica: int = 0):
    self._options = options
    self._replica = replica
    group = None
    self._label = learner_label(options, replica)
    self._checkpointer = _NoCheckpoints()
    if options.num_learners > 1:
      # Before this process's first TensorFlow op (collective.join).
      try:
        self._strategy = collective.join(
            collective.addresses_from_env(options.num_learners), replica)
      except replicas_lib.collective_errors() as error:
        self._replica_lost(error)  # A replica lost while the group forms.
      group = replicas_lib.Group.collective(replica, options.num_learners)
      builder = builder.for_replica_group(options.num_learners)
    self._group = group
    # The same --config.seed gives the same initial weights (a restarted
    # learner restores its checkpoint over them).
    init_seed = learner_init_seed(builder.config, options)
    network = builder.make_network(seed=init_seed)
    # Before any checkpoint is restored over them: two programs with the
    # same seed log the same digest (tests/test_program.py).
    logging.info('learner: initial weights %s (init seed %d).',
                 networks_lib.weights_digest(network.trainable_variables),
                 init_seed)
    # Held by each step and by PBT's calls, which read or replace the whole
    # training state: never half of one step's update. The step lets go of
    # it while it waits for data (`_UnlockedWhileWaiting`), and a waiting
    # call is let in between steps (`_let_calls_in`): a learner that waits
    # for data most of the time, or never does, still answers them.
    self._lock = threading.Lock()
    self._pbt_changed = False
    self._calls_waiting = 0
    self._calls_mutex = threading.Lock()
    self._check_steps = builder.config.replica_check_steps
    iterator = _UnlockedWhileWaiting(builder.make_dataset_iterator(
        replay.server_address, should_stop=lifecycle.stop_requested),
                                     self._lock)
    self._learner = builder.make_learner(
        network, iterator,
        counter=counting.Counter(
            lifecycle.Retrying(counter, 'learner -> counter'), 'learner'),
        logger=loggers_lib.make_logger(
            self._label, options.logdir,
            steps_key='learner_steps',
            terminal_time_delta=5.0, csv_time_delta=1.0,
            tensorboard_time_delta=1.0),
        replica_group=group)
    # Checkpoint the TF state (network, optimiser, step), not the Python
    # object: Acme's Checkpointer would call Learner.save() otherwise.
    # Replicas hold replica 0's state: it alone checkpoints, and the group
    # starts from what it restored (sync_replicas).
    self._checkpointer = (
        _checkpointer(self._learner.state, 'learner', options,
                      builder.config.checkpoint_period_minutes)
        if replica == 0 else _NoCheckpoints())
    if group is not None:
      try:
        digest = self._learner.sync_replicas()
      except replicas_lib.GroupBroken as error:
        self._replica_lost(error)
      logging.info('learner replica %d of %d: training state %s, as '
                   'replica 0 holds it.', replica, group.size, digest)
    # A group's update is a collective: its replicas compile at their first
    # batch, together.
    self._warm_up_batch = (
        builder.warm_up_batch(network)
        if group is None and builder.config.warm_up_update else None)
    logging.info('learner: starting at learner step %d.',
                 self._learner.num_steps)

  def get_variables(self, names):
    return self._learner.get_variables(names)

  # -- PBT's calls (the controller node, distributed/pbt.py). ---------------

  @contextlib.contextmanager
  def _locked(self, what: str):
    # Below the courier client's call timeout: a learner busy for longer
    # answers "busy", and the controller asks again later.
    with self._calls_mutex:
      self._calls_waiting += 1
    try:
      if not self._lock.acquire(timeout=PBT_LOCK_TIMEOUT_S):
        raise TimeoutError(f'{self._options.label("learner")}: busy with a '
                           f'step for {PBT_LOCK_TIMEOUT_S:g} s; {what} not '
                           'done.')
      try:
        yield
      finally:
        self._lock.release()
    finally:
      with self._calls_mutex:
        self._calls_waiting -= 1

  def _let_calls_in(self) -> None:
    """Between steps: waits (up to the calls' own timeout) while a PBT call
    is waiting for the lock, which Python's lock would otherwise hand back
    to this loop first."""
    deadline = time.time() + PBT_LOCK_TIMEOUT_S
    while self._calls_waiting and time.time() < deadline:
      time.sleep(0.001)

  def pbt_status(self):
    """{'learner_steps', 'hyperparameters'}: what the controller ranks
    and perturbs (read without waiting for a step: each value is one
    variable's)."""
    return {'learner_steps': self._learner.num_steps,
            'hyperparameters': self._learner.hyperparameters}

  def get_training_state(self):
    """The learner's `get_training_state()`, its arrays packed
    (`pack_arrays`) for another learner's `set_training_state`."""
    with self._locked('get_training_state'):
      state = self._learner.get_training_state()
    return dict(state, network=pack_arrays(state['network']),
                optimizer=pack_arrays(state['optimizer']))

  def set_training_state(self, state):
    """The copy of PBT's exploit (a packed `get_training_state`); returns
    the digest read back after it."""
    state = dict(state, network=unpack_arrays(state['network']),
                 optimizer=unpack_arrays(state['optimizer']))
    with self._locked('set_training_state'):
      digest = self._learner.set_training_state(state)
      self._pbt_changed = True
    logging.info('learner: took a copied training state (digest %s, %s).',
                 digest, 'as sent' if digest == state.get('digest') else
                 f'NOT the {state.get("digest")} sent')
    return digest

  def set_hyperparameters(self, values):
    """PBT's explore; returns the values now in force."""
    with self._locked('set_hyperparameters'):
      self._learner.set_hyperparameters(values)
      now = self._learner.hyperparameters
      self._pbt_changed = True
    logging.info('learner: hyperparameters now %s.', now)
    return now

  def _replica_lost(self, error: Exception) -> None:
    """A collective of the group failed while the program runs (or while
    the group forms): a replica is gone (MultiWorkerMirroredStrategy's health check aborts the
    collectives of the others). A synchronous group cannot continue short:
    this process checkpoints (replica 0) and exits with
    EXIT_REPLICA_LOST, for its supervisor (local or Kubernetes) to restart
    it; the group re-forms and continues from replica 0's checkpoint."""
    logging.error('%s: the learner group lost a replica (%s: %s); '
                  'checkpointing and exiting with status %d to restart '
                  'with the group.', self._label, type(error).__name__,
                  error, EXIT_REPLICA_LOST)
    try:
      self._checkpointer.save(force=True)
    finally:
      logging.flush()
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(EXIT_REPLICA_LOST)  # pylint: disable=protected-access

  def _abort_collectives_on_stop(self) -> None:
    """A replica waiting in a collective for one that already stopped
    would wait out the termination notice and miss its final checkpoint:
    on the program's stop, this process's collectives end at once."""
    lp.register_stop_handler(
        lambda: collective.abort('the program is stopping'))

  def run(self):
    # A replica's steps run in a thread of their own: the main thread must
    # stay free to run the SIGTERM handler (Python runs it there only), or a
    # replica blocked in a collective would not hear of the stop.
    stopping = (lifecycle.stop_requested if self._group is not None
                else lambda: lp.wait_for_stop(0))

    def loop():
      first = True
      if self._group is not None:
        self._abort_collectives_on_stop()
      if self._warm_up_batch is not None and not stopping():
        # While the actors start: the first batch then meets a compiled
        # update (the variables are put back; actors asking for weights
        # meanwhile get those from before).
        try:
          with self._lock:
            seconds = self._learner.warm_up(self._warm_up_batch)
          # benchmarks/startup.py times the launch to this line.
          logging.info('learner: update traced and compiled in %.1f s, '
                       'before the first batch.', seconds)
        except Exception as error:  # pylint: disable=broad-except
          # Only a speed-up: the first batch compiles the update as before.
          logging.warning('learner: warming up the update failed (%s: %s); '
                          'it compiles at the first batch.',
                          type(error).__name__, error)
        self._warm_up_batch = None
      try:
        while not stopping():
          self._let_calls_in()
          try:
            with self._lock:
              self._learner.step()
          except StopIteration:
            break  # The program is stopping (datasets.BackgroundIterator).
          except replicas_lib.GroupBroken as error:
            if lifecycle.stop_requested():
              raise
            self._replica_lost(error)
          if (self._group is not None and
              self._learner.num_steps % self._check_steps == 0):
            # Replicas that agree log the same state at the same step
            # (tests/test_replicas.py compares them).
            logging.info('%s: learner step %d, training state %s.',
                         self._label, self._learner.num_steps,
                         self._learner.training_state_digest())
          if first:
            # benchmarks/startup.py times the launch to this line.
            logging.info('learner: first step done (learner step %d).',
                         self._learner.num_steps)
            first = False
          with self._lock:  # A whole copy or none in a checkpoint.
            # At once after a PBT change: a learner restarted from an older
            # checkpoint would lose what the controller counts as done.
            self._checkpointer.save(force=self._pbt_changed)
            self._pbt_changed = False
      finally:
        with self._lock:
          self._checkpointer.save(force=True)
        logging.info('learner: checkpointed at learner step %d.',
                     self._learner.num_steps)
    lifecycle.run_guarded(
        self._label, self._options.status_dir,
        loop if self._group is None else lambda: _in_thread(loop,
                                                           'learner-steps'))


def _in_thread(fn, name: str) -> None:
  """`fn()` in a thread while this (main) thread stays in Python; its
  exception is raised here."""
  raised = []

  def target():
    try:
      fn()
    except BaseException as error:  # pylint: disable=broad-except
      raised.append(error)
  thread = threading.Thread(target=target, name=name, daemon=True)
  thread.start()
  while thread.is_alive():
    thread.join(0.2)
  if raised:
    raise raised[0]


class _NoCheckpoints:
  """A learner replica other than 0: replica 0 checkpoints the group."""

  def save(self, force: bool = False) -> bool:
    del force
    return False


def learner_key(replica: int) -> str:
  """Replica 0 is the learner (its logs, checkpoints and failure label);
  replica k > 0 of a group logs as `learner_replica_<k>`."""
  return 'learner' if replica == 0 else f'learner_replica_{replica}'


def learner_label(options, replica: int) -> str:
  return options.label(learner_key(replica))


def pack_arrays(arrays: Sequence[np.ndarray]) -> bytes:
  """Arrays as one .npz blob. Courier 0.5.2 returns numpy arrays but
  cannot take them as call arguments (the call never reaches the server's
  handler and ends in Deadline Exceeded; tested with a bare array), so
  PBT's copy travels as bytes."""
  buffer = io.BytesIO()
  np.savez(buffer, *arrays)
  return buffer.getvalue()


def unpack_arrays(blob: bytes) -> List[np.ndarray]:
  """`pack_arrays`' arrays, in order; never unpickles."""
  with np.load(io.BytesIO(blob), allow_pickle=False) as loaded:
    return [loaded[f'arr_{i}'] for i in range(len(loaded.files))]


class _UnlockedWhileWaiting:
  """The learner's iterator, letting go of `lock` (held by the step that
  calls it) while it waits for the next batch: the batch is read before the
  step touches any variable, so a PBT call may run in that wait."""

  def __init__(self, iterator, lock: threading.Lock):
    self._iterator = iterator
    self._lock = lock

  def __iter__(self):
    return self

  def __next__(self):
    self._lock.release()
    try:
      return next(self._iterator)
    finally:
      self._lock.acquire()


class ActorNode:
  """`envs_per_actor` environments acting with the latest learner weights."""

  def __init__(self, builder: builder_lib.IMPALABuilder, replay: reverb.Client,
               variable_source: acme.VariableSource,
               counter: counting.Counter, actor_id: int, options):
    config = builder.config
    self._label = options.label(f'actor_{actor_id}')
    self._options = options
    k = config.envs_per_actor
    seeds = [node_seed(config, options, _ACTOR_ENV, actor_id, j)
             for j in range(k)]
    self._batched = builder.batched_acting
    task = builder.task_of_actor(actor_id)
    if config.env_ids:
      logging.info('%s: plays task %s (%d of %d).', self._label, task,
                   builder.tasks.index(task) + 1, len(builder.tasks))
    if self._batched:
      self._env = batched.make_batched_environment(
          task, seeds, engine=config.env_engine,
          num_threads=config.env_threads, **builder.environment_kwargs)
    else:
      self._env = registry.make_environment(task, seed=seeds[0],
                                            **builder.environment_kwargs)
    network = builder.make_network()
    self._adder = builder.make_adder(replay, num_envs=k, batched=self._batched)
    self._actor = builder.make_actor(
        network, self._adder, variable_source,
        seed=node_seed(config, options, _ACTOR_POLICY, actor_id), num_envs=k,
        batched=self._batched)
    self._counter = counting.Counter(
        lifecycle.Retrying(counter, f'{self._label} -> counter'), 'actor',
        time_delta=1.0)
    self._logger = loggers_lib.make_logger(
        self._label, options.logdir, steps_key='actor_steps',
        terminal_time_delta=10.0, csv_time_delta=0.0,
        tensorboard_time_delta=1.0)

  def _close_adder(self):
    adders_lib.close_adder(self._adder)

  def run(self):
    # A writer blocked on a full queue (the learner has stopped) only returns
    # when its stream is closed: close it as soon as a stop is requested.
    lp.register_stop_handler(self._close_adder)

    def loop():
      # Wait for the learner's weights: acting with the random initial
      # weights of this process would write useless off-policy data.
      if not wait_for_variables(self._actor, self._label):
        return
      try:
        if self._batched:
          loops.BatchedEnvironmentLoop(
              self._env, self._actor, self._counter, self._logger).run(
                  should_stop=lambda: lp.wait_for_stop(0))
        else:
          acme.EnvironmentLoop(self._env, self._actor, self._counter,
                               self._logger).run()
      finally:
        self._close_adder()
        lp.unregister_stop_handler(self._close_adder)
        self._logger.close()
        self._env.close()
    lifecycle.run_guarded(self._label, self._options.status_dir, loop)


class EvaluatorNode:
  """Evaluates the current policy in rounds and logs each episode's return.

  A round plays `options.eval_episodes` episodes at once, one per
  environment, with one batched policy call per step and the weights
  fetched at its start (`loops.evaluation_episodes`); the node then waits
  `options.eval_interval_s`. One row per episode in the evaluator's logs, so
  a round's rows are one weight version's returns. No writes to Reverb.
  """

  def __init__(self, builder: builder_lib.IMPALABuilder,
               variable_source: acme.VariableSource,
               counter: counting.Counter, options,
               task: Optional[str] = None):
    config = builder.config
    task = task or builder.tasks[0]
    self._options = options
    self._label = options.label(evaluator_key(builder, task))
    self._interval_s = options.eval_interval_s
    k = options.eval_episodes
    # A multi-task agent's evaluators differ in their task only: the same
    # seeds, as each would be the evaluator of a single-task run.
    self._env = batched.make_batched_environment(
        task, [node_seed(config, options, _EVAL_ENV, j) for j in range(k)],
        engine=config.env_engine, num_threads=config.env_threads,
        evaluation=True, **builder.environment_kwargs)
    # Weights fetched at every round's start, whatever the actors' period:
    # a round's returns are the weights of that moment (PBT's fitness
    # counts only rounds that started after a copy).
    self._actor = builder.make_actor(
        builder.make_network(), None, variable_source,
        seed=node_seed(config, options, _EVAL_POLICY), num_envs=k,
        batched=True, variable_update_period=1)
    self._counter = lifecycle.Retrying(counter, f'{self._label} -> counter')
    self._logger = loggers_lib.make_logger(
        self._label, options.logdir, steps_key='actor_steps',
        terminal_time_delta=0.0)
    self._task = task
    self._rounds = collections.deque(maxlen=RECENT_ROUNDS)

  def recent_rounds(self):
    """The last rounds, oldest first, for PBT's fitness: each
    {'task', 'start_time' (when its weights were fetched, time.time()),
    'mean_return', 'episodes'}."""
    return list(self._rounds)

  def run(self):
    def loop():
      try:
        while not lp.wait_for_stop(0):
          start = time.time()
          if not wait_for_variables(self._actor, self._label):
            break
          rows = loops.evaluation_episodes(
              self._env, self._actor, should_stop=lambda: lp.wait_for_stop(0))
          if rows is None:
            break
          self._rounds.append(dict(
              task=self._task, start_time=start, episodes=len(rows),
              mean_return=float(np.mean([r['episode_return'] for r in rows]))))
          counts = self._counter.get_counts()
          for row in rows:
            row['actor_steps'] = counts.get('actor_steps', 0)
            row['learner_steps'] = counts.get('learner_steps', 0)
            self._logger.write(row)
          # Evaluation shares the cores with acting and learning: pace it.
          if lp.wait_for_stop(self._interval_s):
            break
      finally:
        self._logger.close()
        self._env.close()
    lifecycle.run_guarded(self._label, self._options.status_dir, loop)


def evaluator_key(builder: builder_lib.IMPALABuilder, task: str) -> str:
  """The evaluator's label within its agent: 'evaluator', or
  'evaluator_<task name>' (e.g. evaluator_breakout) for each task of a
  multi-task agent; its logs are under logs/<label>/."""
  if not builder.config.env_ids:
    return 'evaluator'
  return f'evaluator_{multitask.task_name(task)}'


class CoordinatorNode:
  """Stops the program once every agent's actors have taken
  `max_actor_steps` steps (one counter per agent)."""

  def __init__(self, counters: Sequence[counting.Counter],
               max_actor_steps: int, status_dir: str):
    self._counters = list(counters)
    self._max = max_actor_steps
    self._status_dir = status_dir

  def run(self):
    def loop():
      while not lp.wait_for_stop(0.5):
        try:
          steps = [c.get_counts().get('actor_steps', 0)
                   for c in self._counters]
        except Exception as error:  # pylint: disable=broad-except
          # A counter node may still be starting.
          logging.warning('coordinator: counter not reachable yet (%s).',
                          error)
          continue
        if min(steps) >= self._max:
          reason = (f'the budget is reached: {min(steps):,} actor steps >= '
                    f'max_actor_steps={self._max:,}' +
                    (' for every agent' if len(steps) > 1 else ''))
          logging.info('coordinator: %s; stopping the program.', reason)
          lifecycle.stop_program(self._status_dir, reason)
          return
    lifecycle.run_guarded('coordinator', self._status_dir, loop)


# The columns of <logdir>/pbt/events.csv, one row per exploit or explore.
PBT_EVENT_COLUMNS = ('time', 'learner_step', 'agent', 'action',
                     'source_agent', 'fitness', 'source_fitness') + tuple(
                         pbt.HYPERPARAMETERS)


class PBTControllerNode:
  """Population-based training over a sweep's agents (IMPALA Appendix F).

  Every `poll_s` it reads each learner's step; an agent past the burn-in
  with `interval_steps` learner steps since its last evolution is due
  (`pbt.due`). For it, every agent's fitness is read from its evaluators
  (`pbt.recent_return` of the rounds that fetched weights after the agent's
  last copy, `pbt.fitness`), and `pbt.evolve` decides: a copy of a better
  agent's weights, RMSProp slots and hyperparameters (exploit; the copy's
  digest is read back and must equal the source's) and then a perturbation
  of the hyperparameters (explore). Each is a row of `<logdir>/pbt/
  events.csv` (PBT_EVENT_COLUMNS).

  Its state (generator, each agent's last evolution and copy) is JSON in
  `<logdir>/checkpoints/pbt/state.json`, written after each evolution: a
  restarted controller, or a restored run, goes on from it. An evolution
  is done at least once: a controller killed between acting and saving
  does that agent's evolution again (and logs it again). The learner
  checkpoints at once after each change. Rounds are matched to copies by
  wall-clock time (the controller's and the evaluator's clocks: one
  machine locally, NTP-synced pods on Kubernetes).
  """

  def __init__(self, learners: Sequence, evaluators: Sequence[Sequence],
               agents: Sequence[str], tasks: Sequence[str],
               interval_steps: int, burn_in_steps: int, seed: int,
               logdir: str, status_dir: str, poll_s: float = 2.,
               window: int = 3):
    self._agents = list(agents)
    # A learner or evaluator away (restarting) or busy is asked again until
    # it answers or the program stops; every call here can be repeated.
    self._learners = [lifecycle.Retrying(c, f'pbt -> {a}/learner')
                      for c, a in zip(learners, self._agents)]
    self._evaluators = [
        [lifecycle.Retrying(c, f'pbt -> {a}/evaluator') for c in e]
        for e, a in zip(evaluators, self._agents)]
    self._tasks = list(tasks)
    self._interval = interval_steps
    self._burn_in = burn_in_steps
    self._logdir = logdir
    self._status_dir = status_dir
    self._poll_s = poll_s
    self._window = window
    self._events_path = os.path.join(logdir, 'pbt', 'events.csv')
    self._state_path = os.path.join(logdir, 'checkpoints', 'pbt',
                                    'state.json')
    self._rng = np.random.default_rng(seed)
    n = len(self._learners)
    self._last_evolved = [pbt.NEVER] * n
    self._copied_at = [0.] * n
    self._evolutions = 0
    self._load()

  def _load(self) -> None:
    try:
      with open(self._state_path) as f:
        state = json.load(f)
    except FileNotFoundError:
      return
    except (OSError, ValueError) as error:
      raise ValueError(f'pbt: its checkpoint {self._state_path} cannot be '
                       f'read: {error}') from None
    if len(state['last_evolved']) != len(self._learners):
      raise ValueError(
          f'pbt: {self._state_path} is of {len(state["last_evolved"])} '
          f'agents; this run has {len(self._learners)}.')
    self._rng.bit_generator.state = state['rng']
    self._last_evolved = [int(s) for s in state['last_evolved']]
    self._copied_at = [float(t) for t in state['copied_at']]
    self._evolutions = int(state['evolutions'])
    logging.info('pbt: resumed from %s: %d evolutions so far, last at '
                 'learner steps %s.', self._state_path, self._evolutions,
                 self._last_evolved)

  def _save(self) -> None:
    os.makedirs(os.path.dirname(self._state_path), exist_ok=True)
    with open(self._state_path + '.tmp', 'w') as f:
      json.dump({'rng': self._rng.bit_generator.state,
                 'last_evolved': self._last_evolved,
                 'copied_at': self._copied_at,
                 'evolutions': self._evolutions}, f)
    os.replace(self._state_path + '.tmp', self._state_path)

  def _write_event(self, **row) -> None:
    os.makedirs(os.path.dirname(self._events_path), exist_ok=True)
    new = not os.path.exists(self._events_path)
    with open(self._events_path, 'a', newline='') as f:
      writer = csv.DictWriter(f, PBT_EVENT_COLUMNS)
      if new:
        writer.writeheader()
      writer.writerow({k: row.get(k, '') for k in PBT_EVENT_COLUMNS})

  def _fitness(self, agent: int) -> float:
    returns = {}
    for task, evaluator in zip(self._tasks, self._evaluators[agent]):
      returns[task] = pbt.recent_return(evaluator.recent_rounds(),
                                        self._copied_at[agent], self._window)
    return pbt.fitness(returns)

  def _evolve(self, agent: int, steps: Sequence[int],
              fitness: List[float], hyperparameters: List[Dict[str, float]]
              ) -> None:
    decision = pbt.evolve(agent, fitness, hyperparameters, self._rng,
                          pbt.copy_margin(self._tasks, fitness[agent]))
    name, source = self._agents[agent], decision.source
    common = dict(learner_step=steps[agent], agent=name)
    if source is not None:
      state = self._learners[source].get_training_state()
      digest = self._learners[agent].set_training_state(state)
      if digest != state['digest']:
        raise RuntimeError(
            f'pbt: the copy of {self._agents[source]} into {name} is not '
            f'exact (digest {digest}, sent {state["digest"]}).')
      self._copied_at[agent] = time.time()
      self._write_event(time=time.time(), action='exploit',
                        source_agent=self._agents[source],
                        fitness=fitness[agent], source_fitness=fitness[source],
                        **common, **state['hyperparameters'])
      logging.info('pbt: %s (fitness %.3f) copied %s (fitness %.3f) at its '
                   'learner step %d.', name, fitness[agent],
                   self._agents[source], fitness[source], steps[agent])
      fitness[agent] = fitness[source]
    now = self._learners[agent].set_hyperparameters(decision.hyperparameters)
    hyperparameters[agent] = now
    self._write_event(time=time.time(), action='explore',
                      fitness=fitness[agent], **common, **now)
    logging.info('pbt: %s explores %s.', name, now)
    self._last_evolved[agent] = steps[agent]
    self._evolutions += 1
    self._save()

  def _poll(self) -> None:
    statuses = [learner.pbt_status() for learner in self._learners]
    steps = [s['learner_steps'] for s in statuses]
    due = pbt.due(steps, self._last_evolved, self._interval, self._burn_in)
    if not due:
      return
    hyperparameters = [s['hyperparameters'] for s in statuses]
    fitness = [self._fitness(i) for i in range(len(self._learners))]
    for agent in due:
      self._evolve(agent, steps, fitness, hyperparameters)

  def run(self):
    def loop():
      while not lp.wait_for_stop(self._poll_s):
        self._poll()
    lifecycle.run_guarded('pbt', self._status_dir, loop)
