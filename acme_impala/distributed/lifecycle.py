"""Stop and failure protocol for the Launchpad program.

Launchpad 0.5.2's local_mp launcher does not notice a node that fails (its
processes run behind an output-decorating proxy whose exit status is lost),
so the program would hang. Every node therefore runs its work through
`run_guarded`: an exception outside shutdown is written to the run's status
directory (naming the node and the error) and the whole program is stopped;
the launcher reads the status directory once all nodes are down and exits
non-zero with that message.

A node can also fail while it is being constructed (before `run`): the
program graph wraps every node's constructor in `guarded_constructor`, which
records the failure and stops the program the same way.

Errors raised while the program is already stopping (a Reverb server going
away under a blocked writer or dataset) are part of a normal shutdown.
"""

import dataclasses
import functools
import glob
import json
import os
import re
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Mapping, Optional

from absl import logging

# Launchpad (about a second to import) is imported where a stop is asked for
# or waited on: the launcher's flags and the Kubernetes manifests use this
# module's roles, and reject a bad flag before Launchpad loads.

_FAILURE_PREFIX = 'FAILED-'
# Why a node stopped the program on purpose (e.g. the budget is reached),
# for the launcher's stop line: lp.stop() reaches it as a bare SIGTERM.
_STOP_REASON_FILE = 'STOP-REASON'
# Fault injection for the lifecycle tests: the node whose label equals this
# environment variable raises at start, as a crashing node would; with the
# suffix ':construct' (e.g. 'actor_0:construct') it raises while the node is
# being constructed instead.
INJECT_FAILURE_ENV = 'ACME_IMPALA_INJECT_FAILURE'
_CONSTRUCT_SUFFIX = ':construct'

# The roles of a program's nodes: its Launchpad group names, which a sweep
# prefixes with `agent_<i>_`. Restart policies (supervisor) and Kubernetes
# resources (launch/k8s/manifests) are given per role.
ROLES = ('replay', 'counter', 'learner', 'actor', 'evaluator', 'coordinator',
         'pbt')


def role_of(group: str) -> str:
  """'agent_1_actor' -> 'actor' (a sweep prefixes its agents' groups)."""
  return re.sub(r'^agent_\d+_', '', group)


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
  """At most `max_restarts` restarts of one node within `window_s` seconds;
  one more death stops the program. 0 never restarts."""
  max_restarts: int = 3
  window_s: float = 600.

  def __str__(self):
    return f'{self.max_restarts}/{self.window_s:g}s'


DEFAULT_POLICIES: Mapping[str, RestartPolicy] = {
    role: RestartPolicy() for role in ROLES}


def parse_restart_policies(text: str) -> Dict[str, RestartPolicy]:
  """`role=N[/SECONDS],...` over the defaults, e.g. 'actor=5/600,learner=0'.

  Raises ValueError naming the bad entry before anything is launched.
  """
  policies = dict(DEFAULT_POLICIES)
  for entry in filter(None, (e.strip() for e in (text or '').split(','))):
    match = re.fullmatch(r'(\w+)=(\d+)(?:/(\d+(?:\.\d*)?))?', entry)
    if not match:
      raise ValueError(f'restarts entry {entry!r} is invalid: expected '
                       'ROLE=N or ROLE=N/SECONDS, e.g. actor=3/600.')
    role, count, window = match.groups()
    if role not in ROLES:
      raise ValueError(f'restarts entry {entry!r} names role {role!r}: '
                       f'expected one of {list(ROLES)}.')
    window_s = float(window) if window else DEFAULT_POLICIES[role].window_s
    if window_s <= 0:
      raise ValueError(f'restarts entry {entry!r}: the window must be > 0 s.')
    policies[role] = RestartPolicy(int(count), window_s)
  return policies


# Set by the supervising launcher (launch/supervisor.py) in every node process: how
# many times this node has been restarted, and its title ('actor/1').
RESTART_COUNT_ENV = 'ACME_IMPALA_RESTART_COUNT'
NODE_TITLE_ENV = 'ACME_IMPALA_NODE'


def restart_count() -> int:
  """How many times the supervisor has restarted this node process."""
  return int(os.environ.get(RESTART_COUNT_ENV, '0') or 0)


class InjectedFailure(RuntimeError):
  """Raised by the node named in $ACME_IMPALA_INJECT_FAILURE."""


_STOPPING = threading.Event()


def _on_stop():
  _STOPPING.set()


def forget_stop() -> None:
  """Forgets a finished thread-based program's stop in this process.

  Launchpad calls the stop handler process-wide; without this, a process
  that ran a `local_mt`/`test_mt` program would refuse every later client
  call (`Retrying`) as if its next program were stopping too.
  """
  import launchpad as lp  # pylint: disable=g-import-not-at-top
  lp.unregister_stop_handler(_on_stop)
  _STOPPING.clear()


