"""benchmarks/program_runs.py: a benchmark's run, done once."""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import docs_commands

_BENCHMARKS = os.path.join(docs_commands.ROOT, 'benchmarks')


def _load(name):
  # A benchmark's helper, loaded from its file: the benchmarks directory on
  # sys.path would shadow packages (benchmarks/minatar.py).
  spec = importlib.util.spec_from_file_location(
      name, os.path.join(_BENCHMARKS, f'{name}.py'))
  module = sys.modules[name] = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


_load('provenance')  # program_runs's own import.
program_runs = _load('program_runs')


def _python(code):
  return [sys.executable, '-c', code]


def test_a_finished_run_is_recorded_and_not_run_again(tmp_path):
  logdir = tmp_path / 'run'
  marker = tmp_path / 'ran'
  cmd = _python(f'import os; os.makedirs({str(logdir)!r}, exist_ok=True); '
                f'open({str(marker)!r}, "a").write("x")')
  record = program_runs.run_once('test: a', cmd, str(logdir), seed=0, game='G')
  assert record['exit'] == 0 and record['seed'] == 0
  again = program_runs.run_once('test: a', cmd, str(logdir), seed=0, game='G')
  assert again == json.loads((logdir / program_runs.DONE).read_text())
  assert marker.read_text() == 'x'  # Ran once.


def test_a_finished_run_with_other_settings_is_refused(tmp_path):
  logdir = tmp_path / 'run'
  logdir.mkdir()
  cmd = _python('pass')
  (logdir / program_runs.DONE).write_text(json.dumps(
      {'seed': 0, 'pbt_interval_steps': 200, 'exit': 0,
       'command': ['-c', 'pass']}))
  with pytest.raises(SystemExit, match=r"pbt_interval_steps.*\(200, 100\)"):
    program_runs.run_once('test: b', cmd, str(logdir), seed=0,
                          pbt_interval_steps=100)
  # The same record with another command (a flag the record does not name).
  with pytest.raises(SystemExit, match=r"command.*'pass'.*'pass; 1'"):
    program_runs.run_once('test: b', _python('pass; 1'), str(logdir),
                          seed=0, pbt_interval_steps=200)
  assert program_runs.run_once('test: b', cmd, str(logdir), seed=0,
                               pbt_interval_steps=200)['exit'] == 0


def test_a_record_without_its_command_is_not_reused(tmp_path):
  logdir = tmp_path / 'run'
  logdir.mkdir()
  (logdir / program_runs.DONE).write_text(json.dumps({'seed': 0, 'exit': 0}))
  with pytest.raises(SystemExit, match="command.*'not recorded'"):
    program_runs.run_once('test: d', _python('pass'), str(logdir), seed=0)


def test_a_run_past_its_timeout_is_stopped_with_sigterm(tmp_path):
  logdir = tmp_path / 'run'
  stopped = tmp_path / 'stopped'
  # A launcher that stops its nodes on SIGTERM: here, writes that it did.
  code = ('import signal, sys, time\n'
          'def stop(*_):\n'
          f'  open({str(stopped)!r}, "w").write("stopped"); sys.exit(1)\n'
          'signal.signal(signal.SIGTERM, stop)\n'
          'time.sleep(60)\n')
  start = time.time()
  with pytest.raises(SystemExit, match='ran past 3 s and was stopped'):
    program_runs.run_once('test: c', _python(code), str(logdir), timeout_s=3)
  assert time.time() - start < 30
  assert stopped.read_text() == 'stopped'
  assert not (logdir / program_runs.DONE).exists()


def _resumable_program(logdir):
  """A program that logs its argv, then does what `logdir`/../mode says:
  'fail' (exit 2 before writing its record, config.json), 'finish' (its
  record, exit 0: its budget reached), else its record and running until
  SIGTERM (exit 1). With --restore it finishes."""
  mode = logdir.parent / 'mode'
  return _python(
      'import os, signal, sys, time\n'
      f'os.makedirs({str(logdir / "logs")!r}, exist_ok=True)\n'
      f'open({str(logdir / "logs" / "argv")!r}, "a").write('
      '" ".join(sys.argv[1:]) + "\\n")\n'
      f'mode = open({str(mode)!r}).read() if os.path.exists({str(mode)!r}) '
      'else ""\n'
      'if mode == "fail": sys.exit(2)\n'
      f'open({str(logdir / "config.json")!r}, "w").write("{{}}")\n'
      'if "--restore" in sys.argv or mode == "finish": sys.exit(0)\n'
      'signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))\n'
      'time.sleep(60)\n')


