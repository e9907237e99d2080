"""Curves of run directories: the CSV reader's arrays (restored runs, NaN,
missing files), the mean and spread of several runs, the PNGs, and
programs/plot.py end to end. Runs are synthetic CSVs in Acme's layout with
known values."""

import csv
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from acme_impala.launch import curves
from acme_impala.launch import plots

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The learner's columns as programs/impala_lp.py writes them.
LEARNER_COLUMNS = (
    'actor_steps', 'baseline_loss', 'clipped_rho_fraction', 'compile_time_s',
    'entropy', 'entropy_loss', 'grad_norm', 'learner_steps', 'learning_rate',
    'loss', 'mean_advantage', 'mean_rho', 'mean_vs', 'num_valid_steps',
    'policy_lag_max', 'policy_lag_mean', 'policy_loss', 'queue_wait_fraction',
    'rejected_fraction_online', 'rejected_fraction_replay',
    'replay_staleness_mean', 'samples_per_second', 'steps_per_second',
    'timestamp', 'walk_start_fraction')
T0 = 1795472707.8  # Unix seconds of a first learner row.


def _write_csv(path, rows, columns=None):
  """Writes dict rows as Acme's CSVLogger does ('nan' for missing)."""
  columns = columns or list(rows[0])
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(columns)
    for row in rows:
      writer.writerow([row.get(c, math.nan) for c in columns])


def _learner_rows(num_rows, rate=500., chunk=1000, start_steps=0, t0=T0,
                  scale=1.):
  """A row a second; env steps in the counter's chunks at `rate` per s."""
  rows = []
  for i in range(num_rows):
    entropy = 0.69 * math.exp(-i / 50)
    rows.append({
        'actor_steps': start_steps + chunk * math.floor(rate * (i + 1) /
                                                        chunk),
        'timestamp': t0 + i,
        'learner_steps': 1 + 10 * i,
        'policy_loss': scale * math.sin(i / 5),
        'baseline_loss': scale * 5. * math.exp(-i / 8),  # 5 -> ~1e-3.
        'entropy_loss': -0.01 * entropy,
        'entropy': entropy,
        'loss': 1.,
        'learning_rate': 2e-3,
        'steps_per_second': 10.,
        'samples_per_second': 80.,
    })
  return rows


