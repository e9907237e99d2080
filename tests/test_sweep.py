"""LASER programs: mixing online and replayed data without deadlock at
f = 0, 0.875 and 1, and a two-agent sweep sharing one replay (test_mt)."""

import csv
import os
import subprocess
import sys

import numpy as np
import pytest

from acme_impala import configs
from acme_impala import sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ['--config.batch_size=8', '--config.unroll_length=10',
         '--config.lstm_size=16', '--config.envs_per_actor=2',
         '--config.max_queue_size=64', '--config.min_replay_size=8',
         '--config.replay_capacity=500']


def _run(program, args, timeout=300):
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'programs', program)] + SMALL + args,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      timeout=timeout, cwd=ROOT)
  return proc.returncode, proc.stdout


def _learner_rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


@pytest.mark.parametrize('f,extra', [
    (0.0, []),
    (0.875, ['--config.kl_threshold=0.5', '--config.entropy_on_online_only=true']),
    (1.0, []),
])
def test_replay_mixing_runs_and_stops_without_deadlock(tmp_path, f, extra):
  """With the default replay_core_state='recompute': replayed rows walk
  episodes (a walk spans several trajectories), and the program ends at its
  budget."""
  logdir = str(tmp_path / f'f{f}')
  rc, out = _run('impala_lp.py', [
      '--lp_launch_type=local_mp', f'--logdir={logdir}', '--num_actors=1',
      # With f = 1 nothing blocks the actors: give the learner time to
      # compile and step before the budget is spent, even on a busy machine.
      f'--max_actor_steps={20000 if f < 1 else 30000}', '--noevaluator',
      f'--config.replay_fraction={f}'] + extra)
  assert rc == 0, out[-4000:]
  rows = _learner_rows(os.path.join(logdir, 'logs', 'learner', 'logs.csv'))
  assert rows and float(rows[-1]['learner_steps']) >= 1
  staleness = [float(r['replay_staleness_mean']) for r in rows]
  walk_starts = [float(r['walk_start_fraction']) for r in rows]
  if f == 0.0:
    assert all(s != s for s in staleness + walk_starts)  # NaN: no replay
    return
  assert any(s == s for s in staleness)  # logged (not NaN) with replay
  walk_starts = [w for w in walk_starts if w == w]
  assert walk_starts and np.mean(walk_starts) < 0.9
  if f == 1.0:
    assert 'Proposition 2' in out
    assert all(r['rejected_fraction_online'] == 'nan' for r in rows)


def test_sweep_program_graph_shares_or_separates_replay(tmp_path):
  base = configs.get_config('cartpole').replace(replay_fraction=0.5)
  grid = sweep.sweep_configs(base, [1e-3, 2e-3], [0.01])
  shared = sweep.make_sweep_program(grid, 1, 100, str(tmp_path / 's'))
  separate = sweep.make_sweep_program(grid, 1, 100, str(tmp_path / 'p'),
                                      share_replay=False)
  assert len(shared.groups['replay']) == 1
  assert len(separate.groups['replay']) == 2
  assert {'agent_0_learner', 'agent_1_learner', 'agent_0_actor',
          'agent_1_evaluator', 'coordinator'} <= set(shared.groups)


def test_sweep_validation_names_the_mismatch(tmp_path):
  base = configs.get_config('cartpole').replace(replay_fraction=0.5)
  other = base.replace(lstm_size=32)
  with pytest.raises(ValueError, match='lstm_size=32'):
    sweep.make_sweep_program([base, other], 1, 100, str(tmp_path / 'x'))
  with pytest.raises(ValueError, match="replay_core_state='stored'"):
    sweep.make_sweep_program(
        [base, base.replace(replay_core_state='stored')], 1, 100,
        str(tmp_path / 'z'))
  # 'stored' and 'burn_in' agents read the same trajectories.
  sweep.make_sweep_program(
      [base.replace(replay_core_state='stored'),
       base.replace(replay_core_state='burn_in', burn_in_length=2)], 1, 100,
      str(tmp_path / 'w'))
  with pytest.raises(ValueError, match='replay_fraction=0'):
    sweep.make_sweep_program([base.replace(replay_fraction=0.)], 1, 100,
                             str(tmp_path / 'y'))


def test_two_agents_share_one_replay_under_test_mt(tmp_path):
  logdir = str(tmp_path / 'sweep')
  rc, out = _run('laser_sweep_lp.py', [
      '--lp_launch_type=test_mt', f'--logdir={logdir}',
      '--learning_rates=1e-3,2e-3', '--entropy_costs=0.01',
      '--num_actors=1', '--max_actor_steps=2000',
      '--config.kl_threshold=1.0', '--config.anneal_learning_rate=true'])
  assert rc == 0, out[-4000:]
  # f = 0.875 of batch 8: one online trajectory of 10 steps per learner step,
  # so the 2000-step budget is 200 learner steps for each agent.
  horizon = 2000 // (1 * 10)
  for i, base_lr in enumerate((1e-3, 2e-3)):
    assert (f'agent_{i}: learning_rate={base_lr} entropy_cost=0.01 '
            f'replay_fraction=0.875 kl_threshold=1.0 '
            f'lr_anneal_steps={horizon}') in out
    rows = _learner_rows(os.path.join(logdir, 'logs', f'agent_{i}',
                                      'learner', 'logs.csv'))
    assert rows and float(rows[-1]['learner_steps']) >= 1
    for row in rows:
      # The rate of step s (logged after it) is lr * (1 - (s - 1) / H).
      step = float(row['learner_steps'])
      expected = base_lr * max(0., 1. - (step - 1) / horizon)
      np.testing.assert_allclose(float(row['learning_rate']), expected,
                                 rtol=1e-5, atol=1e-9)
    assert os.path.exists(os.path.join(logdir, 'logs', f'agent_{i}',
                                       'evaluator', 'logs.csv'))
  assert 'share_replay=True' in out
  assert 'laser_sweep: all nodes stopped; exiting with status 0.' in out
