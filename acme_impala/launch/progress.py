"""The launcher's one progress line, read from the run's CSV logs.

The launching process must not open gRPC channels (it forks node processes,
also later, for restarts), so it does not call the counter: it reads the
tails of the logs the nodes write anyway, `<logdir>/logs/[<agent>/]learner/
logs.csv` (a row per second: actor and learner steps, policy lag, time) and
`.../evaluator/logs.csv` (a row per evaluation episode).

  impala: 1m32s | env steps 312k/800k (39%) | 3.1k env steps/s |
      95 updates/s | eval return 187.4 (last 10) | policy lag 1.2 | ETA 2m37s

(one line). Rates are over the last `window_s` seconds of learner rows.
Where the learner waits (no step yet, or none for `STALL_S` seconds) or
LASER's replay is still below the size it is sampled from, the line says so
from the Reverb tables' sizes, which the replay node writes to
`<logdir>/status/tables-<node>.json` every second, e.g.

  impala: 40s | starting: waiting for the first learner steps | replay
      37/100 episodes before sampling; queue full (64/64)
"""

import csv
import glob
import io
import json
import math
import os
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

from acme_impala.distributed import lifecycle
from acme_impala.envs import multitask
from acme_impala.launch import curves

# Evaluation episodes in the reported mean.
EVAL_EPISODES = 10
# Seconds without a new learner row after which the line says the learner
# is waiting, and on what (the learner logs a row per second while it steps).
STALL_S = 20.
_TAIL_BYTES = 256 * 1024


def read_tail(path: str, max_rows: int = 200) -> List[Dict[str, float]]:
  """The last rows (up to `max_rows`) of an Acme CSV log as floats (NaN
  where a value is missing or not a number); [] when there is no file."""
  try:
    with open(path, 'rb') as f:
      header = f.readline().decode(errors='replace').strip()
      size = os.fstat(f.fileno()).st_size
      start = max(f.tell(), size - _TAIL_BYTES)
      f.seek(start)
      body = f.read().decode(errors='replace')
  except OSError:
    return []
  if not header:
    return []
  lines = body.split('\n')
  if start > len(header) + 1:
    lines = lines[1:]  # Started mid-row.
  lines = [l for l in lines[:-1] if l]  # The last piece may be incomplete.
  columns = next(csv.reader([header]))
  rows = []
  for values in csv.reader(io.StringIO('\n'.join(lines[-max_rows:]))):
    if len(values) != len(columns):
      continue
    row = {}
    for name, value in zip(columns, values):
      try:
        row[name] = float(value)
      except ValueError:
        row[name] = math.nan
    rows.append(row)
  return rows


def read_tables(status_dir: str) -> List[Dict[str, object]]:
  """The Reverb tables' last reported sizes (see nodes.ReplayNode), as a
  list of {role, unit, size, max_size, min_to_sample}; [] before the first
  report."""
  tables = []
  for path in sorted(glob.glob(os.path.join(status_dir, 'tables-*.json'))):
    try:
      with open(path) as f:
        tables.extend(json.load(f).values())
    except (OSError, ValueError):
      continue
  return tables


def table_status(tables: Sequence[Dict[str, object]],
                 stalled: bool = False) -> str:
  """What in the tables holds the learner or the actors back: a replay
  below the size it is sampled from ('replay 37/100 episodes before
  sampling'), a full queue (actors blocked: 'queue full (64/64)') and, when
  the learner is `stalled`, an empty queue (no trajectories arriving)."""
  parts = []
  # The replay first: while it is below its minimum it is the cause.
  for t in sorted(tables, key=lambda t: 'replay' not in t['role']):
    role, size = t['role'], t['size']
    if 'replay' in role and size < t['min_to_sample']:
      parts.append(f'{role} {size}/{t["min_to_sample"]} {t["unit"]} before '
                   'sampling')
    elif 'queue' in role and size >= t['max_size']:
      parts.append(f'{role} full ({size}/{t["max_size"]})')
    elif 'queue' in role and stalled and size == 0:
      parts.append(f'{role} empty (no trajectories arriving)')
  return '; '.join(parts)


