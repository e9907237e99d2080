"""The Launchpad program: test_mt graph, local_mp runs, restore, failures.

These start real Reverb servers and Launchpad programs on free ports and
check that they finish, write their logs, and leave no process behind.
"""

import csv
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from acme_impala import lifecycle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
SMALL = ['--config.batch_size=8', '--config.unroll_length=10',
         '--config.lstm_size=16', '--config.envs_per_actor=2',
         '--config.max_queue_size=64']


def _rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def _run(args, logdir, timeout=240, env_extra=None):
  """Runs programs/impala_lp.py in its own session; returns (rc, output)."""
  env = dict(os.environ)
  env.update(env_extra or {})
  proc = subprocess.Popen(
      [PYTHON, os.path.join(ROOT, 'programs', 'impala_lp.py'),
       f'--logdir={logdir}'] + SMALL + args,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
      start_new_session=True, text=True)
  try:
    out, _ = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    pytest.fail(f'program did not finish within {timeout} s:\n{out[-5000:]}')
  return proc.returncode, out, proc.pid


def _session_processes(sid):
  """Processes still alive in the launcher's session (orphans)."""
  left = []
  for p in psutil.process_iter(['pid', 'cmdline']):
    try:
      if os.getsid(p.info['pid']) == sid and p.status() != 'zombie':
        left.append(p.info)
    except (ProcessLookupError, psutil.Error, PermissionError):
      pass
  return left


def test_make_program_runs_under_test_mt(tmp_path):
  import launchpad as lp  # pylint: disable=g-import-not-at-top
  from acme_impala import configs  # pylint: disable=g-import-not-at-top
  from acme_impala import program as program_lib  # pylint: disable=g-import-not-at-top
  config = configs.get_config('cartpole').replace(
      batch_size=8, unroll_length=10, lstm_size=16, envs_per_actor=2,
      max_queue_size=64)
  logdir = str(tmp_path / 'mt')
  program = program_lib.make_program(config, num_actors=2,
                                     max_actor_steps=3000, logdir=logdir)
  assert isinstance(program, lp.Program)
  assert set(program.groups) == {'replay', 'counter', 'coordinator',
                                 'learner', 'actor', 'evaluator'}
  assert program_lib.launch_and_wait(program, logdir, 'test_mt') == 0
  learner = _rows(os.path.join(logdir, 'logs', 'learner', 'logs.csv'))
  assert learner and float(learner[-1]['learner_steps']) >= 1
  for key in ('loss', 'policy_loss', 'baseline_loss', 'entropy'):
    assert key in learner[-1]
  for i in range(2):
    actor = _rows(os.path.join(logdir, 'logs', f'actor_{i}', 'logs.csv'))
    assert actor and 'episode_return' in actor[0]
  evaluator = _rows(os.path.join(logdir, 'logs', 'evaluator', 'logs.csv'))
  assert evaluator and {'actor_steps', 'episode_return'} <= set(evaluator[0])
  assert not lifecycle.read_failures(os.path.join(logdir, 'status'))


@pytest.fixture(scope='module')
def first_run(tmp_path_factory):
  logdir = str(tmp_path_factory.mktemp('mp') / 'run')
  rc, out, pid = _run(['--num_actors=2', '--max_actor_steps=4000'], logdir)
  return logdir, rc, out, pid


def test_local_mp_run_exits_0_writes_csv_and_leaves_no_process(first_run):
  logdir, rc, out, pid = first_run
  assert rc == 0, out[-5000:]
  assert 'exiting with status 0' in out
  for label in ('learner', 'actor_0', 'actor_1', 'evaluator'):
    path = os.path.join(logdir, 'logs', label, 'logs.csv')
    assert os.path.exists(path), label
  time.sleep(1)
  assert _session_processes(pid) == []
  assert os.listdir(os.path.join(logdir, 'tensorboard'))


def test_restore_continues_learner_steps(first_run):
  logdir, rc, out, _ = first_run
  assert rc == 0, out[-3000:]
  before = _rows(os.path.join(logdir, 'logs', 'learner', 'logs.csv'))
  last_step = max(float(r['learner_steps']) for r in before)
  assert last_step >= 1
  rc, out, pid = _run(['--num_actors=1', '--max_actor_steps=8000',
                       '--restore'], logdir)
  assert rc == 0, out[-5000:]
  after = _rows(os.path.join(logdir, 'logs', 'learner', 'logs.csv'))
  new_rows = after[len(before):]
  assert new_rows, out[-3000:]
  # The checkpoint is written at stop, after the last logged step.
  assert float(new_rows[0]['learner_steps']) >= last_step + 1
  assert f'starting at learner step {int(last_step)}' in out or (
      'starting at learner step' in out)
  assert _session_processes(pid) == []


def test_without_restore_an_existing_logdir_is_refused(first_run):
  logdir, _, _, _ = first_run
  rc, out, _ = _run(['--max_actor_steps=100'], logdir, timeout=120)
  assert rc == 2
  assert 'already holds checkpoints' in out and '--restore' in out


def test_failing_node_stops_program_with_message(tmp_path):
  logdir = str(tmp_path / 'fail')
  rc, out, pid = _run(['--num_actors=2', '--max_actor_steps=1000000'],
                      logdir, env_extra={
                          lifecycle.INJECT_FAILURE_ENV: 'actor_1'})
  assert rc == 1, out[-5000:]
  assert "node 'actor_1' failed: InjectedFailure" in out
  time.sleep(1)
  assert _session_processes(pid) == []


@pytest.mark.parametrize('node', ['actor_0', 'learner'])
def test_node_failing_in_construction_stops_program(tmp_path, node):
  """A node that raises before it runs (e.g. in its environment's or
  network's constructor) must not leave the rest of the program waiting."""
  logdir = str(tmp_path / 'fail_construct')
  rc, out, pid = _run(['--num_actors=1', '--max_actor_steps=1000000',
                       '--noevaluator'], logdir, timeout=180, env_extra={
                           lifecycle.INJECT_FAILURE_ENV: f'{node}:construct'})
  assert rc == 1, out[-5000:]
  assert f"node '{node}' failed: InjectedFailure" in out
  assert 'construction' in out
  time.sleep(1)
  assert _session_processes(pid) == []


def test_bad_config_fails_before_any_process(tmp_path):
  logdir = str(tmp_path / 'bad')
  rc, out, _ = _run(['--config.discount=2.0'], logdir, timeout=120)
  assert rc == 2
  assert 'IMPALAConfig.discount=2.0' in out
  assert not os.path.exists(os.path.join(logdir, 'logs'))
  rc, out, _ = _run(['--config.env_id=NoSuchGame-v0'], logdir, timeout=120)
  assert rc == 2 and "'NoSuchGame-v0'" in out and 'CartPole-v1' in out
