"""A benchmark's program run, done once: a finished run leaves
`benchmark_run.json` in its logdir and is not run again, so an interrupted
benchmark resumes where it stopped (`benchmarks/minatar.py`,
`benchmarks/multitask.py`, `benchmarks/pbt.py`); a run stopped before its
end (a machine's time limit) continued from its checkpoints, its launches
recorded in `benchmark_segments.json` (`run_once(resume=True)`); a program
run with a time limit that lets the launcher stop its nodes
(`run_program`); and what every benchmark that starts processes uses so
that none outlives it (`popen`, `exit_on_sigterm`)."""

import csv
import ctypes
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time

import provenance
import psutil

from acme_impala.distributed import run_record

DONE = 'benchmark_run.json'
# A run's launches: {record, segments: [{commit, cpu, host, pid, start,
# last_seen, end, exit}]}, times in unix seconds; written at each launch,
# heartbeat and exit.
SEGMENTS = 'benchmark_segments.json'


# How long a launcher has to stop its nodes after SIGTERM.
_STOP_GRACE_S = 120
# How often a running launch's record notes that it is alive (`last_seen`):
# the end of a launch killed with its benchmark is known to this much.
_HEARTBEAT_S = 60.
_PR_SET_PDEATHSIG = 1  # From <linux/prctl.h>.
# Loaded here, not in the forked child (a dlopen after a fork can block).
_LIBC = ctypes.CDLL(None, use_errno=True)


def _tie_to(parent_pid: int):
  """A Popen preexec_fn (run in the child before exec): SIGTERM to the child
  when its parent dies."""
  def preexec():
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:
      os._exit(1)  # The parent died before the prctl.  pylint: disable=protected-access
  return preexec


def popen(cmd, **popen_kwargs) -> subprocess.Popen:
  """`subprocess.Popen(cmd, **popen_kwargs)`, the child tied to this
  process: it gets SIGTERM when this process dies, however it dies (SIGKILL
  and a crash included), so a program's launcher stops its nodes instead of
  outliving the benchmark. Call it from the main thread: the kernel sends
  the signal when the thread that started the child ends."""
  return subprocess.Popen(cmd, preexec_fn=_tie_to(os.getpid()),
                          **popen_kwargs)


class Terminated(SystemExit):
  """SIGTERM to this process, raised in its main thread (exit 1; its
  message names the script and the signal)."""


def _raise_terminated(signum, frame):
  del frame
  raise Terminated(f'{os.path.basename(sys.argv[0])}: signal {signum}')


def exit_on_sigterm() -> None:
  """From here on, SIGTERM to this process raises `Terminated` in its main
  thread: the `finally` blocks that stop what it started run, as they do
  after Ctrl-C. Without it, SIGTERM ends the interpreter on the spot."""
  signal.signal(signal.SIGTERM, _raise_terminated)


def finished(logdir: str):
  """The record of the finished run in `logdir` (written by `run_once`), or
  None if there is none."""
  done = os.path.join(logdir, DONE)
  if not os.path.exists(done):
    return None
  with open(done) as f:
    return json.load(f)


def settings_differ(record: dict, settings: dict) -> dict:
  """{setting: (the run's, `settings`')} where a run's record differs
  from `settings` ('not recorded' where the record lacks it). Commands
  are compared without their --logdir (the record's is where it ran)."""
  def same(k, v):
    if k == 'command':
      return _without_logdir(record.get(k)) == _without_logdir(v)
    return record.get(k) == v
  return {k: (record.get(k, 'not recorded'), v) for k, v in settings.items()
          if not same(k, v)}


def with_finished_seeds(seeds, logroot: str, prefixes=('',)):
  """`seeds` and the seed of every finished run `<prefix>s<seed>` under
  `logroot`, in numeric order: a benchmark run one seed per invocation
  keeps one summary of all of them."""
  seeds = list(seeds)
  for prefix in prefixes:
    for path in glob.glob(os.path.join(logroot, f'{prefix}s*')):
      seed = os.path.basename(path)[len(prefix) + 1:]
      if seed and seed not in seeds and finished(path) is not None:
        seeds.append(seed)
  return sorted(seeds, key=lambda s: (not s.isdigit(),
                                      int(s) if s.isdigit() else 0, s))


# Columns of a per-seed CSV of learning-curve grid points (pong.py,
# minatar.py), before the run's commit and CPU.
GRID_KEYS = ('env_steps', 'wall_seconds', 'train_return_mean100',
             'eval_return_mean10', 'learner_steps')