def _argv(logdir):
  return (logdir / 'logs' / 'argv').read_text().splitlines()


def test_a_stopped_run_is_continued_with_resume(tmp_path, monkeypatch):
  monkeypatch.setattr(program_runs, '_HEARTBEAT_S', 0.5)
  logdir = tmp_path / 'run'
  cmd = _resumable_program(logdir)
  with pytest.raises(SystemExit, match=r'ran past 5 s.*--resume'):
    program_runs.run_once('test: r', cmd, str(logdir), timeout_s=5, seed=3,
                          resume=False)
  segments = json.loads((logdir / program_runs.SEGMENTS).read_text())
  assert segments['record']['seed'] == 3
  [first] = segments['segments']
  assert first['exit'] == 'timeout' and first['end'] - first['start'] >= 5
  assert first['start'] < first['last_seen'] < first['end']  # Heartbeats.
  with pytest.raises(SystemExit, match='unfinished run; remove it first, '
                     'or continue it with --resume'):
    program_runs.run_once('test: r', cmd, str(logdir), seed=3, resume=False)
  # A benchmark without --resume offers none.
  with pytest.raises(SystemExit, match='unfinished run; remove it first.$'):
    program_runs.run_once('test: r', cmd, str(logdir), seed=3)
  with pytest.raises(SystemExit, match=r"other settings.*seed.*\(3, 4\)"):
    program_runs.run_once('test: r', cmd, str(logdir), seed=4, resume=True)
  # The same command, moved: its --logdir is not a setting.
  moved = cmd + [f'--logdir={tmp_path}/elsewhere']
  assert not program_runs.settings_differ(
      dict(command=program_runs._command(cmd + ['--logdir=/a/b'])),
      dict(command=program_runs._command(moved)))
  record = program_runs.run_once('test: r', cmd, str(logdir), seed=3,
                                 resume=True)
  # The program ran twice, the second time restoring.
  assert _argv(logdir) == ['', '--restore']
  assert record['exit'] == 0 and len(record['segments']) == 2
  assert record['segments'][0] == first
  assert record['wall_seconds'] == pytest.approx(sum(
      s['end'] - s['start'] for s in record['segments']))
  # One commit and CPU, named once.
  assert record['commit'] == first['commit']
  assert record['cpu'] == first['cpu']
  assert program_runs.pauses(str(logdir)) == [
      (first['end'], record['segments'][1]['start'])]
  note = program_runs.launches_note('Seed 3', record)
  assert note.startswith('Seed 3 ran in 2 launches: ') and ' min; ' in note
  # Finished: not run again, with or without --resume.
  assert program_runs.run_once('test: r', cmd, str(logdir), seed=3,
                               resume=True) == record


def test_a_launch_that_failed_before_its_record_is_launched_afresh(
    tmp_path):
  logdir = tmp_path / 'run'
  cmd = _resumable_program(logdir)
  (tmp_path / 'mode').write_text('fail')
  with pytest.raises(SystemExit, match=r'exited 2.*--resume'):
    program_runs.run_once('test: f', cmd, str(logdir), seed=0, resume=True)
  # No config.json: nothing to restore, so no --restore.
  (tmp_path / 'mode').write_text('finish')
  record = program_runs.run_once('test: f', cmd, str(logdir), seed=0,
                                 resume=True)
  assert _argv(logdir) == ['', '']
  assert [s['exit'] for s in record['segments']] == [2, 0]


def _killed_launch(logdir, cmd, start, **fields):
  """The record of a launch killed with its benchmark (no end)."""
  (logdir / program_runs.SEGMENTS).write_text(json.dumps(dict(
      record=dict(seed=0, command=program_runs._command(cmd)),
      segments=[dict(dict(commit='abc1234', cpu='Old CPU', start=start,
                          end=None, exit=None), **fields)])))


