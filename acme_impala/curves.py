"""Training curves of a run directory, read from its CSV logs.

A run of `programs/impala_lp.py` logs one CSV per node in Acme's layout
(`acme_impala.loggers`): `<logdir>/logs/learner/logs.csv` (a row per second),
`logs/evaluator/logs.csv` (a row per evaluation episode) and
`logs/actor_<i>/logs.csv` (a row per training episode); a LASER sweep
(`programs/laser_sweep_lp.py`) has them under `logs/agent_<i>/`.

`read_run` gives one agent's curves as numpy arrays against env steps (the
`actor_steps` column); `write_run_curves` draws one run (every agent of a
sweep), `plot_runs` several runs (seeds) as their mean and min-max spread on
a common env-step grid (`mean_and_spread`).

A restored run appends to the same files. When it resumes from a checkpoint
older than its last rows, env steps go back and the steps after the
checkpoint are done again: the abandoned rows are dropped (`kept_rows`), so
every curve's env steps are nondecreasing. Missing files, missing columns and
'nan' cells give empty arrays or NaN, not errors; only a run with nothing at
all to plot is a ValueError.

matplotlib is imported by the drawing functions only and draws with Agg
(no pyplot: no display, no global figure state).
"""

import csv
import dataclasses
import math
import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

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
DPI = 100
FIGSIZE = (12., 11.)  # Inches: 1200 x 1100 pixels at DPI.

_AGENT_DIR = re.compile(r'agent_(\d+)$')


