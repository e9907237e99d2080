"""Training curves of a run directory, read from its CSV logs.

A run of `programs/impala_lp.py` logs one CSV per node in Acme's layout
(`acme_impala.distributed.loggers`): `<logdir>/logs/learner/logs.csv` (a row per second),
`logs/evaluator/logs.csv` (a row per evaluation episode) and
`logs/actor_<i>/logs.csv` (a row per training episode); a LASER sweep
(`impala_lp.py --learning_rates/--entropy_costs`) has them under `logs/agent_<i>/`.

`read_run` gives one agent's curves as numpy arrays against env steps (the
`actor_steps` column); `mean_and_spread` puts several runs (seeds) on a
common env-step grid. `plots.py` draws them.

A restored run appends to the same files. When it resumes from a checkpoint
older than its last rows, env steps go back and the steps after the
checkpoint are done again: the abandoned rows are dropped (`kept_rows`), so
every curve's env steps are nondecreasing. Missing files, missing columns and
'nan' cells give empty arrays or NaN, not errors; only a run with nothing at
all to plot is a ValueError.
"""

import csv
import dataclasses
import math
import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from acme_impala.distributed import run_record
from acme_impala.envs import multitask

# Evaluation returns are averaged over this many episodes: one episode is too
# noisy to compare runs by.
RETURN_WINDOW = 10
# Training episodes are many more and noisier (exploration).
ACTOR_RETURN_WINDOW = 100
# Learner rows (~1 s each) averaged per point of the learner's curves.
LEARNER_WINDOW = 10
# Env steps/s is measured over this many seconds: the counter moves in
# chunks of ~1000 steps, too coarse for a shorter span at a few hundred/s.
RATE_WINDOW_S = 30.
LOSS_TERMS = ('policy_loss', 'baseline_loss', 'entropy_loss')
LEARNER_KEYS = LOSS_TERMS + ('entropy',)
# Consecutive learner rows further apart than this (and than 10x the usual
# interval) span a stop and restore: no throughput is measured across them.
MIN_GAP_S = 60.
GRID_POINTS = 200

_AGENT_DIR = re.compile(r'agent_(\d+)$')


@dataclasses.dataclass(frozen=True)
class Curves:
  """One agent's curves: float64 arrays against env steps.

  Attributes:
    name: the logdir's name, with '/agent_<i>' for an agent of a sweep.
    episode_source: 'evaluator', 'actors' (training episodes, when the run
      has no evaluator), 'suite' (a multi-task run: the episodes are points
      of its suite score, `suite_score_curve`) or '' (none logged).
    episode_steps: [E] env steps at the end of each episode, nondecreasing.
    episode_returns: [E] the episodes' returns.
    return_window: episodes per point of `return_mean`: RETURN_WINDOW for
      the evaluator's, ACTOR_RETURN_WINDOW for training episodes.
    return_mean: [E] mean return of the last `return_window` episodes
      (fewer at the start).
    env_steps: [L] env steps at each learner row, nondecreasing.
    learner: LEARNER_KEYS -> [L] that column of the learner rows (NaN where
      not logged).
    seconds: [L] wall-clock seconds since the first learner row (restored
      runs: including the time the run was down).
    start_time: unix time of the first learner row (NaN without one).
    steps_per_second: [L] env steps/s over the last RATE_WINDOW_S seconds
      (`steps_per_second`); NaN until the counter has moved twice since the
      start or a restore.
  """
  name: str
  episode_source: str
  episode_steps: np.ndarray
  episode_returns: np.ndarray
  return_window: int
  return_mean: np.ndarray
  env_steps: np.ndarray
  learner: Dict[str, np.ndarray]
  seconds: np.ndarray
  steps_per_second: np.ndarray
  start_time: float = float('nan')


class Spread(NamedTuple):
  """Several runs' curve on a common grid (`mean_and_spread`).

  x: [P] grid; mean, low, high: [P] mean, minimum and maximum over runs;
  values: [R, P] each run's curve interpolated onto the grid.
  """
  x: np.ndarray
  mean: np.ndarray
  low: np.ndarray
  high: np.ndarray
  values: np.ndarray


# Reading.