def stop_requested() -> bool:
  """True once this program has been asked to stop (any launch type)."""
  if _STOPPING.is_set():
    return True
  import launchpad as lp  # pylint: disable=g-import-not-at-top
  try:
    return lp.wait_for_stop(0)
  except Exception:  # pylint: disable=broad-except
    # Outside a Launchpad worker there is no worker manager: never stopping.
    return False


def report_failure(status_dir: str, label: str, error: BaseException) -> str:
  """Writes `<status_dir>/FAILED-<label>` and returns the one-line message."""
  message = f'node {label!r} failed: {type(error).__name__}: {error}'
  os.makedirs(status_dir, exist_ok=True)
  path = os.path.join(status_dir, _FAILURE_PREFIX + label.replace('/', '.'))
  with open(path, 'w') as f:
    f.write(message + '\n\n')
    f.write(''.join(traceback.format_exception(
        type(error), error, error.__traceback__)))
  return message


def read_failures(status_dir: str) -> List[str]:
  """One-line messages of the nodes that failed, oldest first."""
  paths = sorted(glob.glob(os.path.join(status_dir, _FAILURE_PREFIX + '*')),
                 key=os.path.getmtime)
  messages = []
  for path in paths:
    with open(path) as f:
      messages.append(f.readline().strip())
  return messages


def counts_path(status_dir: str, agent: str = '') -> str:
  """Where an agent's counter node writes its counts (nodes.CounterNode)."""
  return os.path.join(status_dir, f'counts-{agent or "agent"}.json')


def read_counts(status_dir: str, agent: str = '',
                since: float = 0.) -> Optional[Dict[str, float]]:
  """An agent's counts as its counter last wrote them, if it wrote them
  at or after `since` (seconds since the epoch), else None."""
  try:
    with open(counts_path(status_dir, agent)) as f:
      record = json.load(f)
  except (OSError, ValueError):
    return None
  return record['counts'] if record.get('time', 0.) >= since else None


def clear_run_status(status_dir: str) -> None:
  """Removes an earlier run's failure records, stop reason, table sizes
  (nodes.ReplayNode's tables-<node>.json) and counts (counts-<agent>.json)."""
  for path in (glob.glob(os.path.join(status_dir, _FAILURE_PREFIX + '*')) +
               glob.glob(os.path.join(status_dir, 'tables-*.json')) +
               glob.glob(os.path.join(status_dir, 'counts-*.json')) +
               [os.path.join(status_dir, _STOP_REASON_FILE)]):
    if os.path.exists(path):
      os.remove(path)


def stop_program(status_dir: Optional[str], reason: str) -> None:
  """`lp.stop()`, first recording `reason` (in the user's words, e.g.
  'reached the budget: ...') for the launcher's stop line."""
  if status_dir:
    os.makedirs(status_dir, exist_ok=True)
    tmp = os.path.join(status_dir, _STOP_REASON_FILE + '.tmp')
    with open(tmp, 'w') as f:
      f.write(reason + '\n')
    os.replace(tmp, os.path.join(status_dir, _STOP_REASON_FILE))
  import launchpad as lp  # pylint: disable=g-import-not-at-top
  lp.stop()


def read_stop_reason(status_dir: str) -> Optional[str]:
  """The reason a node gave `stop_program`, if one did."""
  try:
    with open(os.path.join(status_dir, _STOP_REASON_FILE)) as f:
      return f.readline().strip() or None
  except OSError:
    return None


# Failures of nodes run in this process: a Kubernetes pod's exit status
# says whether its own node failed (launch/k8s/node.py).
_FAILURES_HERE: List[str] = []


def failure_here() -> Optional[str]:
  """The message of the first node of this process that failed, if any."""
  return _FAILURES_HERE[0] if _FAILURES_HERE else None


def record_failure(status_dir: Optional[str], label: str,
                   error: BaseException) -> str:
  """`report_failure` (when there is a status dir), remembered as a failure
  of this process; returns the one-line message."""
  message = f'node {label!r} failed: {type(error).__name__}: {error}'
  if status_dir:
    message = report_failure(status_dir, label, error)
  _FAILURES_HERE.append(message)
  return message


def _fail_program(label: str, status_dir: Optional[str], error: BaseException,
                  context: str) -> None:
  """Records `error` of node `label` (if there is a status dir), logs it and
  stops the whole program."""
  message = record_failure(status_dir, label, error)
  logging.error('%s%s\n%s', message, context, traceback.format_exc())
  import launchpad as lp  # pylint: disable=g-import-not-at-top
  lp.stop()