def format_duration(seconds: float) -> str:
  seconds = max(0, int(round(seconds)))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  if hours:
    return f'{hours}h{minutes:02d}m'
  if minutes:
    return f'{minutes}m{secs:02d}s'
  return f'{secs}s'


def format_count(value: float) -> str:
  if value >= 1e6:
    return f'{value / 1e6:.2f}M'
  if value >= 1e3:
    return f'{value / 1e3:.0f}k' if value >= 1e4 else f'{value / 1e3:.1f}k'
  return f'{value:.0f}'


def _rate(rows: Sequence[Dict[str, float]], key: str,
          window_s: float) -> Optional[float]:
  """d(key)/dt at the last row, as the curves' env steps/s panel measures
  it (`curves.steps_per_second`: over `window_s`, not across a restore)."""
  if len(rows) < 2:
    return None
  rate = curves.steps_per_second(
      np.array([r.get(key, math.nan) for r in rows]),
      np.array([r.get('timestamp', math.nan) for r in rows]), window_s)[-1]
  return None if math.isnan(rate) else float(rate)


def _mean_return(rows: Sequence[Dict[str, float]]) -> Optional[float]:
  returns = [r['episode_return'] for r in rows
             if not math.isnan(r.get('episode_return', math.nan))]
  returns = returns[-EVAL_EPISODES:]
  return sum(returns) / len(returns) if returns else None