@dataclasses.dataclass(frozen=True)
class Curves:
  """One agent's curves: float64 arrays against env steps.

  Attributes:
    name: the logdir's name, with '/agent_<i>' for an agent of a sweep.
    episode_source: 'evaluator', 'actors' (training episodes, when the run
      has no evaluator) or '' (neither logged an episode).
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
  return sorted(agents, key=_agent_order)


def _read_episodes(paths: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
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
  steps, returns = _read_episodes([os.path.join(logs, 'evaluator',
                                                'logs.csv')])
  if len(steps):
    return 'evaluator', steps, returns
  actors = sorted(n for n in (os.listdir(logs) if os.path.isdir(logs)
                              else []) if re.match(r'actor_\d+$', n))
  steps, returns = _read_episodes(
      [os.path.join(logs, a, 'logs.csv') for a in actors])
  return ('actors' if len(steps) else ''), steps, returns


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
  window = RETURN_WINDOW if source == 'evaluator' else ACTOR_RETURN_WINDOW
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
      steps_per_second=steps_per_second(steps[keep], times))


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


def _finite_curve(x, y) -> Tuple[np.ndarray, np.ndarray]:
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
  curves = [c for c in (_finite_curve(x, y) for x, y in curves) if len(c[0])]
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


# Drawing.

_PANELS = (  # Curve and y label; both figures lay them out 3 x 2.
    ('return', 'return'),
    ('steps_per_second', 'env steps/s'),
    ('policy_loss', 'loss'),
    ('baseline_loss', 'loss'),
    ('entropy_loss', 'loss'),
    ('entropy', 'nats'),
)


def _agent(curves: Curves) -> str:
  return curves.name.rsplit('/', 1)[-1] if '/' in curves.name else ''


def _series(curves: Curves, key: str) -> Tuple[np.ndarray, np.ndarray]:
  """(env steps [N], y [N]) of a panel's line: smoothed, rows are noisy.

  Means have one point per env-step count: the counter moves in chunks, and
  the rows between two moves would draw vertical strokes. The rate keeps its
  NaNs, which break the line at a stop.
  """
  if key == 'return':
    return _finite_curve(curves.episode_steps, curves.return_mean)
  if key == 'steps_per_second':
    return curves.env_steps, curves.steps_per_second
  return _finite_curve(curves.env_steps,
                       moving_mean(curves.learner[key], LEARNER_WINDOW))


def _titles(runs: Sequence[Curves]) -> Dict[str, str]:
  windows = sorted({(c.episode_source, c.return_window) for c in runs
                    if c.episode_source})
  if not windows:
    episodes = 'Episode return (no episode logged)'
  elif [s for s, _ in windows] == ['actors']:
    episodes = ('Training episode return (actors: no evaluator; line: mean '
                f'of last {windows[0][1]})')
  elif len(windows) == 1:
    episodes = f'Evaluator episode return (line: mean of last {windows[0][1]})'
  else:
    episodes = 'Episode return (line: mean of last ' + ', '.join(
        f'{w} ({s})' for s, w in windows) + ')'
  logged = max([float(np.nanmax(c.seconds)) for c in runs
                if np.isfinite(c.seconds).any()] or [0.])
  smooth = f'(line: mean of {LEARNER_WINDOW} learner rows)'
  return {
      'return': episodes,
      'steps_per_second': (f'Env steps/s (over {RATE_WINDOW_S:.0f} s; '
                           f'{_duration(logged)} of learner logs)'),
      'policy_loss': f'Policy loss {smooth}',
      'baseline_loss': f'Baseline loss {smooth}',
      'entropy_loss': f'Entropy loss {smooth}',
      'entropy': f'Policy entropy {smooth}',
  }


def _duration(seconds: float) -> str:
  if seconds < 120:
    return f'{seconds:.0f} s'
  if seconds < 7200:
    return f'{seconds / 60:.1f} min'
  return f'{seconds / 3600:.1f} h'


def _set_scale(ax, ys: Sequence[np.ndarray]) -> None:
  """Log y for positive values spanning more than two decades (a baseline
  loss falling from 10 to 0.01 is a flat line on a linear axis). Signed
  values stay linear: their sign is the information, and a symlog axis
  turns every crossing of zero into a cliff."""
  values = np.concatenate([np.ravel(y) for y in ys] + [np.zeros(0)])
  values = values[np.isfinite(values)]
  if len(values) < 2 or not (values > 0).all():
    return
  small, large = np.percentile(values, [5, 100])
  if large > 100 * small:
    ax.set_yscale('log')


def _figure():
  """A Figure on an Agg canvas (no pyplot) and its 6 axes [6], row-major."""
  from matplotlib import figure  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  fig = figure.Figure(figsize=FIGSIZE, dpi=DPI, layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  return fig, fig.subplots(3, 2).ravel()


def _finish(fig, axes, runs: Sequence[Curves], path: str,
            extra_legend: Optional[Dict[str, object]] = None) -> str:
  """Titles and axes of every panel, one legend for the figure (the axes'
  labelled artists, then `extra_legend`: label -> handle), the PNG."""
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  from matplotlib import legend_handler  # pylint: disable=g-import-not-at-top
  titles = _titles(runs)
  legend = {}
  for ax, (key, ylabel) in zip(axes, _PANELS):
    ax.set_title(titles[key], fontsize=10)
    ax.set_xlabel('env steps')
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_formatter(ticker.EngFormatter(sep=''))
    ax.grid(True, alpha=0.3)
    if not np.isfinite(ax.dataLim.get_points()).all():
      # Matplotlib's default limits would read as data (-40m env steps).
      ax.set_xticks([])
      ax.set_yticks([])
      ax.text(0.5, 0.5, 'nothing logged', transform=ax.transAxes,
              ha='center', va='center', color='gray')
    elif key == 'steps_per_second':
      ax.set_ylim(bottom=0)
    for handle, name in zip(*ax.get_legend_handles_labels()):
      legend.setdefault(name, handle)
  legend.update(extra_legend or {})
  # Below the panels: inside one it would cover some curve wherever it went.
  if legend:
    longest = max(map(len, legend))
    fig.legend(list(legend.values()), list(legend), loc='outside lower center',
               ncols=min(len(legend), 6 if longest < 20 else 3), fontsize=9,
               markerscale=2, handler_map={tuple: legend_handler.HandlerTuple(ndivide=1)})
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=DPI)
  return path


def write_run_curves(logdir: str, path: Optional[str] = None) -> str:
  """Draws the run in `logdir` into `path` (default `<logdir>/curves.png`).

  Six panels against env steps: episode returns (a dot per episode and their
  moving mean), env steps/s, the policy, baseline and entropy loss terms and
  the policy entropy (each learner row, faint, and their moving mean); a
  sweep has a line per agent in each. Titled with the logdir's name. Returns
  the path; ValueError naming the logdir when there is nothing to plot.
  """
  runs = read_agents(logdir)
  path = path or os.path.join(logdir, 'curves.png')
  fig, axes = _figure()
  fig.suptitle(os.path.basename(os.path.abspath(logdir)), fontsize=13)
  sweep = bool(_agent(runs[0]))
  for i, curves in enumerate(runs):
    color = f'C{i % 10}'
    for ax, (key, _) in zip(axes, _PANELS):
      x, y = _series(curves, key)
      drawn = [y]
      if key == 'return' and curves.episode_source == 'evaluator':
        # Training episodes are thousands: their dots would squash the
        # mean into a band of the axis.
        ax.scatter(curves.episode_steps, curves.episode_returns, s=10,
                   color=color, linewidths=0, alpha=0.5,
                   label='evaluation episode')
      elif key in LEARNER_KEYS and not sweep:
        # The rows themselves show how noisy the mean is; a sweep's
        # agents would hide each other's.
        raw = curves.learner[key]
        ax.plot(curves.env_steps, raw, color=color, linewidth=0.6,
                alpha=0.3, label='learner row')
        drawn.append(raw)
      ax.plot(x, y, color=color, linewidth=1.5,
              label=(_agent(curves) if sweep
                     else 'moving mean (window in titles)'))
      if key in LOSS_TERMS:
        _set_scale(ax, drawn)
  return _finish(fig, axes, runs, path)


def plot_runs(logdirs: Sequence[str], path: str,
              labels: Optional[Sequence[str]] = None) -> str:
  """Draws several runs (e.g. seeds) on one figure; returns `path`.

  The panels of `write_run_curves` (moving means only): each run's curve as
  a thin line, and their mean with the min-max band over the env steps every
  run reached (`mean_and_spread`). Agents of sweeps are grouped by index
  (agent_0 of every logdir, ...), each group with its own mean and band.

  Args:
    logdirs: run directories.
    path: the PNG to write.
    labels: a label per logdir (default: the logdirs' names).

  Raises:
    ValueError: naming a logdir that is missing or has nothing to plot, or
      when `labels` does not match `logdirs`.
  """
  if labels is None:
    labels = [os.path.basename(os.path.abspath(d)) for d in logdirs]
  if len(labels) != len(logdirs):
    raise ValueError(f'{len(labels)} labels for {len(logdirs)} logdirs.')
  groups: Dict[str, List[Tuple[str, Curves]]] = {}
  for logdir, label in zip(logdirs, labels):
    for curves in read_agents(logdir):
      groups.setdefault(_agent(curves), []).append((label, curves))

  fig, axes = _figure()
  title = f'{len(logdirs)} runs: ' + ', '.join(labels)
  fig.suptitle(title if len(title) <= 100 else f'{len(logdirs)} runs',
               fontsize=13)
  single = len(groups) == 1
  legend = {}
  for ax, (key, _) in zip(axes, _PANELS):
    drawn = []
    for g, agent in enumerate(sorted(groups, key=_agent_order)):
      members = groups[agent]
      color = 'black' if single else f'C{g % 10}'
      for r, (label, curves) in enumerate(members):
        x, y = _series(curves, key)
        drawn.append(y)
        # Alone, each run has a colour and a name; in groups, the group's.
        ax.plot(x, y, linewidth=0.8, alpha=0.7 if single else 0.35,
                color=f'C{r % 10}' if single else color,
                label=label if single else None)
      spread = mean_and_spread([_series(c, key) for _, c in members])
      if not len(spread.x):
        continue
      band = ax.fill_between(spread.x, spread.low, spread.high,
                             color=color, alpha=0.15, linewidth=0)
      mean, = ax.plot(spread.x, spread.mean, color=color, linewidth=2)
      # One legend entry per group: the band drawn under its mean line.
      legend[f'{agent}: ' * bool(agent) +
             f'mean, min-max band of {len(spread.values)} runs'] = (band,
                                                                     mean)
    if key in LOSS_TERMS:
      _set_scale(ax, drawn)
  return _finish(fig, axes, [c for g in groups.values() for _, c in g], path,
                 legend)


def _agent_order(agent: str) -> int:
  """Sort key of agent names: '' (a single agent) first, then by index."""
  match = _AGENT_DIR.match(agent)
  return int(match.group(1)) + 1 if match else 0