def read_csv(path: str) -> Dict[str, np.ndarray]:
  """Column -> float64 array [rows] of a CSV log; {} for a missing or empty
  file. Cells that are not numbers are NaN; a row of the wrong length (a
  line cut short by a crash) is skipped."""
  try:
    with open(path, newline='') as f:
      rows = list(csv.reader(f))
  except FileNotFoundError:
    return {}
  if not rows:
    return {}
  header, rows = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]

  def number(text):
    try:
      return float(text)
    except ValueError:
      return math.nan
  values = np.array([[number(x) for x in r] for r in rows],
                    dtype=np.float64).reshape(len(rows), len(header))
  return {name: values[:, i] for i, name in enumerate(header)}


def kept_rows(steps: np.ndarray) -> np.ndarray:
  """Bool [N]: the rows of a log to plot, given its env steps [N].

  A row is kept when its env steps are a number and no later row has fewer:
  a restore from an older checkpoint does those steps again, and its rows
  replace the abandoned ones.
  """
  steps = np.asarray(steps, np.float64)
  finite = np.isfinite(steps)
  masked = np.where(finite, steps, np.inf)
  # Minimum over the rows after each row.
  later = np.append(np.minimum.accumulate(masked[::-1])[::-1][1:], np.inf)
  return finite & (masked <= later)


def moving_mean(values: np.ndarray, window: int) -> np.ndarray:
  """Trailing mean [N] of `values` [N]: entry i averages the non-NaN values
  among values[i - window + 1 : i + 1] (fewer at the start); NaN if none."""
  values = np.asarray(values, np.float64)
  present = np.isfinite(values)
  sums = np.cumsum(np.where(present, values, 0.))
  counts = np.cumsum(present)
  sums[window:] = sums[window:] - sums[:-window]
  counts[window:] = counts[window:] - counts[:-window]
  with np.errstate(invalid='ignore', divide='ignore'):
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def running_seconds(timestamps: np.ndarray,
                    pauses: Sequence[Tuple[float, float]] = ()
                    ) -> np.ndarray:
  """Seconds [N] from the first finite one of N unix times [N] (NaN where a
  time is), less the part of each pause (from, to), unix seconds, that lies
  before: a run stopped and restored, with the time it was down left out.
  Without pauses, plain elapsed seconds."""
  times = np.asarray(timestamps, np.float64)
  out = np.full(len(times), np.nan)
  finite = np.isfinite(times)
  if not finite.any():
    return out
  first = times[finite][0]
  elapsed = times - first
  for start, end in pauses:
    start, end = max(start, first), max(end, first)
    if end > start:
      elapsed = elapsed - np.clip(times - start, 0., end - start)
  return np.where(finite, elapsed, np.nan)


def steps_per_second(env_steps: np.ndarray, timestamps: np.ndarray,
                     window_s: float = RATE_WINDOW_S) -> np.ndarray:
  """Env steps/s [N] at each of N log rows with env steps and unix times [N].

  The env-step counter moves in chunks (actors add their steps about once a
  second), so a row-to-row difference is mostly quantisation. The rate is
  measured between rows where the counter changed: from the latest such row
  back to the earliest one at most `window_s` seconds before it. It does not
  reach across a stop: a new stretch starts where time does not advance,
  env steps are missing, or time jumps by more than max(MIN_GAP_S, 10 x the
  median interval). NaN until a stretch has seen two changes.
  """
  steps = np.asarray(env_steps, np.float64)
  times = np.asarray(timestamps, np.float64)
  n = len(steps)
  if n < 2:
    return np.full(n, np.nan)
  dt = np.diff(times)
  usual = dt[np.isfinite(dt) & (dt > 0)]
  gap = max(MIN_GAP_S, 10. * float(np.median(usual))) if len(usual) else 0.
  with np.errstate(invalid='ignore'):
    new_stretch = np.concatenate(
        [[True], ~((dt > 0) & (dt <= gap)) | ~np.isfinite(steps[1:])])
  # A stretch's first row is no change: when its count was reached is
  # unknown.
  changed = ~new_stretch & np.concatenate([[False], steps[1:] != steps[:-1]])
  if not changed.any():
    return np.full(n, np.nan)
  index = np.arange(n)
  stretch = np.maximum.accumulate(np.where(new_stretch, index, 0))
  last = np.maximum.accumulate(np.where(changed, index, -1))
  valid = last >= stretch
  last = np.where(valid, last, index)
  # Seconds that only increase, with a jump longer than the window between
  # stretches: one search finds each row's window inside its own stretch.
  elapsed = np.cumsum(np.where(new_stretch, window_s + 1.,
                               np.concatenate([[0.], dt])))
  change_rows = index[changed]
  first = change_rows[np.minimum(
      np.searchsorted(elapsed[change_rows], elapsed[last] - window_s,
                      side='left'), len(change_rows) - 1)]
  with np.errstate(invalid='ignore', divide='ignore'):
    rate = (steps[last] - steps[first]) / (times[last] - times[first])
  return np.where(valid & (last > first), rate, np.nan)


