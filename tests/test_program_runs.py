"""benchmarks/program_runs.py: a benchmark's run, done once."""

import importlib.util
import json
import os
import sys
import time

import pytest

import docs_commands

_BENCHMARKS = os.path.join(docs_commands.ROOT, 'benchmarks')
# A benchmark's helper, loaded from its file: the benchmarks directory on
# sys.path would shadow packages (benchmarks/minatar.py).
sys.path.append(_BENCHMARKS)  # Its own import of provenance.
_spec = importlib.util.spec_from_file_location(
    'program_runs', os.path.join(_BENCHMARKS, 'program_runs.py'))
program_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(program_runs)


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
  (logdir / program_runs.DONE).write_text(json.dumps(
      {'seed': 0, 'pbt_interval_steps': 200, 'exit': 0}))
  with pytest.raises(SystemExit, match=r"pbt_interval_steps.*\(200, 100\)"):
    program_runs.run_once('test: b', _python('pass'), str(logdir), seed=0,
                          pbt_interval_steps=100)
  # A setting the earlier record does not name (an older record) is no
  # mismatch.
  assert program_runs.run_once('test: b', _python('pass'), str(logdir),
                               seed=0, lr_factors=[1.])['exit'] == 0


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