class Progress:
  """Makes the progress line of one run (one agent, or a sweep's agents)."""

  def __init__(self, logdir: str, max_actor_steps: int,
               agents: Sequence[str] = ('',), window_s: float = 30.,
               start_time: Optional[float] = None,
               tasks: Sequence[str] = ()):
    """`tasks`: a multi-task agent's task ids (`multitask.task_ids`): its
    line shows the suite score of the evaluators' last rounds in place of
    one evaluator's return."""
    self._logdir = logdir
    self._max = max_actor_steps
    self._agents = list(agents)
    self._tasks = list(tasks)
    self._window_s = window_s
    self._start = time.time() if start_time is None else start_time

  def _path(self, agent: str, label: str) -> str:
    return os.path.join(self._logdir, 'logs', agent, label, 'logs.csv')

  def agent_status(self, agent: str) -> Dict[str, Optional[float]]:
    learner = read_tail(self._path(agent, 'learner'))
    evaluator = read_tail(self._path(agent, 'evaluator'), EVAL_EPISODES)
    task_returns = {}
    for task in self._tasks:
      mean = _mean_return(read_tail(self._path(
          agent, f'evaluator_{multitask.task_name(task)}'), EVAL_EPISODES))
      if mean is not None:
        task_returns[task] = mean
    last = learner[-1] if learner else {}
    def value(key):
      v = last.get(key, math.nan)
      return None if math.isnan(v) else v
    return {
        'timestamp': value('timestamp'),
        'actor_steps': value('actor_steps'),
        'learner_steps': value('learner_steps'),
        'policy_lag': value('policy_lag_mean'),
        'env_steps_per_s': _rate(learner, 'actor_steps', self._window_s),
        'updates_per_s': _rate(learner, 'learner_steps', self._window_s),
        'eval_return': _mean_return(evaluator),
        # Over the tasks evaluated so far (`tasks_evaluated` of them).
        'suite_score': (multitask.suite_score(task_returns)
                        if task_returns else None),
        'tasks_evaluated': len(task_returns),
    }

  def _eval_text(self, status) -> str:
    if self._tasks:
      if status['suite_score'] is None:
        return 'suite score -'
      return (f'suite score {status["suite_score"]:.2f} '
              f'({status["tasks_evaluated"]}/{len(self._tasks)} tasks)')
    return 'eval return ' + (
        f'{status["eval_return"]:.1f} (last {EVAL_EPISODES})'
        if status['eval_return'] is not None else '-')

  def line(self, now: Optional[float] = None) -> str:
    now = time.time() if now is None else now
    elapsed = format_duration(now - self._start)
    statuses = [self.agent_status(a) for a in self._agents]
    steps = [s['actor_steps'] for s in statuses]
    tables = read_tables(os.path.join(self._logdir, 'status'))
    if any(s is None for s in steps):
      why = table_status(tables)
      return (f'{elapsed} | starting: waiting for the first learner steps' +
              (f' | {why}' if why else ''))
    done = min(steps)  # The coordinator stops at every agent's budget.
    parts = [elapsed, f'env steps {format_count(done)}/'
             f'{format_count(self._max)} ({min(done / self._max, 1):.0%})']

    rates = [s['env_steps_per_s'] for s in statuses]
    rate = min(rates) if all(r is not None for r in rates) else None
    if len(statuses) == 1:
      status = statuses[0]
      if rate is not None:
        parts.append(f'{format_count(rate)} env steps/s')
      if status['updates_per_s'] is not None:
        parts.append(f'{status["updates_per_s"]:.0f} updates/s')
      parts.append(self._eval_text(status))
      if status['policy_lag'] is not None:
        parts.append(f'policy lag {status["policy_lag"]:.1f}')
    else:
      if rate is not None:
        parts.append(f'{format_count(rate)} env steps/s (slowest agent)')
      parts.append('eval return ' + ' '.join(
          f'{s["eval_return"]:.0f}' if s['eval_return'] is not None else '-'
          for s in statuses) + f' (agents 0-{len(statuses) - 1})')
    last = [s['timestamp'] for s in statuses if s['timestamp'] is not None]
    # A restored run's log ends with the previous run's rows: idle since
    # this launch at most.
    idle = now - max(min(last), self._start) if last else 0.
    if idle >= STALL_S and done < self._max:
      why = table_status(tables, stalled=True)
      parts.append(f'no learner step for {format_duration(idle)}' +
                   (f': {why}' if why else ''))
    else:
      warming = table_status([t for t in tables if 'replay' in t['role']])
      if warming:
        parts.append(f'{warming} (online rows only until then)')
    if rate and done < self._max:
      parts.append(f'ETA {format_duration((self._max - done) / rate)}')
    return ' | '.join(parts)

  def summary(self, now: Optional[float] = None) -> str:
    """The final line: time, the counter's steps and the evaluator's last
    mean."""
    now = time.time() if now is None else now
    statuses = [self.agent_status(a) for a in self._agents]
    parts = [f'ran {format_duration(now - self._start)}']
    status_dir = os.path.join(self._logdir, 'status')
    for agent, status in zip(self._agents, statuses):
      prefix = f'{agent}: ' if agent else ''
      # The counter's own totals, written by this run's counter: the
      # learner's CSV lags them by up to a second of rows and, after a
      # failed restore, ends with the previous run's.
      counts = lifecycle.read_counts(status_dir, agent, since=self._start)
      if not counts:
        parts.append(f'{prefix}no counts from this run\'s counter')
        continue
      text = (f'{prefix}{counts.get("actor_steps", 0):.0f} env steps, '
              f'{counts.get("learner_steps", 0):.0f} learner steps')
      if self._tasks and status['suite_score'] is not None:
        text += ', ' + self._eval_text(status)
      elif status['eval_return'] is not None:
        text += (f', eval return {status["eval_return"]:.1f} '
                 f'(last {EVAL_EPISODES})')
      parts.append(text)
    pbt = pbt_events(self._logdir)
    if pbt is not None:
      events = os.path.join(self._logdir, 'pbt', 'events.csv')
      parts.append(f'PBT: {pbt["exploit"]} exploits, {pbt["explore"]} '
                   f'explores in {events}')
    return '; '.join(parts)


def pbt_events(logdir: str) -> Optional[Dict[str, int]]:
  """{'exploit': n, 'explore': m} counted in `<logdir>/pbt/events.csv` (a
  restored run's include its earlier lives'), or None without the file."""
  path = os.path.join(logdir, 'pbt', 'events.csv')
  try:
    with open(path, newline='') as f:
      actions = [row.get('action') for row in csv.DictReader(f)]
  except OSError:
    return None
  return {a: actions.count(a) for a in ('exploit', 'explore')}
