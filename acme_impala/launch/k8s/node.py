"""The entry of every pod: runs one node of the program, then exits with a
status the Job controller acts on.

  python -m acme_impala.launch.k8s.node --group=<group> --run_name=<run> \\
      --attempt=<id> <the flags of programs/impala_lp.py>

The node's index is $JOB_COMPLETION_INDEX (set by an Indexed Job) unless
`--index` is given. Every pod rebuilds the same program with the pure
`program.build_program` and computes the same address map (DNS names of the
run's pods, `naming.address_map`), or takes it from `--cluster_spec`, a JSON
object {group: ["host:port", ...]}.

Exit statuses (the contract with the Job's podFailurePolicy):
  0    the program stopped (budget reached, or `impala_k8s.py stop`);
  143  SIGTERM without a program stop (preemption, eviction, a deleted pod):
       the Job replaces the pod, which resumes the node;
  3    (`NODE_FAILED_EXIT`) the node failed; its message is written to the
       termination log, and the Job fails instead of retrying a bug;
  2    bad flags (no node was started).
The program's stop reaches every pod through the marker
`<logdir>/status/stop-<attempt>` on the shared volume: `lp.stop()` in any
pod writes it, every pod watches for it. A new attempt id (each `apply`)
gives a re-applied run a marker of its own.
"""

import json
import os
import signal
import sys
import threading
import time

from acme_impala.host import quiet
quiet.silence()  # pylint: disable=g-import-not-at-top  # Before TensorFlow.

from absl import app
from absl import flags
from absl import logging
import launchpad as lp  # Defines --lp_termination_notice_secs, read here.

from acme_impala.distributed import lifecycle
from acme_impala.launch import config_flags
from acme_impala.launch import program_flags
from acme_impala.launch.k8s import manifests
from acme_impala.launch.k8s import naming

NODE_FAILED_EXIT = manifests.NODE_FAILED_EXIT
SIGTERM_EXIT = 128 + signal.SIGTERM
BAD_FLAGS_EXIT = 2
STOP_MARKER_PREFIX = 'stop-'

FLAGS = flags.FLAGS
program_flags.define()
flags.DEFINE_string('group', None, 'The Launchpad group of this node.')
flags.DEFINE_integer('index', None,
                     'Index within the group; default $JOB_COMPLETION_INDEX.')
flags.DEFINE_string('run_name', None, 'The run (prefix of every object).')
flags.DEFINE_string('attempt', 'default',
                    'Id of this launch of the run; names the stop marker.')
flags.DEFINE_string('cluster_spec', None,
                    'JSON {group: ["host:port", ...]} overriding the DNS '
                    'address map.')
flags.DEFINE_string('termination_log', '/dev/termination-log',
                    'Where a failed node writes its message for Kubernetes.')
flags.DEFINE_float('stop_poll_s', 1.0, 'How often the stop marker is read.')


def stop_marker(logdir: str, attempt: str) -> str:
  return os.path.join(logdir, 'status', STOP_MARKER_PREFIX + attempt)


def write_stop_marker(logdir: str, attempt: str, reason: str) -> str:
  path = stop_marker(logdir, attempt)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f'{path}.{os.getpid()}.tmp'
  with open(tmp, 'w') as f:
    f.write(f'{reason} at {time.strftime("%Y-%m-%dT%H:%M:%S%z")}\n')
  os.replace(tmp, path)
  return path


# The pod that keeps the run's record (config.json) and guards its logdir:
# one per program, a sweep's included.
RECORD_KEEPER = 'coordinator/0'


def keep_record(overrides, logdir: str, attempt: str):
  """What a local launcher does before any node starts, done by the record
  keeper's pod: the logdir guard (a new run, or one to restore with
  unchanged hyperparameters) and `<logdir>/config.json`, tagged with this
  attempt. A restart of the keeper's pod within its attempt finds its own
  record and checks only that the values still match it. Raises ValueError
  naming what is wrong; returns the prepared run."""
  from acme_impala.distributed import run_record  # pylint: disable=g-import-not-at-top
  if recorded_attempt(logdir) == attempt:
    run = program_flags.prepare(overrides, logdir, launcher=False)
    run_record.check_restore(logdir, program_flags.make_configs(overrides))
    return run
  return program_flags.prepare(overrides, logdir, launcher=True,
                               attempt=attempt)


