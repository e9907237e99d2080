"""A local_mp launcher that notices dead node processes and restarts them.

Launchpad 0.5.2's local_mp launcher runs every node behind an output proxy
whose exit status is lost: a node process killed with SIGKILL (out of memory,
preemption) goes unnoticed, the rest runs on without it or blocks. This
launcher prepares the program exactly as `lp.launch(..., 'local_mp')` does,
with Launchpad's own pieces (each node's launch context and program stopper,
its input handles, the addresses it binds), and runs one child process per
node itself. A child is started one of two ways (`start_method`):

  - 'fork' (the default): this process, which has imported TensorFlow and
    built the program but run no TensorFlow op and opened no gRPC channel,
    forks, and the child runs its node with `node_runner.run_node`, the same
    call a Kubernetes pod makes. Each node process then skips importing
    TensorFlow, Acme and Sonnet again (~4 s of CPU each, seven times over
    on 2 cores at start-up: benchmarks/startup.py measures the difference);
  - 'exec': Launchpad's own `process_entry.py` command of the node (a new
    interpreter that imports everything and unpickles its node).

Each node's output goes to `<logdir>/nodes/<group>-<index>.log` and, with
`verbose`, to the terminal; the terminal always gets this launcher's own
messages and, given a `progress`, one progress line every few seconds.

Either way this launcher can:

  - notice within a second any node process that exits without a program
    stop, and log which node, how (exit status or signal) and when;
  - restart it with the same command (same pickled node, same bound
    addresses) under a per-group `RestartPolicy`: at most `max_restarts`
    within `window_s` seconds. The restarted process sees its restart count
    in $ACME_IMPALA_RESTART_COUNT (nodes fold it into their seeds); learner
    and counter come back from their latest checkpoints and the replay from
    its Reverb checkpoint, because their constructors load what is in the
    run's checkpoint directory;
  - stop the whole program, naming the node, when a group's limit is
    exceeded;
  - stop every child on the program's stop (`lp.stop()` from a node sends
    this process SIGTERM, as Launchpad's stopper does), on SIGTERM and on
    Ctrl-C, even during a restart, and leave no process behind (children
    that outlive the termination notice are killed; each child gets SIGTERM
    when this process dies, however it dies, through util-linux `setpriv
    --pdeathsig`).

A node that raises is not restarted: `lifecycle.run_guarded` records it and
stops the program (a Python exception is a bug or a bad setting, which a
restart would repeat). Restarts are for processes that disappear.
"""

import ctypes
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, List, Mapping, Optional

from absl import flags
from absl import logging
import launchpad as lp
import psutil
from launchpad import context as lp_context
from launchpad.program_stopper import program_stopper

from acme_impala.distributed import lifecycle
from acme_impala.launch import node_runner
from acme_impala.launch import program_flags

# Node roles (group names without a sweep's `agent_<i>_` prefix).
ROLES = lifecycle.ROLES
role_of = lifecycle.role_of
NODES_FILE = 'nodes.json'
START_METHODS = program_flags.START_METHODS
# Restart limits per role (lifecycle, so that the launcher checks
# --restarts before Launchpad loads).
RestartPolicy = lifecycle.RestartPolicy
DEFAULT_POLICIES = lifecycle.DEFAULT_POLICIES
parse_restart_policies = lifecycle.parse_restart_policies
# The stop reason of a SIGTERM until `stop_line` reads what caused it.
SIGTERM = 'SIGTERM'
_PR_SET_PDEATHSIG = 1  # From <linux/prctl.h>.


def describe_exit(returncode: int) -> str:
  if returncode < 0:
    try:
      return f'killed by {signal.Signals(-returncode).name}'
    except ValueError:
      return f'killed by signal {-returncode}'
  return f'exited with status {returncode}'


def _kill_tree(pid: int) -> None:
  try:
    parent = psutil.Process(pid)
    processes = parent.children(recursive=True) + [parent]
  except psutil.NoSuchProcess:
    return
  for process in processes:
    try:
      process.kill()
    except psutil.NoSuchProcess:
      pass


def stop_line(reason: str, status_dir: str) -> str:
  """Why the program stops, in the user's words. `reason` is the
  launcher's own (Ctrl-C, a restart limit) or `SIGTERM`: a node's lp.stop(),
  which first records why in `status_dir` (the budget reached, its own
  failure), or else a signal from outside the program."""
  if reason != SIGTERM:
    return reason
  failures = lifecycle.read_failures(status_dir)
  if failures:
    # "node 'actor_1' failed: InjectedFailure: ..." (the whole message
    # follows at the end).
    return failures[0].split(':', 1)[0]
  return (lifecycle.read_stop_reason(status_dir) or
          'SIGTERM received from outside the program')