def test_a_launch_killed_without_its_end_ends_at_its_last_log(tmp_path):
  """A launch killed with its benchmark (SIGKILL: no `finally` ran) has
  no end recorded; a resume takes its last heartbeat, else its last log
  write, never before its start."""
  logdir = tmp_path / 'run'
  cmd = _resumable_program(logdir)
  (tmp_path / 'mode').write_text('finish')
  (logdir / 'logs').mkdir(parents=True)
  (logdir / 'logs' / 'learner.csv').write_text('x\n')
  os.utime(logdir / 'logs' / 'learner.csv', (1000. + 600, 1000. + 600))
  _killed_launch(logdir, cmd, 1000.)
  (logdir / 'config.json').write_text('{}')
  record = program_runs.run_once('test: k', cmd, str(logdir), seed=0,
                                 resume=True)
  killed, second = record['segments']
  assert killed['end'] == 1600. and 'killed' in killed['exit']
  assert record['wall_seconds'] == pytest.approx(
      600. + second['end'] - second['start'])
  assert record['commit'] == f"abc1234 then {second['commit']}"
  assert record['cpu'] == f"Old CPU then {second['cpu']}"
  assert _argv(logdir) == ['--restore']
  for fields, end in ((dict(last_seen=1300.), 1300.),  # Its heartbeat.
                      (dict(), 2000.)):  # Logs older than its start.
    other = tmp_path / f'run_{end:g}'
    (other / 'logs').mkdir(parents=True)
    (other / 'logs' / 'learner.csv').write_text('x\n')
    os.utime(other / 'logs' / 'learner.csv', (1600., 1600.))
    _killed_launch(other, cmd, 1000. if fields else 2000., **fields)
    record = program_runs.run_once('test: k', cmd, str(other), seed=0,
                                   resume=True)
    assert record['segments'][0]['end'] == end


def test_resume_while_a_launch_still_runs_is_refused(tmp_path):
  logdir = tmp_path / 'run'
  logdir.mkdir()
  cmd = _resumable_program(logdir)
  # This process, started before the launch, stands for its benchmark.
  _killed_launch(logdir, cmd, time.time(), host=socket.gethostname(),
                 pid=os.getpid())
  with pytest.raises(SystemExit, match=f'still runs \\(pid {os.getpid()}'):
    program_runs.run_once('test: a', cmd, str(logdir), seed=0, resume=True)
  assert not (logdir / 'logs').exists()  # Nothing launched.


def test_resume_of_a_logdir_without_launch_records_is_refused(tmp_path):
  logdir = tmp_path / 'run'
  logdir.mkdir()
  with pytest.raises(SystemExit, match='without benchmark_segments.json'):
    program_runs.run_once('test: n', _python('pass'), str(logdir), seed=0,
                          resume=True)