def recorded_attempt(logdir: str):
  """The attempt whose record `<logdir>/config.json` is, if any."""
  from acme_impala.distributed import run_record  # pylint: disable=g-import-not-at-top
  try:
    record = run_record.read_record(logdir)
  except ValueError:
    return None  # Damaged: the keeper's guard names it.
  return (record or {}).get('options', {}).get('attempt')


def wait_for_record(logdir: str, attempt: str, title: str,
                    poll_s: float = 1., report_s: float = 30.) -> None:
  """Blocks until the record keeper has checked the logdir and written this
  attempt's record, so no node touches a logdir the guard refuses; exits
  with BAD_FLAGS_EXIT when the keeper refused the run (its stop marker)."""
  from acme_impala.distributed import run_record  # pylint: disable=g-import-not-at-top
  start = last_report = time.time()
  while recorded_attempt(logdir) != attempt:
    marker = stop_marker(logdir, attempt)
    if os.path.exists(marker):
      with open(marker) as f:
        why = f.readline().strip()
      print(f'{title}: the run was refused before it started: {why}',
            file=sys.stderr, flush=True)
      _exit(BAD_FLAGS_EXIT)
    if time.time() - last_report >= report_s:
      last_report = time.time()
      logging.info('%s: waiting %.0f s for %s to check the logdir and write '
                   "this attempt's record (%s).", title, last_report - start,
                   RECORD_KEEPER, run_record.path_of(logdir))
    time.sleep(poll_s)


class _Node:
  """One pod's node, its stop marker and its exit status."""

  def __init__(self, title: str, logdir: str, attempt: str):
    self._title = title
    self._logdir = logdir
    self._attempt = attempt
    self._marker = stop_marker(logdir, attempt)
    self._running = threading.Event()

  def stopper(self):
    """`lp.stop()` here: stops every pod of the attempt, then this one."""
    why = lifecycle.read_stop_reason(os.path.join(self._logdir, 'status'))
    write_stop_marker(self._logdir, self._attempt,
                      f'lp.stop() in {self._title}' +
                      (f' ({why})' if why else ''))
    logging.info('%s: wrote the stop marker %s.', self._title, self._marker)
    os.kill(os.getpid(), signal.SIGTERM)

  def watch(self, poll_s: float, notice_s: float, termination_log: str):
    """Turns the marker into this process's SIGTERM (Launchpad's stop), and
    ends the process if the node outlives the termination notice.

    Launchpad's own deadline is a Python signal handler, which never runs
    while the main thread is blocked in C++ (a Reverb writer waiting for a
    server that has stopped); this thread's `os._exit` always does.
    """
    self._running.set()
    stopping = threading.Event()

    def deadline():
      stopping.wait()
      time.sleep(notice_s + 2)
      code, why = self.exit_status(termination_log)
      logging.warning('%s: still running %.0f s after the stop; exiting with '
                      'status %d (%s).', self._title, notice_s + 2, code, why)
      print(f'{self._title}: exiting with status {code} ({why}; the node '
            'did not stop within the termination notice).', flush=True)
      _exit(code)

    def loop():
      while not os.path.exists(self._marker) and not stopping.is_set():
        time.sleep(poll_s)
      if not stopping.is_set():
        logging.info('%s: program stop (%s); stopping.', self._title,
                     self._marker)
        os.kill(os.getpid(), signal.SIGTERM)
        stopping.set()

    lp.register_stop_handler(stopping.set)
    threading.Thread(target=deadline, daemon=True, name='deadline').start()
    threading.Thread(target=loop, daemon=True, name='stop-marker').start()

  def exit_status(self, termination_log: str):
    failure = lifecycle.failure_here()
    if failure:
      try:
        with open(termination_log, 'w') as f:
          f.write(failure[:4000])
      except OSError:
        pass
      return NODE_FAILED_EXIT, failure
    if os.path.exists(self._marker):
      return 0, 'the program stopped'
    if not self._running.is_set():
      return 1, 'the node did not start'
    return SIGTERM_EXIT, 'SIGTERM without a program stop'


def _exit(code: int) -> None:
  sys.stdout.flush()
  sys.stderr.flush()
  # Servers' and TensorFlow's non-daemon threads must not keep a finished
  # pod alive.
  os._exit(code)  # pylint: disable=protected-access


