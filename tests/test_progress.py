"""The launcher's progress line, read from CSV logs with known values."""

import json
import os

import pytest

from acme_impala.distributed import lifecycle
from acme_impala.launch import progress

LEARNER_COLUMNS = ['actor_steps', 'learner_steps', 'policy_lag_mean',
                   'timestamp']


def _write(logdir, label, columns, rows, tail=''):
  path = os.path.join(logdir, 'logs', label, 'logs.csv')
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    f.write(','.join(columns) + '\n')
    for row in rows:
      f.write(','.join(str(v) for v in row) + '\n')
    f.write(tail)


def test_read_tail_skips_a_partial_last_row_and_parses_nan(tmp_path):
  _write(str(tmp_path), 'learner', ['a', 'b'], [(1, 2), (3, 'nan'), (5, 'x')],
         tail='7,')
  rows = progress.read_tail(os.path.join(tmp_path, 'logs', 'learner',
                                         'logs.csv'))
  assert [r['a'] for r in rows] == [1, 3, 5]
  assert rows[0]['b'] == 2
  assert all(v != v for v in (rows[1]['b'], rows[2]['b']))  # NaN.
  assert progress.read_tail(str(tmp_path / 'missing.csv')) == []


def test_read_tail_of_a_long_file_reads_only_its_end(tmp_path):
  rows = [(i, i * 2) for i in range(60_000)]  # > the 256 KiB tail.
  _write(str(tmp_path), 'learner', ['a', 'b'], rows)
  tail = progress.read_tail(
      os.path.join(tmp_path, 'logs', 'learner', 'logs.csv'), max_rows=5)
  assert [r['a'] for r in tail] == [59_995, 59_996, 59_997, 59_998, 59_999]
  assert tail[-1]['b'] == 119_998


def test_line_reports_steps_rates_return_lag_and_eta(tmp_path):
  logdir = str(tmp_path)
  # 3000 env steps/s and 40 updates/s over the last 30 s.
  _write(logdir, 'learner', LEARNER_COLUMNS,
         [(3000 * t, 40 * t, 1.5, 1000. + t) for t in range(0, 61)])
  _write(logdir, 'evaluator', ['actor_steps', 'episode_return'],
         [(i, float(i)) for i in range(20)])  # Last 10: mean 14.5.
  line = progress.Progress(logdir, 360_000, start_time=1000.).line(now=1061.)
  assert line == ('1m01s | env steps 180k/360k (50%) | 3.0k env steps/s | '
                  '40 updates/s | eval return 14.5 (last 10) | '
                  'policy lag 1.5 | ETA 1m00s')


def test_rates_start_after_a_restore_rolled_the_counts_back(tmp_path):
  logdir = str(tmp_path)
  # A restored learner logs from its checkpoint's counts again: the rate is
  # taken over rows since the step back, not across it.
  rows = [(10_000 + 1000 * t, 0, 1., 100. + t) for t in range(10)]
  rows += [(12_000 + 2000 * t, 0, 1., 200. + t) for t in range(5)]
  _write(logdir, 'learner', LEARNER_COLUMNS, rows)
  status = progress.Progress(logdir, 100_000).agent_status('')
  assert status['env_steps_per_s'] == pytest.approx(2000.)
  assert status['eval_return'] is None


def test_before_the_first_learner_row_the_line_says_starting(tmp_path):
  line = progress.Progress(str(tmp_path), 1000, start_time=0.).line(now=7.)
  assert line == '7s | starting: waiting for the first learner steps'


def _tables(logdir, **sizes):
  """The replay node's report: a queue of 64 and a replay of whole episodes
  sampled from 100 on, at the given sizes."""
  import json  # pylint: disable=g-import-not-at-top
  status = os.path.join(logdir, 'status')
  os.makedirs(status, exist_ok=True)
  with open(os.path.join(status, 'tables-replay.json'), 'w') as f:
    json.dump({
        'priority_table': dict(role='queue', unit='trajectories',
                               size=sizes['queue'], max_size=64,
                               min_to_sample=1),
        'replay': dict(role='replay', unit='episodes', size=sizes['replay'],
                       max_size=10_000, min_to_sample=100)}, f)