def agent_names(logdir: str) -> List[str]:
  """['agent_0', 'agent_1', ...] for a sweep's logdir, [] for one agent."""
  try:
    names = os.listdir(os.path.join(logdir, 'logs'))
  except OSError:
    return []
  agents = [n for n in names if _AGENT_DIR.match(n)
            and os.path.isdir(os.path.join(logdir, 'logs', n))]
  return sorted(agents, key=agent_order)


def read_episodes(paths: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
  """(env steps [E], returns [E]) of the episodes in the CSV logs `paths`,
  merged in env-step order."""
  steps, returns = [np.zeros(0)], [np.zeros(0)]
  for path in paths:
    columns = read_csv(path)
    if 'actor_steps' not in columns or 'episode_return' not in columns:
      continue
    keep = kept_rows(columns['actor_steps']) & np.isfinite(
        columns['episode_return'])
    steps.append(columns['actor_steps'][keep])
    returns.append(columns['episode_return'][keep])
  steps, returns = np.concatenate(steps), np.concatenate(returns)
  order = np.argsort(steps, kind='stable')
  return steps[order], returns[order]


def _episodes(logs: str) -> Tuple[str, np.ndarray, np.ndarray]:
  """(source, env steps [E], returns [E]): the evaluator's episodes, else
  the actors' (see `Curves.episode_source`)."""
  steps, returns = read_episodes([os.path.join(logs, 'evaluator',
                                                'logs.csv')])
  if len(steps):
    return 'evaluator', steps, returns
  actors = sorted(n for n in (os.listdir(logs) if os.path.isdir(logs)
                              else []) if re.match(r'actor_\d+$', n))
  steps, returns = read_episodes(
      [os.path.join(logs, a, 'logs.csv') for a in actors])
  return ('actors' if len(steps) else ''), steps, returns


def run_tasks(logdir: str) -> Tuple[str, ...]:
  """The task ids of a multi-task run (from its `config.json`), else ()."""
  try:
    record = run_record.read_record(logdir)
  except ValueError:
    return ()
  if not record:
    return ()
  return multitask.task_ids(record['configs'][0].get('env_ids') or ())


def task_episodes(logdir: str, agent: Optional[int] = None
                  ) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
  """{task id: (env steps [E], returns [E])} of a multi-task run's
  evaluators (`logs/evaluator_<task name>/`); {} for a single-task run."""
  logs = os.path.join(logdir, 'logs', *(
      [f'agent_{agent}'] if agent is not None else []))
  return {task: read_episodes([os.path.join(
      logs, f'evaluator_{multitask.task_name(task)}', 'logs.csv')])
          for task in run_tasks(logdir)}


def suite_score_curve(episodes: Dict[str, Tuple[np.ndarray, np.ndarray]],
                      window: int = RETURN_WINDOW
                      ) -> Tuple[np.ndarray, np.ndarray]:
  """(env steps [P], suite score [P]): at each evaluation episode of any
  task once every task has one, `multitask.suite_score` of each task's mean
  return over its last `window` episodes up to then."""
  if not episodes or any(not len(s) for s, _ in episodes.values()):
    return np.zeros(0), np.zeros(0)
  means = {task: moving_mean(r, window) for task, (_, r) in episodes.items()}
  start = max(s[0] for s, _ in episodes.values())
  points = np.unique(np.concatenate([s for s, _ in episodes.values()]))
  points = points[points >= start]
  scores = np.array([multitask.suite_score({
      task: means[task][np.searchsorted(s, x, side='right') - 1]
      for task, (s, _) in episodes.items()}) for x in points])
  return points.astype(np.float64), scores


def read_run(logdir: str, agent: Optional[int] = None) -> Curves:
  """The curves of the run in `logdir` (agent `agent` of a sweep).

  Missing logs (no evaluator, a node that has not logged yet) give empty
  arrays; missing columns give NaN.

  Raises:
    ValueError: naming the logdir, when it does not exist, when `agent` does
      not match its layout, or when it has nothing to plot (no episode and
      no learner row with env steps).
  """
  if not os.path.isdir(logdir):
    raise ValueError(f'{logdir}: no such run directory.')
  agents = agent_names(logdir)
  name = os.path.basename(os.path.abspath(logdir))
  logs = os.path.join(logdir, 'logs')
  if agent is not None:
    if f'agent_{agent}' not in agents:
      raise ValueError(f'{logdir}: has no logs/agent_{agent} (agents: '
                       f'{agents or "none, not a sweep"}).')
    logs = os.path.join(logs, f'agent_{agent}')
    name = f'{name}/agent_{agent}'
  elif agents:
    raise ValueError(f'{logdir}: a sweep of {len(agents)} agents; read one '
                     'with agent=<i>, or all with read_agents.')

  source, episode_steps, episode_returns = _episodes(logs)
  window = RETURN_WINDOW if source == 'evaluator' else ACTOR_RETURN_WINDOW
  tasks = task_episodes(logdir, agent)
  if tasks:
    # A multi-task run's episode curve is its suite score, each point
    # already a mean over every task's last RETURN_WINDOW episodes.
    episode_steps, episode_returns = suite_score_curve(tasks)
    source, window = ('suite' if len(episode_steps) else ''), 1
  learner = read_csv(os.path.join(logs, 'learner', 'logs.csv'))
  if 'actor_steps' not in learner:
    learner = {}  # Nothing to place on the env-step axis.
  steps = learner.get('actor_steps', np.zeros(0))
  keep = kept_rows(steps)
  nan = np.full(len(steps), np.nan)
  times = learner.get('timestamp', nan)[keep]
  if not len(episode_steps) and not keep.any():
    raise ValueError(
        f'{logdir}: nothing to plot: no episode with env steps in '
        f'{os.path.join(logs, "evaluator")} or {os.path.join(logs, "actor_*")}'
        f' and no learner row in {os.path.join(logs, "learner", "logs.csv")}.')
  first = times[np.isfinite(times)][:1]
  return Curves(
      name=name,
      episode_source=source,
      episode_steps=episode_steps,
      episode_returns=episode_returns,
      return_window=window,
      return_mean=moving_mean(episode_returns, window),
      env_steps=steps[keep],
      learner={k: learner.get(k, nan)[keep] for k in LEARNER_KEYS},
      seconds=times - (first[0] if len(first) else np.nan),
      steps_per_second=steps_per_second(steps[keep], times),
      start_time=float(first[0]) if len(first) else float('nan'))


def read_agents(logdir: str) -> List[Curves]:
  """[curves] of a run, or of each sweep agent that logged anything;
  ValueError naming the logdir when none did."""
  agents = agent_names(logdir)
  if not agents:
    return [read_run(logdir)]
  found = []
  for agent in agents:
    try:
      found.append(read_run(logdir, int(_AGENT_DIR.match(agent).group(1))))
    except ValueError:
      continue  # Not logged yet; the others can still be drawn.
  if not found:
    raise ValueError(f'{logdir}: nothing to plot in any of its '
                     f'{len(agents)} agents ({", ".join(agents)}).')
  return found


# Several runs on one grid.


def actor_episodes(logdir: str) -> Tuple[np.ndarray, np.ndarray]:
  """(env steps [E], returns [E]) of a single agent's training episodes:
  every actor's, merged in env-step order."""
  logs = os.path.join(logdir, 'logs')
  actors = [os.path.join(logs, d, 'logs.csv') for d in sorted(os.listdir(logs))
            if d.startswith('actor_')]
  return read_episodes(actors)


def _last_values(steps: np.ndarray, values: np.ndarray,
                 grid: np.ndarray) -> np.ndarray:
  """values at the last point <= each grid x; NaN before the first."""
  if not len(steps):
    return np.full_like(grid, np.nan)
  i = np.searchsorted(steps, grid, side='right') - 1
  return np.where(i >= 0, values[np.maximum(i, 0)], np.nan)


def run_on_grid(logdir: str, points: int, train_window: int,
                eval_window: int,
                pauses: Sequence[Tuple[float, float]] = ()
                ) -> Dict[str, object]:
  """A single agent's run on `points` + 1 env steps from 0 to its last
  training episode (its learner's last row if it has none):

    env_steps, wall_seconds (from the learner's first row, `pauses`, unix
    (from, to) between a run's launches, left out: `running_seconds`),
    learner_steps, train_mean (the mean of the
    last `train_window` training returns), eval_mean (of the evaluator's
    last `eval_window`): [points + 1] each, NaN before a column's first
    value; train_curve, eval_curve: (env steps [E], means [E]) at each
    episode's end.
  """
  logs = os.path.join(logdir, 'logs')
  t_steps, t_returns = actor_episodes(logdir)
  train = moving_mean(t_returns, train_window)
  e_steps, e_returns = read_episodes([os.path.join(logs, 'evaluator',
                                                   'logs.csv')])
  evaluation = moving_mean(e_returns, eval_window)
  learner = read_run(logdir)
  end = (t_steps[-1] if len(t_steps) else
         learner.env_steps[-1] if len(learner.env_steps) else 0.)
  grid = np.linspace(0, end, points + 1)
  seconds = (np.interp(grid, learner.env_steps, running_seconds(
      learner.seconds + learner.start_time, pauses))
             if len(learner.env_steps) else np.full_like(grid, np.nan))
  rows = read_csv(os.path.join(logs, 'learner', 'logs.csv'))
  learner_steps = (np.interp(grid, rows['actor_steps'], rows['learner_steps'])
                   if len(rows.get('actor_steps', [])) else
                   np.full_like(grid, np.nan))
  return dict(env_steps=grid, wall_seconds=seconds,
              learner_steps=learner_steps,
              train_mean=_last_values(t_steps, train, grid),
              eval_mean=_last_values(e_steps, evaluation, grid),
              train_curve=(t_steps, train), eval_curve=(e_steps, evaluation))


def value_at(curve: Tuple[np.ndarray, np.ndarray], x: float) -> float:
  """`curve` = (steps [E] nondecreasing, values [E]): the value at its last
  point <= x, NaN before its first point or where that value is not
  finite."""
  steps, values = curve
  i = np.searchsorted(steps, x, side='right') - 1
  return float(values[i]) if i >= 0 and np.isfinite(values[i]) else np.nan


def finite_curve(x, y) -> Tuple[np.ndarray, np.ndarray]:
  """Sorted, finite (x, y) with one y per x (the last: after an x's every
  row, e.g. several evaluation episodes at one counter value)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  ok = np.isfinite(x) & np.isfinite(y)
  x, y = x[ok], y[ok]
  order = np.argsort(x, kind='stable')
  x, y = x[order], y[order]
  last = np.diff(x, append=np.inf) != 0
  return x[last], y[last]


def mean_and_spread(curves: Sequence[Tuple[np.ndarray, np.ndarray]],
                    num_points: int = GRID_POINTS) -> Spread:
  """Mean, minimum and maximum of several curves on a common grid.

  Args:
    curves: (x [N_r], y [N_r]) of each run; NaN points are ignored, runs
      with no point left out.
    num_points: points P of the grid.

  Returns:
    A Spread on a grid of P evenly spaced x over the range every run covers
    (no extrapolation: the mean is over the same runs everywhere), each run
    linearly interpolated; empty (P = 0) when there is no such range.
  """
  curves = [c for c in (finite_curve(x, y) for x, y in curves) if len(c[0])]
  if not curves:
    empty = np.zeros(0)
    return Spread(empty, empty, empty, empty, np.zeros((0, 0)))
  lo = max(x[0] for x, _ in curves)
  hi = min(x[-1] for x, _ in curves)
  if lo > hi:
    grid = np.zeros(0)
  elif lo == hi:
    grid = np.array([lo])
  else:
    grid = np.linspace(lo, hi, num_points)
  values = np.stack([np.interp(grid, x, y) for x, y in curves])
  return Spread(grid, values.mean(axis=0), values.min(axis=0),
                values.max(axis=0), values)


def agent_order(agent: str) -> int:
  """Sort key of agent names: '' (a single agent) first, then by index."""
  match = _AGENT_DIR.match(agent)
  return int(match.group(1)) + 1 if match else 0