def _bad_flags(message: str) -> None:
  print(f'acme_impala.launch.k8s.node: error: {message}', file=sys.stderr)
  _exit(BAD_FLAGS_EXIT)


def main(argv, overrides):
  if len(argv) > 1:
    _bad_flags(f'unexpected arguments {argv[1:]}')
  index = FLAGS.index
  if index is None:
    text = os.environ.get('JOB_COMPLETION_INDEX', '')
    if not text.isdigit():
      _bad_flags('no --index and $JOB_COMPLETION_INDEX is '
                 f'{text or "unset"!r}; expected a node index.')
    index = int(text)
  if not FLAGS.group:
    _bad_flags('--group is required.')
  if not FLAGS.logdir:
    _bad_flags('--logdir is required (the run\'s shared volume).')
  if not naming.is_dns_label(FLAGS.attempt):
    _bad_flags(f'--attempt={FLAGS.attempt!r}: expected a DNS label.')
  # Imports that pull TensorFlow come after the flags are checked.
  from launchpad import context as lp_context  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import collective  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import program as program_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.launch import node_runner  # pylint: disable=g-import-not-at-top
  title = f'{FLAGS.group}/{index}'
  try:
    if title == RECORD_KEEPER:
      try:
        run = keep_record(overrides, FLAGS.logdir, FLAGS.attempt)
      except (ValueError, TypeError) as error:
        # Every other pod waits for this attempt's record: stop them.
        write_stop_marker(FLAGS.logdir, FLAGS.attempt,
                          f'{RECORD_KEEPER} refused the run: {error}')
        raise
    else:
      run = program_flags.prepare(overrides, FLAGS.logdir, launcher=False)
      wait_for_record(FLAGS.logdir, FLAGS.attempt, title)
    program = program_lib.build_program(run)
    if FLAGS.cluster_spec:
      addresses = json.loads(FLAGS.cluster_spec)
    else:
      if not FLAGS.run_name:
        raise ValueError('--run_name is required without --cluster_spec.')
      addresses = naming.address_map(FLAGS.run_name,
                                     node_runner.group_sizes(program))
    learners = addresses.get('learner', [])
    if len(learners) > 1:
      # The learner replicas' collective group: each learner pod's DNS
      # name and the collective's port (distributed/collective.py).
      os.environ[collective.ADDRESSES_ENV] = ','.join(
          f'{str(a).rpartition(":")[0]}:{naming.COLLECTIVE_PORT}'
          for a in learners)
    os.environ[lifecycle.NODE_TITLE_ENV] = title
    node = _Node(title, run.agents[0].options.logdir, FLAGS.attempt)
    node_runner.initialize_program(program,
                               lp_context.LaunchType.LOCAL_MULTI_PROCESSING,
                               node.stopper)
    node_runner.bind_address_map(program, addresses)
    if FLAGS.group not in program.groups or not 0 <= index < len(
        program.groups[FLAGS.group]):
      raise ValueError(f'no node {title!r} in the program; its groups: '
                       f'{node_runner.group_sizes(program)}.')
  except (ValueError, TypeError) as error:
    _bad_flags(str(error))
  logging.info('%s: starting (restart %d), addresses %s.', title,
               lifecycle.restart_count(), addresses)
  try:
    node_runner.run_node(program, FLAGS.group, index,
                     on_start=lambda: node.watch(
                         FLAGS.stop_poll_s, FLAGS.lp_termination_notice_secs,
                         FLAGS.termination_log))
  except BaseException as error:  # pylint: disable=broad-except
    logging.exception('%s: the node raised outside its guard.', title)
    lifecycle.record_failure(run.status_dir, title, error)
  code, why = node.exit_status(FLAGS.termination_log)
  logging.info('%s: exiting with status %d (%s).', title, code, why)
  print(f'{title}: exiting with status {code} ({why}).', flush=True)
  _exit(code)


def run():
  argv, overrides_text = config_flags.split_config_overrides(sys.argv)
  # As programs/impala_lp.py: time for the final checkpoint after a stop.
  flags.FLAGS.set_default('lp_termination_notice_secs', 30)

  def _main(argv):
    try:
      overrides = config_flags.parse_overrides(overrides_text)
    except ValueError as error:
      _bad_flags(str(error))
    main(argv, overrides)

  app.run(_main, argv=argv)


if __name__ == '__main__':
  run()