class _ForkedProcess:
  """The part of `subprocess.Popen` the supervisor uses, for a forked child:
  pid, stdout (its output), poll, wait, returncode, send_signal."""

  def __init__(self, pid: int, stdout):
    self.pid = pid
    self.stdout = stdout
    self.returncode: Optional[int] = None

  def _reap(self, flags_: int) -> Optional[int]:
    if self.returncode is None:
      try:
        pid, status = os.waitpid(self.pid, flags_)
      except ChildProcessError:
        return self.returncode
      if pid == self.pid:
        # Popen's convention: -N when killed by signal N.
        self.returncode = os.waitstatus_to_exitcode(status)
    return self.returncode

  def poll(self) -> Optional[int]:
    return self._reap(os.WNOHANG)

  def wait(self, timeout: Optional[float] = None) -> int:
    if timeout is None:
      return self._reap(0)
    deadline = time.time() + timeout
    while self.poll() is None:
      if time.time() > deadline:
        raise subprocess.TimeoutExpired(str(self.pid), timeout)
      time.sleep(0.05)
    return self.returncode

  def send_signal(self, sig: int) -> None:
    if self.poll() is None:
      os.kill(self.pid, sig)


def _run_forked_node(program: lp.Program, group: str, index: int,
                     env: Mapping[str, str], notice_s: float,
                     output_fd: int, parent_pid: int) -> None:
  """The forked child: becomes node `index` of `group`; never returns."""
  code = 1
  try:
    # SIGTERM when the supervisor dies, however it dies.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:
      os._exit(1)  # The supervisor died before the prctl.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    os.close(output_fd)
    os.close(devnull)
    # New stream objects: a supervisor thread may have held the old ones'
    # locks at the fork. Log records go to the new stderr.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, 'w', closefd=False),
                                  line_buffering=True, errors='replace')
    sys.stderr = io.TextIOWrapper(io.FileIO(2, 'w', closefd=False),
                                  line_buffering=True, errors='replace')
    logging.get_absl_handler().python_handler.stream = sys.stderr
    # The supervisor's handlers must not run here (Launchpad's dispatcher
    # would keep a callable previous handler); the worker manager that
    # run_node makes installs the node's, as in a new interpreter. This
    # launcher never makes a Launchpad worker manager or stop handler, so
    # Launchpad's signal state is as fresh as in a new interpreter.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
      signal.signal(sig, signal.SIG_DFL)
    flags.FLAGS.lp_termination_notice_secs = int(notice_s)
    os.environ.update(env)
    node_runner.run_node(program, group, index)
    code = 0
  except SystemExit as error:
    code = error.code if isinstance(error.code, int) else 1
  except BaseException:  # pylint: disable=broad-except
    import traceback  # pylint: disable=g-import-not-at-top
    traceback.print_exc()
  finally:
    try:
      sys.stdout.flush()
      sys.stderr.flush()
    finally:
      os._exit(code)  # No atexit handlers or finalisers of the parent's.


class _Child:
  """One node: how to start it, its current process, its restarts."""

  def __init__(self, group: str, index: int, command, policy: RestartPolicy,
               notice_s: float):
    self.group = group
    self.index = index
    self.title = f'{group}/{index}'
    self.command = None
    self.env = {}
    if command is not None:
      # A crash must end the process with its status, not in a debugger;
      # and the node's own worker manager gives it the same notice as we do.
      self.command = [a for a in command.command_as_list
                      if a != '--pdb_post_mortem'] + [
                          f'--lp_termination_notice_secs={int(notice_s)}']
      setpriv = shutil.which('setpriv')
      if setpriv:
        # setpriv execs the node in place (same pid): SIGTERM when we die.
        self.command = [setpriv, '--pdeathsig', 'TERM', '--'] + self.command
      self.env = dict(command.env_overrides)
    self.policy = policy
    self.process: Optional[subprocess.Popen] = None
    self.restarts: List[float] = []  # Times of restarts.
    self.deaths: List[str] = []  # How each death happened.
    self.finished = False  # Exited 0 on its own (its work is done).

  def recent_restarts(self, now: float) -> int:
    return sum(1 for t in self.restarts if now - t <= self.policy.window_s)