def run_guarded(label: str, status_dir: Optional[str],
                fn: Callable[[], None]) -> None:
  """Runs a node's main loop; a failure stops the program and is recorded."""
  # In thread-based launches lp.wait_for_stop is per-thread state; the stop
  # handler is process-wide, so shutdown errors are never taken for failures.
  import launchpad as lp  # pylint: disable=g-import-not-at-top
  lp.register_stop_handler(_on_stop)
  try:
    if os.environ.get(INJECT_FAILURE_ENV) == label:
      raise InjectedFailure(f'failure injected into {label!r} through '
                            f'${INJECT_FAILURE_ENV}')
    fn()
  except SystemExit:
    # Acme's runtime_terminator stops loops this way.
    pass
  except BaseException as error:  # pylint: disable=broad-except
    if stop_requested():
      logging.info('%s: ignoring %s raised during shutdown: %s', label,
                   type(error).__name__, error)
      return
    _fail_program(label, status_dir, error, '')
    return
  logging.info('%s: finished.', label)


class _FailedNode:
  """Stands in for a node whose construction failed; its run returns."""

  def __init__(self, label: str):
    self._label = label

  def run(self):
    logging.info('%s: not started (its construction failed).', self._label)


def _construct(constructor, label, status_dir, *args, **kwargs):
  try:
    if os.environ.get(INJECT_FAILURE_ENV) == label + _CONSTRUCT_SUFFIX:
      raise InjectedFailure(f'failure injected into the construction of '
                            f'{label!r} through ${INJECT_FAILURE_ENV}')
    return constructor(*args, **kwargs)
  except Exception as error:  # pylint: disable=broad-except
    # Launchpad would otherwise leave this worker in a post-mortem debugger
    # and the rest of the program running without it.
    _fail_program(label, status_dir, error, ' (while constructing the node)')
    return _FailedNode(label)


def guarded_constructor(constructor: Callable[..., object], label: str,
                        status_dir: Optional[str]) -> Callable[..., object]:
  """`constructor` for a Launchpad node; a failure stops the program.

  The failure is recorded as run_guarded does (the launcher then exits
  non-zero naming `label`), and the node is replaced by one whose `run`
  returns at once.
  """
  return functools.partial(_construct, constructor, label, status_dir)


def wait_for_stop(timeout_s: float) -> bool:
  """Sleeps up to `timeout_s`; True as soon as the program is stopping."""
  deadline = time.time() + timeout_s
  while not stop_requested():
    remaining = deadline - time.time()
    if remaining <= 0:
      return False
    time.sleep(min(remaining, 0.2))
  return True


class ProgramStopping(RuntimeError):
  """Raised by Retrying for a call asked for once the program is stopping."""


class Retrying:
  """A client of another node whose calls are retried while that node is
  away (restarting after a crash), with exponential backoff, until they
  succeed or the program stops (then the last error is raised). Once the
  program is stopping, a call is not sent: ProgramStopping is raised.

  E.g. `Retrying(counter_client, 'actor_0 -> counter').increment(steps=8)`.
  The first failure of an outage and its end are logged, and every
  `log_every_s` in between, so that an outage is never silent.
  """

  def __init__(self, client: Any, label: str, initial_backoff_s: float = 0.5,
               max_backoff_s: float = 10., log_every_s: float = 30.):
    self._client = client
    self._label = label
    self._initial = initial_backoff_s
    self._max = max_backoff_s
    self._log_every_s = log_every_s

  def __getattr__(self, method: str):
    if method.startswith('_'):
      raise AttributeError(method)
    return functools.partial(self._call, method)

  def _call(self, method: str, *args, **kwargs):
    if stop_requested():
      # The other node may be gone already, and a call to it would wait out
      # its client's deadline (the counter's: 5 s, wait_for_ready): the
      # learner stopped 5-10 s late at every budget this way.
      raise ProgramStopping(f'{self._label}: {method} not sent, the program '
                            'is stopping.')
    backoff, since, logged, failures = self._initial, None, 0., 0
    while True:
      try:
        result = getattr(self._client, method)(*args, **kwargs)
      except Exception as error:  # pylint: disable=broad-except
        if stop_requested():
          raise
        now = time.time()
        failures += 1
        if since is None:
          since = now
        if now - logged >= self._log_every_s:
          logged = now
          logging.warning('%s: %s failed for %.0f s (%d attempts, last: %s); '
                          'retrying with backoff.', self._label, method,
                          now - since, failures, error)
        if wait_for_stop(backoff):
          raise
        backoff = min(2 * backoff, self._max)
        continue
      if since is not None:
        logging.warning('%s: %s answered again after %.1f s (%d failed '
                        'attempts).', self._label, method, time.time() - since,
                        failures)
      return result
