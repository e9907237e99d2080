"""Figures of training curves: one run (`write_run_curves`, every agent of a
sweep) or several runs (`plot_runs`, seeds as their mean and min-max spread).

matplotlib is imported by the drawing functions only and draws with Agg
(no pyplot: no display, no global figure state).
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from acme_impala.launch import curves as curves_lib

DPI = 100
FIGSIZE = (12., 11.)  # Inches: 1200 x 1100 pixels at DPI.

_PANELS = (  # Curve and y label; both figures lay them out 3 x 2.
    ('return', 'return'),
    ('steps_per_second', 'env steps/s'),
    ('policy_loss', 'loss'),
    ('baseline_loss', 'loss'),
    ('entropy_loss', 'loss'),
    ('entropy', 'nats'),
)


def _agent(curves: curves_lib.Curves) -> str:
  return curves.name.rsplit('/', 1)[-1] if '/' in curves.name else ''


def _series(curves: curves_lib.Curves, key: str) -> Tuple[np.ndarray, np.ndarray]:
  """(env steps [N], y [N]) of a panel's line: smoothed, rows are noisy.

  Means have one point per env-step count: the counter moves in chunks, and
  the rows between two moves would draw vertical strokes. The rate keeps its
  NaNs, which break the line at a stop.
  """
  if key == 'return':
    return curves_lib.finite_curve(curves.episode_steps, curves.return_mean)
  if key == 'steps_per_second':
    return curves.env_steps, curves.steps_per_second
  return curves_lib.finite_curve(curves.env_steps,
                       curves_lib.moving_mean(curves.learner[key], curves_lib.LEARNER_WINDOW))


def _titles(runs: Sequence[curves_lib.Curves]) -> Dict[str, str]:
  windows = sorted({(c.episode_source, c.return_window) for c in runs
                    if c.episode_source})
  if not windows:
    episodes = 'Episode return (no episode logged)'
  elif [s for s, _ in windows] == ['suite']:
    episodes = ('Suite score: mean over tasks of min(1, normalised return of '
                f'its evaluator, mean of last {curves_lib.RETURN_WINDOW})')
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
  smooth = f'(line: mean of {curves_lib.LEARNER_WINDOW} learner rows)'
  return {
      'return': episodes,
      'steps_per_second': (f'Env steps/s (over {curves_lib.RATE_WINDOW_S:.0f} s; '
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


def _finish(fig, axes, runs: Sequence[curves_lib.Curves], path: str,
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
  runs = curves_lib.read_agents(logdir)
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
      elif key in curves_lib.LEARNER_KEYS and not sweep:
        # The rows themselves show how noisy the mean is; a sweep's
        # agents would hide each other's.
        raw = curves.learner[key]
        ax.plot(curves.env_steps, raw, color=color, linewidth=0.6,
                alpha=0.3, label='learner row')
        drawn.append(raw)
      ax.plot(x, y, color=color, linewidth=1.5,
              label=(_agent(curves) if sweep
                     else 'moving mean (window in titles)'))
      if key in curves_lib.LOSS_TERMS:
        _set_scale(ax, drawn)
  return _finish(fig, axes, runs, path)


def write_task_curves(logdir: str, path: Optional[str] = None) -> str:
  """Draws each task of a multi-task run (`<logdir>/curves_tasks.png` by
  default): a panel per task with its evaluator's episodes, their moving
  mean, and the two returns its normalised score is measured between
  (random play, the reference). Returns the path; ValueError naming the
  logdir when it is no multi-task run."""
  from acme_impala.envs import minatar  # pylint: disable=g-import-not-at-top
  episodes = curves_lib.task_episodes(logdir)
  if not episodes:
    raise ValueError(f'{logdir}: not a multi-task run (no env_ids in its '
                     'config.json).')
  from matplotlib import figure  # pylint: disable=g-import-not-at-top
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  path = path or os.path.join(logdir, 'curves_tasks.png')
  cols = 2 if len(episodes) > 1 else 1
  rows = -(-len(episodes) // cols)
  fig = figure.Figure(figsize=(12., 3.2 * rows + 1.), dpi=DPI,
                      layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  axes = np.ravel(fig.subplots(rows, cols, squeeze=False))
  fig.suptitle(f'{os.path.basename(os.path.abspath(logdir))}: evaluator '
               f'return per task (line: mean of last '
               f'{curves_lib.RETURN_WINDOW})', fontsize=13)
  for ax, (task, (steps, returns)) in zip(axes, episodes.items()):
    game = minatar.game(task)
    ax.set_title(task, fontsize=10)
    ax.scatter(steps, returns, s=10, linewidths=0, alpha=0.5, color='C0',
               label='evaluation episode')
    ax.plot(*curves_lib.finite_curve(steps, curves_lib.moving_mean(
        returns, curves_lib.RETURN_WINDOW)), color='C0', linewidth=1.5,
            label='moving mean')
    ax.axhline(minatar.AC_LAMBDA_5M[game], color='C3', linestyle='--',
               linewidth=1, label='reference (score 1): AC(lambda) at 5M')
    ax.axhline(minatar.RANDOM_RETURNS[game], color='gray', linestyle=':',
               linewidth=1, label='random play (score 0)')
    ax.set_xlabel('env steps (all tasks)')
    ax.set_ylabel('return')
    ax.xaxis.set_major_formatter(ticker.EngFormatter(sep=''))
    ax.grid(True, alpha=0.3)
  for ax in axes[len(episodes):]:
    ax.set_visible(False)
  handles, labels = axes[0].get_legend_handles_labels()
  fig.legend(handles, labels, loc='outside lower center', ncols=4,
             fontsize=9)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=DPI)
  return path


def plot_runs(logdirs: Sequence[str], path: str,
              labels: Optional[Sequence[str]] = None) -> str:
  """Draws several runs (e.g. seeds) on one figure; returns `path`.

  The panels of `write_run_curves` (moving means only): each run's curve as
  a thin line, and their mean with the min-max band over the env steps every
  run reached (`curves_lib.mean_and_spread`). Agents of sweeps are grouped by index
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
  groups: Dict[str, List[Tuple[str, curves_lib.Curves]]] = {}
  for logdir, label in zip(logdirs, labels):
    for curves in curves_lib.read_agents(logdir):
      groups.setdefault(_agent(curves), []).append((label, curves))

  fig, axes = _figure()
  title = f'{len(logdirs)} runs: ' + ', '.join(labels)
  fig.suptitle(title if len(title) <= 100 else f'{len(logdirs)} runs',
               fontsize=13)
  single = len(groups) == 1
  legend = {}
  for ax, (key, _) in zip(axes, _PANELS):
    drawn = []
    for g, agent in enumerate(sorted(groups, key=curves_lib.agent_order)):
      members = groups[agent]
      color = 'black' if single else f'C{g % 10}'
      for r, (label, curves) in enumerate(members):
        x, y = _series(curves, key)
        drawn.append(y)
        # Alone, each run has a colour and a name; in groups, the group's.
        ax.plot(x, y, linewidth=0.8, alpha=0.7 if single else 0.35,
                color=f'C{r % 10}' if single else color,
                label=label if single else None)
      spread = curves_lib.mean_and_spread([_series(c, key) for _, c in members])
      if not len(spread.x):
        continue
      band = ax.fill_between(spread.x, spread.low, spread.high,
                             color=color, alpha=0.15, linewidth=0)
      mean, = ax.plot(spread.x, spread.mean, color=color, linewidth=2)
      # One legend entry per group: the band drawn under its mean line.
      legend[f'{agent}: ' * bool(agent) +
             f'mean, min-max band of {len(spread.values)} runs'] = (band,
                                                                     mean)
    if key in curves_lib.LOSS_TERMS:
      _set_scale(ax, drawn)
  return _finish(fig, axes, [c for g in groups.values() for _, c in g], path,
                 legend)