def test_a_benchmark_stopped_with_sigterm_records_its_launch_end(tmp_path):
  """SIGTERM to the benchmark mid-launch: the program is stopped and the
  launch's end and exit ('stopped') are recorded for a resume."""
  logdir = tmp_path / 'run'
  program = ('import os, signal, sys, time\n'
             'signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))\n'
             'os.kill(os.getppid(), signal.SIGTERM)\n'
             'time.sleep(60)\n')
  benchmark = (f'import sys; sys.path.insert(0, {_BENCHMARKS!r})\n'
               'import program_runs\n'
               f'program_runs.run_once("test: s", [sys.executable, "-c", '
               f'{program!r}], {str(logdir)!r}, resume=True)\n')
  done = subprocess.run([sys.executable, '-c', benchmark],
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 1 and 'signal 15; stopped' in done.stderr, (
      done.stderr)
  [launch] = json.loads((logdir / program_runs.SEGMENTS).read_text())[
      'segments']
  assert launch['exit'] == 'stopped' and launch['end'] >= launch['start']


def test_a_program_deaf_to_sigterm_is_killed_after_the_grace(
    tmp_path, monkeypatch):
  monkeypatch.setattr(program_runs, '_STOP_GRACE_S', 2)
  started = tmp_path / 'started'
  code = ('import signal, time\n'
          'signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
          f'open({str(started)!r}, "w").write("x")\n'
          'time.sleep(60)\n')
  start = time.time()
  assert program_runs.run_program(_python(code), timeout_s=3) is None
  assert started.exists()  # It ran, and ignored SIGTERM.
  assert time.time() - start < 30


def test_a_benchmark_stopped_with_sigterm_stops_its_program(tmp_path):
  """SIGTERM to a benchmark that runs a program: the program gets SIGTERM
  (its launcher stops its nodes) and has ended when the benchmark exits,
  naming the signal; nothing outlives it."""
  stopped, pid_file = tmp_path / 'stopped', tmp_path / 'pid'
  program = ('import os, signal, sys, time\n'
             'def stop(*_):\n'
             f'  open({str(stopped)!r}, "w").write("stopped"); sys.exit(1)\n'
             'signal.signal(signal.SIGTERM, stop)\n'
             f'open({str(pid_file)!r}, "w").write(str(os.getpid()))\n'
             'time.sleep(60)\n')
  benchmark = (f'import sys; sys.path.insert(0, {_BENCHMARKS!r})\n'
               'import program_runs\n'
               f'program_runs.run_program([sys.executable, "-c", {program!r}])\n')
  proc = subprocess.Popen([sys.executable, '-c', benchmark],
                          stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.time() + 60
    while not pid_file.exists() or not pid_file.read_text():
      assert time.time() < deadline and proc.poll() is None
      time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
  finally:
    proc.kill()
  assert proc.returncode == 1 and 'signal 15; stopped' in err, err
  assert stopped.read_text() == 'stopped'
  with pytest.raises(ProcessLookupError):
    os.kill(int(pid_file.read_text()), 0)


def _wait_for_text(path, proc, timeout_s=60):
  deadline = time.time() + timeout_s
  while not path.exists() or not path.read_text():
    assert time.time() < deadline and proc.poll() is None
    time.sleep(0.1)
  return path.read_text()


def _program_that_records_sigterm(stopped, pid_file):
  return ('import os, signal, sys, time\n'
          'def stop(*_):\n'
          f'  open({str(stopped)!r}, "w").write("stopped"); sys.exit(1)\n'
          'signal.signal(signal.SIGTERM, stop)\n'
          f'open({str(pid_file)!r}, "w").write(str(os.getpid()))\n'
          'time.sleep(60)\n')


def test_a_program_started_with_popen_stops_when_its_benchmark_is_killed(
    tmp_path):
  """SIGKILL to a benchmark (no handler can run): the program it started
  with `popen` gets SIGTERM from the kernel and stops, instead of living
  on as an orphan."""
  stopped, pid_file = tmp_path / 'stopped', tmp_path / 'pid'
  program = _program_that_records_sigterm(stopped, pid_file)
  benchmark = (f'import sys, time; sys.path.insert(0, {_BENCHMARKS!r})\n'
               'import program_runs\n'
               f'program_runs.popen([sys.executable, "-c", {program!r}])\n'
               'time.sleep(60)\n')
  proc = subprocess.Popen([sys.executable, '-c', benchmark])
  try:
    pid = int(_wait_for_text(pid_file, proc))
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.time() + 30
    while not stopped.exists():
      assert time.time() < deadline, 'the program outlived its benchmark'
      time.sleep(0.1)
  finally:
    proc.kill()
  assert stopped.read_text() == 'stopped'
  deadline = time.time() + 10
  while True:  # Reaped by init once it has exited.
    try:
      os.kill(pid, 0)
    except ProcessLookupError:
      break
    assert time.time() < deadline, f'pid {pid} still runs'
    time.sleep(0.1)


def test_exit_on_sigterm_runs_the_finally_blocks(tmp_path):
  """With `exit_on_sigterm`, SIGTERM ends a benchmark through its `finally`
  blocks (where it stops what it started), with exit 1 naming the signal;
  without it, the interpreter ends on the spot and they never run."""
  for installed in (True, False):
    cleaned, pid_file = tmp_path / f'cleaned_{installed}', tmp_path / f'pid_{installed}'
    benchmark = (f'import os, sys, time; sys.path.insert(0, {_BENCHMARKS!r})\n'
                 'import program_runs\n'
                 + ('program_runs.exit_on_sigterm()\n' if installed else '') +
                 'try:\n'
                 f'  open({str(pid_file)!r}, "w").write(str(os.getpid()))\n'
                 '  time.sleep(60)\n'
                 'finally:\n'
                 f'  open({str(cleaned)!r}, "w").write("cleaned")\n')
    proc = subprocess.Popen([sys.executable, '-c', benchmark],
                            stderr=subprocess.PIPE, text=True)
    try:
      _wait_for_text(pid_file, proc)
      proc.send_signal(signal.SIGTERM)
      _, err = proc.communicate(timeout=30)
    finally:
      proc.kill()
    if installed:
      assert proc.returncode == 1 and 'signal 15' in err, err
      assert cleaned.read_text() == 'cleaned'
    else:
      assert proc.returncode == -signal.SIGTERM
      assert not cleaned.exists()