def test_a_waiting_learner_is_told_by_the_tables(tmp_path):
  """Issue 35: 'waiting' alone hid a full queue and a replay that could not
  grow; the line names the limits instead."""
  logdir = str(tmp_path)
  _tables(logdir, queue=64, replay=37)
  tracker = progress.Progress(logdir, 360_000, start_time=1000.)
  assert tracker.line(now=1040.) == (
      '40s | starting: waiting for the first learner steps | replay 37/100 '
      'episodes before sampling; queue full (64/64)')
  # Learning on online rows while the replay warms up.
  _write(logdir, 'learner', LEARNER_COLUMNS,
         [(3000 * t, 40 * t, 1.5, 1000. + t) for t in range(0, 61)])
  line = tracker.line(now=1061.)
  assert line.endswith('policy lag 1.5 | replay 37/100 episodes before '
                       'sampling (online rows only until then) | ETA 1m00s')
  # No learner row for 40 s: stalled, and why.
  _tables(logdir, queue=0, replay=120)
  assert ' | no learner step for 40s: queue empty (no trajectories arriving)'\
      ' | ' in tracker.line(now=1100.)
  _tables(logdir, queue=10, replay=120)
  assert ' | no learner step for 40s | ' in tracker.line(now=1100.)
  # A restored run's log ends with the previous run's rows: idle since this
  # launch at most, not since the old rows.
  restored = progress.Progress(logdir, 360_000, start_time=1090.)
  assert 'no learner step' not in restored.line(now=1100.)
  assert ' | no learner step for 25s | ' in restored.line(now=1115.)
  assert 'before sampling' not in tracker.line(now=1061.)


def test_sweep_line_uses_the_slowest_agent(tmp_path):
  logdir = str(tmp_path)
  for i, rate in enumerate((100, 300)):
    _write(logdir, f'agent_{i}/learner', LEARNER_COLUMNS,
           [(rate * t, t, 1., float(t)) for t in range(11)])
    _write(logdir, f'agent_{i}/evaluator', ['episode_return'], [(10. * i,)])
  tracker = progress.Progress(logdir, 2000, agents=['agent_0', 'agent_1'],
                              start_time=0.)
  assert tracker.line(now=10.) == (
      '10s | env steps 1.0k/2.0k (50%) | 100 env steps/s (slowest agent) | '
      'eval return 0 10 (agents 0-1) | ETA 10s')
  for i, steps in enumerate((1000, 3000)):
    _counts(logdir, f'agent_{i}', steps, 10, time=9.)
  assert tracker.summary(now=10.) == (
      'ran 10s; agent_0: 1000 env steps, 10 learner steps, eval return 0.0 '
      '(last 10); agent_1: 3000 env steps, 10 learner steps, eval return '
      '10.0 (last 10)')


def _counts(logdir, agent, actor_steps, learner_steps, time):
  path = lifecycle.counts_path(os.path.join(logdir, 'status'), agent)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    json.dump({'time': time, 'counts': {'actor_steps': actor_steps,
                                        'learner_steps': learner_steps}}, f)


def test_summary_gives_this_runs_counter_totals(tmp_path):
  """The final line's steps are the counter's, as written by this run's
  counter: not the learner CSV's last row (up to a second behind), and not
  a previous run's counts (a failed restore)."""
  logdir = str(tmp_path)
  _write(logdir, 'learner', LEARNER_COLUMNS,
         [(27_391, 100, 1., 1000.)])
  tracker = progress.Progress(logdir, 30_000, start_time=990.)
  _counts(logdir, '', 31_453, 104, time=980.)  # Before this launch.
  assert tracker.summary(now=1010.) == (
      "ran 20s; no counts from this run's counter")
  _counts(logdir, '', 31_453, 104, time=1005.)
  assert tracker.summary(now=1010.) == (
      'ran 20s; 31453 env steps, 104 learner steps')


@pytest.mark.parametrize('seconds, text', [
    (0, '0s'), (59.6, '1m00s'), (61, '1m01s'), (3600 * 26 + 60, '26h01m')])
def test_durations(seconds, text):
  assert progress.format_duration(seconds) == text