def _make_run(logdir, prefix='', num_rows=60, returns=None, actors=2,
              evaluator=True, scale=1., rate=500.):
  """A finished run's CSV logs under `<logdir>/logs/<prefix>`."""
  logs = os.path.join(logdir, 'logs', prefix)
  _write_csv(os.path.join(logs, 'learner', 'logs.csv'),
             _learner_rows(num_rows, scale=scale, rate=rate),
             LEARNER_COLUMNS)
  if returns is None:
    returns = [10. * (i + 1) for i in range(num_rows // 2)]
  if evaluator:
    _write_csv(os.path.join(logs, 'evaluator', 'logs.csv'), [
        {'actor_steps': 1000 * i, 'episode_length': r, 'episode_return': r,
         'learner_steps': 10 * i, 'steps_per_second': 400.}
        for i, r in enumerate(returns)])
  for a in range(actors):
    _write_csv(os.path.join(logs, f'actor_{a}', 'logs.csv'), [
        {'actor_steps': 500 * i, 'episode_length': 20 + i + a,
         'episode_return': 20. + i + a, 'steps_per_second': 1200.}
        for i in range(num_rows)])
  return logdir


def _png_size(path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  with Image.open(path) as image:
    image.load()
    return image.size


EXPECTED_SIZE = (int(plots.FIGSIZE[0] * plots.DPI),
                 int(plots.FIGSIZE[1] * plots.DPI))


def test_import_does_not_load_matplotlib():
  out = subprocess.run(
      [sys.executable, '-c', 'import sys, acme_impala.launch.curves; '
       'print("matplotlib" in sys.modules)'],
      capture_output=True, text=True, cwd=ROOT, timeout=120)
  assert out.stdout.strip() == 'False', out.stderr


def test_read_csv_tolerates_missing_empty_nan_and_cut_rows(tmp_path):
  assert curves.read_csv(str(tmp_path / 'missing.csv')) == {}
  (tmp_path / 'empty.csv').write_text('')
  assert curves.read_csv(str(tmp_path / 'empty.csv')) == {}
  (tmp_path / 'header.csv').write_text('actor_steps,episode_return\n')
  columns = curves.read_csv(str(tmp_path / 'header.csv'))
  assert set(columns) == {'actor_steps', 'episode_return'}
  assert columns['actor_steps'].shape == (0,)
  # A restored run's 'nan', an empty cell, and a last line cut short.
  (tmp_path / 'log.csv').write_text(
      'actor_steps,episode_return\n0,1.5\n1000,nan\n2000,\n3000,x\n4000')
  columns = curves.read_csv(str(tmp_path / 'log.csv'))
  np.testing.assert_array_equal(columns['actor_steps'], [0, 1000, 2000, 3000])
  np.testing.assert_array_equal(columns['episode_return'],
                                [1.5, np.nan, np.nan, np.nan])


def test_moving_mean_is_trailing_and_skips_nan():
  np.testing.assert_allclose(
      curves.moving_mean(np.array([0., 10, 20, 30, 40]), 3),
      [0, 5, 10, 20, 30])
  np.testing.assert_allclose(
      curves.moving_mean(np.array([np.nan, 2., np.nan, 4., np.nan, np.nan,
                                   np.nan]), 2),
      [np.nan, 2, 2, 4, 4, np.nan, np.nan])
  assert curves.moving_mean(np.zeros(0), 10).shape == (0,)


def test_kept_rows_drops_what_a_restore_did_again():
  # Restored at 2000 env steps after logging up to 4000; a NaN row.
  steps = np.array([1000., 2000, 3000, 4000, 2000, 3000, np.nan, 5000])
  np.testing.assert_array_equal(
      curves.kept_rows(steps),
      [True, True, False, False, True, True, False, True])


def test_steps_per_second_from_known_timestamps():
  # 500 env steps/s counted in chunks of 1000: the counter moves every 2 s.
  times = T0 + np.arange(100.)
  steps = 1000. * np.floor(500. * (np.arange(100) + 1) / 1000.)
  rate = curves.steps_per_second(steps, times, window_s=30.)
  assert np.isnan(rate[:3]).all()  # Rows 1 and 3 are the first changes.
  np.testing.assert_allclose(rate[3:], 500.)
  # A 1 s window holds a single change: no rate.
  assert np.isnan(curves.steps_per_second(steps, times, window_s=1.)).all()
  # A stop of 1000 s, then 250 env steps/s: not measured across the stop.
  times2 = times[-1] + 1000. + np.arange(50.)
  steps2 = steps[-1] + 1000. * np.floor(250. * (np.arange(50) + 1) / 1000.)
  rate = curves.steps_per_second(np.concatenate([steps, steps2]),
                                 np.concatenate([times, times2]))
  np.testing.assert_allclose(rate[3:100], 500.)
  # The counter moves every 4 s: rows 103 and 107 are its first changes.
  assert np.isnan(rate[100:107]).all()
  np.testing.assert_allclose(rate[107:], 250.)


def test_running_seconds_leave_out_the_pauses():
  times = T0 + np.array([0., 1, 2, 3, 4, 1004, 1006, 1008, np.nan, 1010])
  np.testing.assert_allclose(curves.running_seconds(times), times - T0)
  # Down from 5 s to 1000 s: the 995 s are left out from there on; a pause
  # before the first row, or one that is empty, leaves nothing out.
  pauses = [(T0 - 50, T0 - 10), (T0 + 5, T0 + 1000), (T0 + 1009, T0 + 1009)]
  np.testing.assert_allclose(
      curves.running_seconds(times, pauses),
      [0, 1, 2, 3, 4, 9, 11, 13, np.nan, 15])
  # A row inside a pause counts the pause's time up to it as down.
  np.testing.assert_allclose(
      curves.running_seconds([0., 10, 15, 30], [(10., 20.)]), [0, 10, 10, 20])
  assert np.isnan(curves.running_seconds([np.nan, np.nan])).all()
  assert curves.running_seconds([]).shape == (0,)


def test_read_run_arrays(tmp_path):
  returns = [float(r) for r in range(1, 26)]
  logdir = _make_run(str(tmp_path / 'run'), returns=returns)
  run = curves.read_run(logdir)
  assert run.name == 'run' and run.episode_source == 'evaluator'
  np.testing.assert_array_equal(run.episode_steps, 1000. * np.arange(25))
  np.testing.assert_array_equal(run.episode_returns, returns)
  assert run.return_window == curves.RETURN_WINDOW == 10
  # Mean of the last 10 returns (of all so far, for the first 9).
  expected = [np.mean(returns[max(0, i - 9):i + 1]) for i in range(25)]
  np.testing.assert_allclose(run.return_mean, expected)
  assert run.return_mean[-1] == np.mean(range(16, 26))
  rows = _learner_rows(60)
  np.testing.assert_array_equal(run.env_steps,
                                [r['actor_steps'] for r in rows])
  for key in curves.LEARNER_KEYS:
    np.testing.assert_allclose(run.learner[key], [r[key] for r in rows])
  np.testing.assert_allclose(run.seconds, np.arange(60.), atol=1e-6)
  np.testing.assert_allclose(run.steps_per_second[3:], 500., rtol=1e-6)


def test_read_run_of_a_restored_run_with_nan(tmp_path):
  logdir = str(tmp_path / 'restored')
  first = _learner_rows(20)  # Up to 10000 env steps.
  # Restored from a checkpoint at 6000 env steps, 300 s later.
  second = _learner_rows(20, start_steps=6000, t0=T0 + 320)
  second[5]['entropy'] = math.nan
  _write_csv(os.path.join(logdir, 'logs', 'learner', 'logs.csv'),
             first + second, LEARNER_COLUMNS)
  run = curves.read_run(logdir)
  assert np.all(np.diff(run.env_steps) >= 0)
  assert run.env_steps.max() == 16000
  # The first life up to 6000 env steps (its rows 0-12), then the second.
  assert len(run.env_steps) == 13 + 20
  np.testing.assert_array_equal(run.env_steps[11:15], [6000] * 3 + [7000])
  assert np.isnan(run.learner['entropy'][13 + 5])
  assert run.seconds[-1] == pytest.approx(320 + 19, abs=1e-6)
  # No rate across the stop: the second life's starts at its second change.
  assert np.isnan(run.steps_per_second[13:16]).all()
  np.testing.assert_allclose(run.steps_per_second[16:], 500., rtol=1e-6)
  assert run.episode_source == ''  # Neither evaluator nor actor logs.
  assert run.episode_steps.shape == (0,)
  assert _png_size(plots.write_run_curves(logdir)) == EXPECTED_SIZE
  assert run.start_time == T0
  # On a grid, the time between its launches is left out: the first ended
  # at 20 s, the second started at 310 s (its first row at 320 s), so the
  # second life's row i is at 30 + i s (8,000 env steps at its rows 3
  # and 4).
  grid = curves.run_on_grid(logdir, points=2, train_window=4, eval_window=2,
                            pauses=[(T0 + 20, T0 + 310)])
  np.testing.assert_allclose(grid['env_steps'], [0, 8000, 16000])
  assert 30 + 3 <= grid['wall_seconds'][1] <= 30 + 4
  assert grid['wall_seconds'][2] == pytest.approx(30 + 19, abs=1e-6)
  # Without its pauses: the time down included.
  grid = curves.run_on_grid(logdir, points=2, train_window=4, eval_window=2)
  assert grid['wall_seconds'][2] == pytest.approx(320 + 19, abs=1e-6)


def test_learner_log_without_env_steps_is_no_curve(tmp_path):
  logdir = _make_run(str(tmp_path / 'run'), actors=0)
  _write_csv(os.path.join(logdir, 'logs', 'learner', 'logs.csv'),
             [{'learner_steps': 1, 'loss': 0.5}])
  run = curves.read_run(logdir)
  assert run.env_steps.shape == (0,)
  assert run.learner['entropy'].shape == (0,)
  assert len(run.episode_steps) == 30


@pytest.mark.parametrize('evaluator', ['absent', 'header only'])
def test_missing_evaluator_uses_actor_episodes(tmp_path, evaluator):
  logdir = _make_run(str(tmp_path / 'noeval'), evaluator=False, actors=2,
                     num_rows=30)
  if evaluator == 'header only':  # Started, no episode finished yet.
    _write_csv(os.path.join(logdir, 'logs', 'evaluator', 'logs.csv'), [],
               ['actor_steps', 'episode_length', 'episode_return'])
  run = curves.read_run(logdir)
  assert run.episode_source == 'actors'
  assert run.return_window == curves.ACTOR_RETURN_WINDOW
  assert len(run.episode_steps) == 60  # Both actors' episodes, merged.
  assert np.all(np.diff(run.episode_steps) >= 0)
  # At each env-step count actor_0's episode comes before actor_1's.
  np.testing.assert_array_equal(run.episode_returns[:4], [20, 21, 21, 22])
  path = plots.write_run_curves(logdir)
  assert path == os.path.join(logdir, 'curves.png')
  assert _png_size(path) == EXPECTED_SIZE


def test_nothing_to_plot_names_the_logdir(tmp_path):
  missing = str(tmp_path / 'missing')
  with pytest.raises(ValueError, match='missing: no such run directory'):
    curves.read_run(missing)
  empty = str(tmp_path / 'empty')
  os.makedirs(os.path.join(empty, 'logs', 'learner'))
  open(os.path.join(empty, 'logs', 'learner', 'logs.csv'), 'w').close()
  with pytest.raises(ValueError, match='empty: nothing to plot'):
    plots.write_run_curves(empty)
  with pytest.raises(ValueError, match='empty: nothing to plot'):
    plots.plot_runs([_make_run(str(tmp_path / 'good')), empty],
                     str(tmp_path / 'out.png'))


def test_write_run_curves_writes_a_png(tmp_path):
  from matplotlib import image  # pylint: disable=g-import-not-at-top
  logdir = _make_run(str(tmp_path / 'run'))
  out = str(tmp_path / 'figures' / 'run.png')
  assert plots.write_run_curves(logdir, out) == out
  assert os.path.getsize(out) > 10_000
  assert _png_size(out) == EXPECTED_SIZE
  pixels = image.imread(out)
  assert pixels.shape[:2] == EXPECTED_SIZE[::-1]
  assert pixels.std() > 0.05  # Not a blank canvas.


def test_sweep_layout(tmp_path):
  logdir = str(tmp_path / 'sweep')
  _make_run(logdir, prefix='agent_0', num_rows=40)
  _make_run(logdir, prefix='agent_1', num_rows=50, evaluator=False)
  # An agent that has not logged yet is left out.
  os.makedirs(os.path.join(logdir, 'logs', 'agent_2', 'learner'))
  assert curves.agent_names(logdir) == ['agent_0', 'agent_1', 'agent_2']
  runs = curves.read_agents(logdir)
  assert [r.name for r in runs] == ['sweep/agent_0', 'sweep/agent_1']
  assert [r.episode_source for r in runs] == ['evaluator', 'actors']
  assert len(runs[1].env_steps) == 50
  with pytest.raises(ValueError, match='a sweep of 3 agents'):
    curves.read_run(logdir)
  with pytest.raises(ValueError, match='no logs/agent_7'):
    curves.read_run(logdir, agent=7)
  path = plots.write_run_curves(logdir)
  assert _png_size(path) == EXPECTED_SIZE
  other = _make_run(str(tmp_path / 'sweep2'), prefix='agent_0')
  _make_run(other, prefix='agent_1')
  out = plots.plot_runs([logdir, other], str(tmp_path / 'sweeps.png'))
  assert _png_size(out) == EXPECTED_SIZE


def test_mean_and_spread_on_the_common_grid():
  # Run k is y = k * x, sampled differently, over different ranges.
  x1 = np.linspace(0., 1000., 11)
  x2 = np.linspace(100., 1200., 12)
  x3 = np.array([0., 300., 600., 900.])
  spread = curves.mean_and_spread(
      [(x1, 1. * x1), (x2, 2. * x2), (x3, 3. * x3)], num_points=9)
  # Only where every run has data: [100, 900].
  np.testing.assert_allclose(spread.x, np.linspace(100., 900., 9))
  np.testing.assert_allclose(spread.mean, 2. * spread.x)
  np.testing.assert_allclose(spread.low, spread.x)
  np.testing.assert_allclose(spread.high, 3. * spread.x)
  assert spread.values.shape == (3, 9)
  np.testing.assert_allclose(spread.values[1], 2. * spread.x)


def test_mean_and_spread_ignores_nan_repeats_and_empty_runs():
  x = np.array([0., 10., 10., 20., np.nan, 30.])
  y = np.array([0., 5., 10., 20., 1., np.nan])  # At x=10 the last, 10.
  spread = curves.mean_and_spread(
      [(x, y), (np.array([0., 20.]), np.array([2., 2.])),
       (np.array([np.nan]), np.array([1.]))], num_points=3)
  np.testing.assert_allclose(spread.x, [0., 10., 20.])
  np.testing.assert_allclose(spread.mean, [1., 6., 11.])
  np.testing.assert_allclose(spread.low, [0., 2., 2.])
  np.testing.assert_allclose(spread.high, [2., 10., 20.])
  # No env steps that every run reached: nothing to average.
  apart = curves.mean_and_spread([(np.array([0., 1.]), np.array([0., 1.])),
                                  (np.array([5., 6.]), np.array([0., 1.]))])
  assert apart.x.shape == (0,) and apart.values.shape == (2, 0)
  assert curves.mean_and_spread([]).x.shape == (0,)


def test_plot_runs_of_three_seeds(tmp_path):
  # A counter change per row: one policy loss per env-step count.
  logdirs = [_make_run(str(tmp_path / f'seed{k}'), scale=k + 1.,
                       num_rows=40 + 10 * k, rate=1000.)
             for k in range(3)]
  out = str(tmp_path / 'seeds.png')
  assert plots.plot_runs(logdirs, out, labels=['a', 'b', 'c']) == out
  assert _png_size(out) == EXPECTED_SIZE
  # The band's numbers: the policy loss, scaled by 1, 2 and 3.
  runs = [curves.read_run(d) for d in logdirs]
  spread = curves.mean_and_spread(
      [(r.env_steps, r.learner['policy_loss']) for r in runs])
  assert spread.x[-1] == min(r.env_steps[-1] for r in runs)
  np.testing.assert_allclose(spread.mean, 2. * spread.values[0], atol=1e-9)
  with pytest.raises(ValueError, match='2 labels for 3 logdirs'):
    plots.plot_runs(logdirs, out, labels=['a', 'b'])


def _plot(args, cwd):
  return subprocess.run(
      [sys.executable, os.path.join(ROOT, 'programs', 'plot.py')] + args,
      capture_output=True, text=True, cwd=cwd, timeout=240)


def test_plot_program(tmp_path):
  logdirs = [_make_run(str(tmp_path / f'seed{k}'), scale=k + 1.)
             for k in range(3)]
  out = str(tmp_path / 'out' / 'seeds.png')
  proc = _plot(logdirs + [f'--output={out}', '--labels=s0,s1,s2'],
               str(tmp_path))
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip().splitlines()[-1] == out
  assert _png_size(out) == EXPECTED_SIZE
  # One LOGDIR, default output: ./curves.png.
  proc = _plot([logdirs[0]], str(tmp_path))
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip() == 'curves.png'
  assert _png_size(str(tmp_path / 'curves.png')) == EXPECTED_SIZE


@pytest.mark.parametrize('bad', ['missing', 'empty'])
def test_plot_program_names_a_bad_logdir(tmp_path, bad):
  good = _make_run(str(tmp_path / 'good'))
  os.makedirs(tmp_path / 'empty' / 'logs' / 'learner')
  (tmp_path / 'empty' / 'logs' / 'learner' / 'logs.csv').write_text(
      ','.join(LEARNER_COLUMNS) + '\n')
  proc = _plot([good, str(tmp_path / bad)], str(tmp_path))
  assert proc.returncode == 2
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('plot: error: ')
  assert str(tmp_path / bad) in lines[0]
  assert not os.path.exists(tmp_path / 'curves.png')


def test_run_on_grid_by_hand(tmp_path):
  """A run of 2 actors (episode i of actor a ends at 500 i steps with
  return 20 + i + a) and 25 evaluator episodes (1000 i, return i + 1), on
  a grid of 4 intervals to the last training episode (29,500 steps)."""
  logdir = _make_run(str(tmp_path / 'run'), returns=[float(r) for r in
                                                      range(1, 26)])
  run = curves.run_on_grid(logdir, points=4, train_window=4, eval_window=2)
  np.testing.assert_allclose(run['env_steps'], [0, 7375, 14750, 22125,
                                                29500])
  # Training episodes merged in step order (actor 0 then 1 at each step):
  # at 7,375 the last ended at 7,000 (i = 14), the last 4 returns being
  # 33, 34 (i = 13) and 34, 35 (i = 14).
  assert run['train_mean'][1] == np.mean([33 + 0, 33 + 1, 34 + 0, 34 + 1])
  # The first grid point has an episode (i = 0, both actors) at 0.
  assert run['train_mean'][0] == np.mean([20., 21.])
  # Evaluator: at 14,750 the last episode was at 14,000 (return 15), the
  # one before 14: 14.5.
  assert run['eval_mean'][2] == 14.5
  # Learner rows: 500 env steps per second from 1,000 at 1 s, 10 learner
  # steps per row, interpolated.
  np.testing.assert_allclose(run['wall_seconds'][2], 14750 / 500 - 1,
                             atol=1.)
  np.testing.assert_allclose(run['learner_steps'][2],
                             np.interp(14750, [r['actor_steps'] for r in
                                               _learner_rows(60)],
                                       [r['learner_steps'] for r in
                                        _learner_rows(60)]))
  steps, means = run['train_curve']
  assert len(steps) == len(means) == 120