class Supervisor:
  """Runs a Launchpad program's nodes as supervised child processes."""

  def __init__(self, program: lp.Program, status_dir: str,
               policies: Optional[Mapping[str, RestartPolicy]] = None,
               termination_notice_s: float = 30.,
               output=None, start_method: str = 'fork',
               node_log_dir: Optional[str] = None, verbose: bool = True,
               progress=None, progress_interval_s: float = 5.,
               at_end: Optional[Callable[[], str]] = None):
    """See the module docstring. Output:

    Args:
      node_log_dir: each node process's output (stdout and stderr, every
        life of it) is appended to `<node_log_dir>/<group>-<index>.log`.
      verbose: also forward node output to `output`, prefixed with the
        node's title; else `output` gets only this launcher's messages
        (deaths, restarts, failures, the summary) and the progress line.
      progress: an object with `line()` and `summary()` (progress.Progress):
        its line is shown every `progress_interval_s` seconds (rewritten in
        place on a terminal unless verbose), its summary at the end.
      at_end: called once every node has stopped, before the final status;
        its message is shown (e.g. where the run's curves were drawn).
    """
    if start_method not in START_METHODS:
      raise ValueError(f'start_method={start_method!r} is invalid: expected '
                       f'one of {START_METHODS}.')
    self._name = program.name
    self._program = program
    self._start_method = start_method
    self._status_dir = status_dir
    self._policies = dict(DEFAULT_POLICIES, **(policies or {}))
    self._notice_s = termination_notice_s
    self._output = output or sys.stdout
    self._output_lock = threading.Lock()
    self._node_log_dir = node_log_dir
    self._verbose = verbose
    self._progress = progress
    self._progress_interval_s = progress_interval_s
    self._at_end = at_end
    # A progress line rewritten in place ends without a newline until the
    # next message.
    self._in_place = (not verbose and progress is not None and
                      getattr(self._output, 'isatty', lambda: False)())
    self._line_open = False
    self._stop_reason: Optional[str] = None
    self._stop_requested = threading.Event()
    self._limit_failure: Optional[str] = None
    self._children = self._prepare(program)

  def _prepare(self, program: lp.Program) -> List[_Child]:
    """What `lp.launch(program, 'local_mp')` does before starting processes:
    launch contexts whose stopper signals this process, connected input
    handles, bound addresses, one process_entry command per node."""
    launch_type = lp_context.LaunchType.LOCAL_MULTI_PROCESSING
    node_runner.initialize_program(
        program, launch_type,
        program_stopper.make_program_stopper(launch_type))
    for node in program.get_all_nodes():
      node.bind_addresses()
    children = []
    for group, nodes in program.groups.items():
      if self._start_method == 'exec':
        commands = nodes[0].to_executables(nodes, group,
                                           nodes[0].launch_context)
      else:
        commands = [None] * len(nodes)
      policy = self._policies.get(role_of(group), RestartPolicy())
      for index, command in enumerate(commands):
        children.append(_Child(group, index, command, policy,
                                     self._notice_s))
    return children

  # --- output and bookkeeping -------------------------------------------

  def _write(self, text: str) -> None:
    """Writes whole lines; the caller holds the output lock."""
    if self._line_open:
      self._output.write('\n')
      self._line_open = False
    self._output.write(text)
    self._output.flush()

  def say(self, message: str) -> None:
    with self._output_lock:
      self._write(f'{self._name}: {message}\n')

  def _show_progress(self) -> None:
    try:
      line = f'{self._name}: {self._progress.line()}'
    except Exception as error:  # pylint: disable=broad-except
      line = f'{self._name}: progress unavailable ({error!r})'
    with self._output_lock:
      if self._in_place:
        self._output.write('\r' + line + '\x1b[K')
        self._output.flush()
        self._line_open = True
      else:
        self._write(line + '\n')

  def node_log_path(self, child: _Child) -> Optional[str]:
    if not self._node_log_dir:
      return None
    return os.path.join(self._node_log_dir,
                        f'{child.group}-{child.index}.log')

  def _forward(self, child: _Child, stream) -> None:
    prefix = f'[{child.title}] '
    path = self.node_log_path(child)
    log = None
    if path:
      os.makedirs(self._node_log_dir, exist_ok=True)
      log = open(path, 'a', errors='replace')
      log.write(f'--- {child.title}: process {child.process.pid} started at '
                f'{time.strftime("%Y-%m-%d %H:%M:%S")} (restart '
                f'{len(child.restarts)}) ---\n')
      log.flush()
    try:
      for line in iter(stream.readline, ''):
        if log:
          log.write(line)
          log.flush()
        if self._verbose:
          with self._output_lock:
            self._write(prefix + line)
    finally:
      stream.close()
      if log:
        log.close()

  def _write_nodes_file(self) -> None:
    """`<status_dir>/nodes.json`: each node's current pid and restarts."""
    nodes = {c.title: {'pid': c.process.pid if c.process else None,
                       'restarts': len(c.restarts)}
             for c in self._children}
    os.makedirs(self._status_dir, exist_ok=True)
    tmp = os.path.join(self._status_dir, NODES_FILE + '.tmp')
    with open(tmp, 'w') as f:
      json.dump(nodes, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(self._status_dir, NODES_FILE))

  def _fork(self, child: _Child, env: Mapping[str, str]) -> _ForkedProcess:
    read_fd, write_fd = os.pipe()
    # The other children's output pipes must not stay open in this one.
    inherited = []
    for other in self._children:
      try:
        inherited.append(other.process.stdout.fileno())
      except (AttributeError, ValueError):
        pass  # Not started yet, or its output already closed.
    parent_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
      os.close(read_fd)
      for fd in inherited:
        try:
          os.close(fd)
        except OSError:
          pass
      _run_forked_node(self._program, child.group, child.index, env,
                       self._notice_s, write_fd, parent_pid)
    os.close(write_fd)
    return _ForkedProcess(pid, io.TextIOWrapper(
        io.FileIO(read_fd, 'r'), errors='replace'))

  def _start(self, child: _Child) -> None:
    env = dict(child.env)
    env[lifecycle.RESTART_COUNT_ENV] = str(len(child.restarts))
    env[lifecycle.NODE_TITLE_ENV] = child.title
    if self._start_method == 'fork':
      child.process = self._fork(child, env)
    else:
      child.process = subprocess.Popen(
          child.command, env=dict(os.environ, **env),
          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
          stderr=subprocess.STDOUT, text=True, errors='replace')
    threading.Thread(target=self._forward, args=(child, child.process.stdout),
                     daemon=True, name=f'output-{child.title}').start()

  # --- stopping ------------------------------------------------------------

  def request_stop(self, reason: str) -> None:
    if not self._stop_requested.is_set():
      self._stop_reason = reason
      self._stop_requested.set()

  def _on_signal(self, signum, frame):
    del frame
    if signum == signal.SIGINT:
      self.request_stop('stopped by the user (Ctrl-C)')
    else:
      # lp.stop() from a node (budget reached, or a node failed) or an
      # outside SIGTERM: `stop_line` tells which.
      self.request_stop(SIGTERM)

  def _stop_children(self) -> None:
    """SIGTERM to every live node; SIGKILL what outlives the notice."""
    live = [c for c in self._children
            if c.process and c.process.poll() is None]
    for child in live:
      try:
        child.process.send_signal(signal.SIGTERM)
      except ProcessLookupError:
        pass
    deadline = time.time() + self._notice_s + 5
    while time.time() < deadline and any(
        c.process.poll() is None for c in live):
      time.sleep(0.2)
    for child in live:
      if child.process.poll() is None:
        self.say(f'node {child.title} did not stop within '
                 f'{self._notice_s:.0f} s; killing it.')
        _kill_tree(child.process.pid)
        child.process.wait()

  # --- the watch loop ------------------------------------------------------

  def _handle_death(self, child: _Child, now: float) -> None:
    how = describe_exit(child.process.returncode)
    where = ''
    if self.node_log_path(child) and not self._verbose:
      where = f' Its output: {self.node_log_path(child)}.'
    when = time.strftime('%H:%M:%S', time.localtime(now))
    if child.process.returncode == 0 and not self._is_synchronous(child):
      # Its work is done (e.g. a node whose construction failed returns at
      # once after stopping the program): nothing to restart. A learner
      # replica has no work of its own to finish: one that exits 0 while
      # the program runs (a SIGTERM of its own) leaves its group short.
      child.finished = True
      logging.info('%s: node %s finished (exit status 0).', self._name,
                   child.title)
      return
    child.deaths.append(how)
    recent = child.recent_restarts(now)
    if recent >= child.policy.max_restarts:
      message = (f"node {child.title!r} {how} at {when}; its restart limit "
                 f"({child.policy} for group {child.group!r}) is exceeded "
                 f"after {recent} restart(s): stopping the program.")
      self.say(message + where)
      self._limit_failure = message
      lifecycle.report_failure(
          self._status_dir, child.title,
          RuntimeError(f'{how}; restart limit {child.policy} exceeded'))
      self.request_stop(f'node {child.title} exceeded its restart limit')
      return
    child.restarts.append(now)
    self.say(f'node {child.title} {how} at {when}; restarting it '
             f'(restart {len(child.restarts)}, {recent + 1} of '
             f'{child.policy} for group {child.group!r}).{where}')
    siblings = self._synchronous_siblings(child)
    for sibling in siblings:
      if sibling.process.poll() is None:
        self._stop_child(sibling, f'to restart with {child.title}')
        sibling.deaths.append(f'restarted with {child.title}')
      else:  # Gone too (a replica that saw the group break exits 75).
        sibling.deaths.append(describe_exit(sibling.process.returncode))
    # The group's restarts count against each replica's limit (checked for
    # the one that died): a group restarts as often as its least stable
    # member dies.
    for node in [child] + siblings:
      if self._stop_requested.is_set():
        return  # Stopped meanwhile: the stop takes every node down.
      if node is not child:
        node.restarts.append(now)
      self._start(node)
    self._write_nodes_file()

  def _is_synchronous(self, child: _Child) -> bool:
    """A node of a group that cannot run short: learner replicas
    (--num_learners > 1) all-reduce every step."""
    return role_of(child.group) == 'learner' and sum(
        c.group == child.group for c in self._children) > 1

  def _synchronous_siblings(self, child: _Child) -> List[_Child]:
    """The other replicas of `child`'s group: a replica that restarts
    alone would find the others waiting in the old step
    (distributed/collective.py). They restart with it, from replica 0's
    checkpoint, in one go (also those that died meanwhile)."""
    if not self._is_synchronous(child):
      return []
    return [c for c in self._children
            if c.group == child.group and c is not child and c.process]

  def _stop_child(self, child: _Child, why: str) -> None:
    """SIGTERM (a learner checkpoints on its way out), SIGKILL after the
    termination notice."""
    self.say(f'node {child.title}: stopping it {why} (a synchronous '
             'learner group restarts whole).')
    try:
      child.process.send_signal(signal.SIGTERM)
      child.process.wait(timeout=self._notice_s + 5)
    except ProcessLookupError:
      pass
    except subprocess.TimeoutExpired:
      _kill_tree(child.process.pid)
      child.process.wait()

  def run(self) -> int:
    """Starts every node, supervises until the program stops; exit status."""
    previous = {sig: signal.signal(sig, self._on_signal)
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
      for child in self._children:
        if not self._stop_requested.is_set():
          self._start(child)
      self._write_nodes_file()
      last_progress = time.time()
      while not self._stop_requested.wait(0.5):
        now = time.time()
        if (self._progress is not None and
            now - last_progress >= self._progress_interval_s):
          self._show_progress()
          last_progress = now
        for child in self._children:
          if (self._stop_requested.is_set() or child.finished or
              child.process.poll() is None):
            continue
          self._handle_death(child, now)
        if all(c.finished for c in self._children):
          self.request_stop('every node finished')
      self.say('stopping: '
               f'{stop_line(self._stop_reason, self._status_dir)}.')
      self._stop_children()
    finally:
      # A second Ctrl-C while stopping must not leave children behind.
      for child in self._children:
        if child.process and child.process.poll() is None:
          _kill_tree(child.process.pid)
          child.process.wait()
      for sig, handler in previous.items():
        signal.signal(sig, handler)
    if self._at_end is not None:
      self.say(self._at_end())
    return self._exit_status()

  def restart_summary(self) -> str:
    restarted = [f'{c.title} {len(c.restarts)} ({", ".join(c.deaths)})'
                 for c in self._children if c.restarts or c.deaths]
    return ('restarts: ' + '; '.join(restarted)) if restarted else (
        'restarts: none')

  def _exit_status(self) -> int:
    failures = lifecycle.read_failures(self._status_dir)
    status = 1 if failures or self._limit_failure else 0
    for message in failures:
      self.say(message)
    if failures:
      self.say(f'details in {self._status_dir}' + (
          f', node output in {self._node_log_dir}' if self._node_log_dir
          else ''))
    if self._progress is not None:
      try:
        self.say(self._progress.summary())
      except Exception as error:  # pylint: disable=broad-except
        self.say(f'no summary: {error!r}')
    self.say(f'all nodes stopped; {self.restart_summary()}; exiting with '
             f'status {status}.')
    return status