def write_grid_csv(path: str, columns: dict, record: dict):
  """One row per grid point of `columns` (GRID_KEYS -> arrays), each naming
  the run's commit and CPU from `record`."""
  with open(path, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(list(GRID_KEYS) + ['commit', 'cpu'])
    for row in zip(*(columns[k] for k in GRID_KEYS)):
      writer.writerow([f'{v:.6g}' for v in row] +
                      [record.get('commit'), record.get('cpu')])


def _stop(proc):
  """SIGTERM, so that a launcher stops its nodes (no orphans); killed only
  if it has not stopped `_STOP_GRACE_S` later."""
  proc.send_signal(signal.SIGTERM)
  try:
    proc.wait(timeout=_STOP_GRACE_S)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()


def run_program(cmd, timeout_s=None, heartbeat=None, **popen_kwargs):
  """Runs `cmd` to its end; returns its exit code, or None when it outlived
  `timeout_s` and was stopped (`_stop`). A SIGTERM to this process stops
  the program the same way before this process exits (1, naming it), and
  so does Ctrl-C (KeyboardInterrupt, raised again once the program has
  stopped): without it the program's launcher and nodes would outlive the
  benchmark. Any other death of this process sends the program SIGTERM
  (`popen`). `heartbeat()`, if given, is called every `_HEARTBEAT_S` while
  the program runs."""
  proc = popen(cmd, **popen_kwargs)
  # Raised out of the wait below, which then releases the process (a wait
  # inside the handler would block on the one in progress).
  previous = signal.signal(signal.SIGTERM, _raise_terminated)
  deadline = None if timeout_s is None else time.monotonic() + timeout_s
  try:
    while True:
      wait_s = _HEARTBEAT_S if deadline is None else min(
          _HEARTBEAT_S, max(0., deadline - time.monotonic()))
      try:
        return proc.wait(timeout=wait_s)
      except subprocess.TimeoutExpired:
        if deadline is not None and time.monotonic() >= deadline:
          _stop(proc)
          return None
        if heartbeat is not None:
          heartbeat()
  except Terminated as e:
    _stop(proc)
    raise SystemExit(f'{e.code}; stopped {" ".join(cmd[1:2])} '
                     f'(exit {proc.returncode})') from None
  except KeyboardInterrupt:
    _stop(proc)
    raise
  finally:
    signal.signal(signal.SIGTERM, previous)


def _command(cmd):
  """What a record keeps of `cmd`: the program's name and its flags (not
  the interpreter or the checkout it ran from)."""
  return [os.path.basename(cmd[1])] + list(cmd[2:])


def _without_logdir(command):
  """A recorded command without its --logdir: a run directory moved (to
  another checkout or machine) holds the same run."""
  if not isinstance(command, list):
    return command
  return [word for word in command if not str(word).startswith('--logdir=')]


def _write_json(path: str, value) -> None:
  """`value` to `path` whole or not at all (a kill or a crash mid-write
  leaves the previous file)."""
  with open(path + '.tmp', 'w') as f:
    json.dump(value, f, indent=1)
    f.flush()
    os.fsync(f.fileno())
  os.replace(path + '.tmp', path)


def last_log_time(logdir: str) -> float:
  """The unix time of the last write under `logdir/logs` (else `logdir`)."""
  times = [os.path.getmtime(path) for path in glob.glob(
      os.path.join(logdir, 'logs', '**', '*'), recursive=True)]
  return max(times) if times else os.path.getmtime(logdir)


def _alive(segment: dict) -> bool:
  """Whether the benchmark process of `segment` (a launch without an end)
  still runs on this host."""
  pid = segment.get('pid')
  if pid is None or segment.get('host') != socket.gethostname():
    return False
  try:
    # The pid of a process started after the launch is another process.
    return psutil.Process(pid).create_time() <= segment['start'] + 1.
  except psutil.Error:
    return False


def pauses(logdir: str) -> list:
  """[(end, next start)] unix seconds between the launches of the run in
  `logdir` (`run_once(resume=True)`); [] for a run launched once."""
  path = os.path.join(logdir, SEGMENTS)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    segments = json.load(f)['segments']
  return [(a['end'], b['start']) for a, b in zip(segments, segments[1:])
          if a.get('end') is not None]


def _read_segments(label: str, logdir: str, record: dict) -> list:
  """The launches of the unfinished run in `logdir`, each with its end;
  exits naming the run when it has no launch record, was made with other
  settings, or a launch of it still runs."""
  path = os.path.join(logdir, SEGMENTS)
  if not os.path.exists(path):
    raise SystemExit(f'{label}: {logdir} holds an unfinished run without '
                     f'{SEGMENTS} (started by hand or by an older version '
                     'of this script): what ran there cannot be told; '
                     'remove it to start again.')
  with open(path) as f:
    earlier = json.load(f)
  differ = settings_differ(earlier['record'], record)
  if differ:
    raise SystemExit(
        f'{label}: {logdir} holds an unfinished run with other settings '
        f'(earlier, now): {differ}; remove it or use another --logroot.')
  segments = earlier['segments']
  for segment in segments:
    if segment.get('end') is not None:
      continue
    if _alive(segment):
      raise SystemExit(
          f"{label}: a launch of {logdir} still runs (pid {segment['pid']} "
          'on this host); stop it before resuming.')
    # Killed with its benchmark (SIGKILL: no `finally` ran): it ended after
    # its last heartbeat, when its logs were last written (never before it
    # started, whatever a copy did to the files' times).
    end = segment.get('last_seen') or last_log_time(logdir)
    segment.update(end=max(end, segment['start']),
                   exit='killed; end from its last heartbeat or log write')
  return segments


def launches_note(label: str, record: dict):
  """One line on a run made in several launches (`run_once(resume=True)`):
  each launch's commit, CPU and minutes; None for a run launched once."""
  segments = record.get('segments') or []
  if len(segments) < 2:
    return None
  return f'{label} ran in {len(segments)} launches: ' + '; '.join(
      f"{s['commit']} on {s['cpu']}, {(s['end'] - s['start']) / 60:.1f} min"
      for s in segments) + '.'


# Between the commits or CPUs of a run's launches (no comma: benchmarks
# join several runs' commits with one).
_THEN = ' then '


def _joined(values) -> str:
  """'a' for [a, a], 'a then b' for [a, b, b]: a run's commits or CPUs."""
  unique = [v for i, v in enumerate(values) if v not in values[:i]]
  return _THEN.join(str(v) for v in unique)


def run_once(label: str, cmd, logdir: str, timeout_s=None, resume=None,
             **record) -> dict:
  """Runs `cmd` (whose logdir is `logdir`) to its end, or returns the record
  of an earlier finished run there. `label` names the run in messages
  ('minatar.py: Breakout seed 0'); `record` is written with the command,
  exit status, wall seconds, launch commit and CPU. Exits naming the run
  when it fails, outlives `timeout_s` (see `run_program`), when the earlier
  run was made with another command or record, or when `logdir` holds an
  unfinished run and `resume` is not true (None: the benchmark has no
  --resume flag to offer).

  Each launch is recorded in `logdir/SEGMENTS` (commit, CPU, host, pid,
  start, a heartbeat `last_seen`, end, exit). With `resume`, an unfinished
  run (stopped, failed, or killed with its benchmark) is continued: `cmd`
  with `--restore` (the program's own restore from its checkpoints) once
  the program has written its record (`config.json`), else `cmd` afresh, if
  it was launched with the same command (its --logdir aside) and record.
  The finished run's record then sums its launches' wall seconds (each
  launch's start-up and the steps redone after a restore included, the
  time between launches not), names each launch's commit and CPU in order
  ('a then b'), and lists them in `segments`. `timeout_s` is per launch."""
  done = os.path.join(logdir, DONE)
  record = dict(record, command=_command(cmd))
  earlier = finished(logdir)
  if earlier is not None:
    # A record without its command predates the check: what it ran cannot
    # be told, so it is not reused.
    differ = settings_differ(earlier, record)
    if differ:
      raise SystemExit(
          f'{label}: {logdir} holds a finished run with other settings '
          f'(earlier, now): {differ}; remove it or use another --logroot.')
    return earlier
  segments = []
  if os.path.exists(logdir):
    if not resume:
      raise SystemExit(
          f'{label}: {logdir} holds an unfinished run; remove it first' +
          ('.' if resume is None else ', or continue it with --resume.'))
    segments = _read_segments(label, logdir, record)
  # The program's own record: what its --restore needs first.
  restore = os.path.exists(run_record.path_of(logdir))
  launch = list(cmd) + (['--restore'] if restore else [])
  segment = dict(commit=provenance.git_commit(), cpu=provenance.cpu(),
                 host=socket.gethostname(), pid=os.getpid(),
                 start=time.time(), last_seen=None, end=None, exit=None)
  if segments:
    print(f'{label}: launch {len(segments) + 1}, after '
          f'{len(segments)} at {_joined([s["commit"] for s in segments])} '
          f'on {_joined([s["cpu"] for s in segments])}; this one at '
          f'{segment["commit"]} on {segment["cpu"]}.', flush=True)
  print(f'{label}: {" ".join(launch[1:])}', flush=True)
  segments.append(segment)
  path = os.path.join(logdir, SEGMENTS)

  def save(**fields):
    segment.update(fields)
    _write_json(path, dict(record=record, segments=segments))

  os.makedirs(logdir, exist_ok=True)
  save()

  code = 'stopped'
  try:
    code = run_program(launch, timeout_s,
                       heartbeat=lambda: save(last_seen=time.time()))
  finally:
    # Also when this process is stopped (SIGTERM, Ctrl-C): the launch's end
    # is known here, and a resume needs it.
    save(end=time.time(), exit=code if code is not None else 'timeout')
  offer = ' (continue it with --resume)' if resume is not None else ''
  if code is None:
    raise SystemExit(f'{label} ran past {timeout_s:g} s and was stopped; '
                     f'see {logdir}/nodes/{offer}.')
  record = dict(
      record, exit=code,
      wall_seconds=sum(s['end'] - s['start'] for s in segments),
      commit=_joined([s['commit'] for s in segments]),
      cpu=_joined([s['cpu'] for s in segments]), segments=segments)
  if code != 0:
    raise SystemExit(f'{label} exited {code}; see {logdir}/nodes/{offer}.')
  _write_json(done, record)
  return record
