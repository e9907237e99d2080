"""Learning curves of the default program on the five MinAtar games.

Runs `programs/impala_lp.py --config=minatar` (local_mp, with its evaluator)
on each game x seed for `--max_actor_steps` environment steps (MinAtar has
no frame skip: steps are frames), one run at a time, and writes under
`--outdir`:

  minatar_<game>_s<seed>.csv  per seed, one row per `--points` grid point:
                              env steps, wall seconds, mean return of the
                              last 100 training episodes, evaluator return
                              (mean of its last 10 episodes), learner steps
                              (CSVs written before 2026-11-26 lack them),
                              the run's commit and CPU;
  minatar_<game>.png          mean over seeds with the min-max band, and
                              the MinAtar paper's AC(lambda) at 5M steps;
  minatar_summary.csv, and a Markdown table printed at the end: final
                              100-episode mean +- std over seeds (each
                              seed's too), wall minutes per run, env steps/s.

A finished run leaves `benchmark_run.json` in its logdir
(`--logroot/<game>_s<seed>`) and is not run again, so an interrupted
benchmark resumes where it stopped; `--summarize_only` redraws the outputs
from the runs present. The table, pictures and summary also take in every
seed whose per-seed CSV is in `--outdir` without its run here (seeds run in
another session, their CSVs committed).

  python benchmarks/minatar.py --games=Breakout --seeds=0,1,2
  python benchmarks/minatar.py --summarize_only
"""

import csv
import glob
import os
import re
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import provenance  # pylint: disable=g-import-not-at-top

from acme_impala.envs import minatar as minatar_env  # pylint: disable=g-import-not-at-top
from acme_impala.launch import curves  # pylint: disable=g-import-not-at-top
import program_runs  # pylint: disable=g-import-not-at-top

GAMES = ('Breakout', 'SpaceInvaders', 'Asterix', 'Freeway', 'Seaquest')
# Young and Tian 2019's AC(lambda) at 5M frames (envs/minatar.py).
AC_LAMBDA_5M = minatar_env.AC_LAMBDA_5M
TRAIN_WINDOW = 100  # Training episodes per point, as the MinAtar paper.
EVAL_WINDOW = 10  # Evaluator episodes per point (one evaluation round).

flags.DEFINE_list('games', list(GAMES), f'Games, of {list(GAMES)}.')
flags.DEFINE_list('seeds', ['0', '1', '2'], 'Seeds (one run each).')
flags.DEFINE_integer('max_actor_steps', 5_000_000,
                     'Environment steps per run (the MinAtar paper: 5M).')
flags.DEFINE_list('program_flags', [], 'Extra flags for the program.')
flags.DEFINE_string('logroot', os.path.join(_ROOT, 'runs', 'minatar'),
                    'Run directories: <logroot>/<game>_s<seed>.')
flags.DEFINE_string('outdir',
                    os.path.join(_ROOT, 'benchmarks', 'results', 'minatar'),
                    'Where the CSVs, pictures and table go.')
flags.DEFINE_integer('points', 100, 'Grid points of the per-seed CSVs.')
flags.DEFINE_bool('resume', False,
                  'Continue an unfinished run (stopped, e.g. by a '
                  "machine's time limit) from its checkpoints: the program "
                  'with --restore, its launches recorded.')
flags.DEFINE_bool('summarize_only', False,
                  'Run nothing; summarise the runs under --logroot.')
flags.DEFINE_string('baseline_logroot', None,
                    'Runs to compare against, e.g. IMPALA (f = 0) under '
                    'runs/minatar when these are LASER runs: per game and '
                    "seed, the baseline's 100-episode training mean at this "
                    "run's budget is the target, and a second table gives "
                    'the env steps and learner steps each took to reach it '
                    "(LASER's data efficiency).")
flags.DEFINE_string('baseline_outdir', None,
                    'Per-seed CSVs of the baseline (e.g. '
                    'benchmarks/results/minatar), for the game x seed '
                    'whose run is not under --baseline_logroot (run on '
                    'another machine, its CSV committed). Its points are '
                    "the CSV's grid (1/100 of its budget apart).")
FLAGS = flags.FLAGS

_DONE = program_runs.DONE


def _logdir(game, seed):
  return os.path.join(FLAGS.logroot, f'{game}_s{seed}')


def run(game, seed):
  """One program run to its budget (or the record of an earlier one)."""
  logdir = _logdir(game, seed)
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
         '--lp_launch_type=local_mp', '--config=minatar',
         f'--config.env_id=MinAtar/{game}-v1', f'--seed={seed}',
         f'--max_actor_steps={FLAGS.max_actor_steps}', f'--logdir={logdir}',
         '--progress_interval_s=60'] + list(FLAGS.program_flags)
  return program_runs.run_once(
      f'minatar.py: {game} seed {seed}', cmd, logdir, game=game, seed=seed,
      max_actor_steps=FLAGS.max_actor_steps,
      program_flags=list(FLAGS.program_flags),
      resume=FLAGS.resume)


def _train_curve(logdir):
  """(env steps [E], mean of the last TRAIN_WINDOW training returns [E]) at
  each training episode's end."""
  steps, returns = curves.actor_episodes(logdir)
  return steps, curves.moving_mean(returns, TRAIN_WINDOW)


def _learner_steps_at(logdir, env_steps):
  rows = curves.read_csv(os.path.join(logdir, 'logs', 'learner', 'logs.csv'))
  if env_steps is None or not len(rows.get('actor_steps', [])):
    return None
  return float(np.interp(env_steps, rows['actor_steps'],
                         rows['learner_steps']))


class RunCurve:
  """A run's 100-episode training mean and learner steps over env steps,
  read from its run directory (every episode end)."""

  def __init__(self, logdir):
    self.name = logdir
    self.steps, self.means = _train_curve(logdir)
    self.full_from = TRAIN_WINDOW - 1  # First entry with a full window.
    self._logdir = logdir

  def learner_steps_at(self, env_steps):
    return _learner_steps_at(self._logdir, env_steps)

  def mean_at(self, env_steps):
    """The 100-episode mean of the last episode by `env_steps`."""
    at = np.searchsorted(self.steps, env_steps, side='right') - 1
    if at < self.full_from:
      raise ValueError(f'{self.name}: fewer than {TRAIN_WINDOW} training '
                       f'episodes by {env_steps:,} env steps.')
    return float(self.means[at])


class CsvCurve:
  """The same from a per-seed CSV (`program_runs.write_grid_csv`): its grid points, each a
  mean over the last 100 episodes (the first point, at 0 steps, left out)."""

  def __init__(self, path):
    self.name = path
    columns = curves.read_csv(path)
    self.steps = columns['env_steps'][1:]
    self.means = columns['train_return_mean100'][1:]
    self.full_from = 0
    self._learner = columns.get('learner_steps')
    if self._learner is not None:
      self._learner = self._learner[1:]

  def learner_steps_at(self, env_steps):
    if env_steps is None or self._learner is None:
      return None
    return float(np.interp(env_steps, self.steps, self._learner))

  def mean_at(self, env_steps):
    """Interpolated between grid points (a budget falls between two)."""
    if not len(self.steps) or env_steps > self.steps[-1]:
      raise ValueError(f'{self.name}: its points end before {env_steps:,} '
                       'env steps.')
    return float(np.interp(env_steps, self.steps, self.means))


def _first_reach(curve, target):
  """The first env step whose 100-episode mean (a full window) reaches
  `target`, or None."""
  hits = np.flatnonzero(curve.means[curve.full_from:] >= target)
  return (float(curve.steps[curve.full_from + hits[0]]) if len(hits)
          else None)


def efficiency(logdir, baseline, budget):
  """LASER's data efficiency of the run in `logdir` against `baseline` (a
  RunCurve or CsvCurve): the target (the baseline's 100-episode training
  mean at `budget` env steps), the env steps and learner steps each took to
  reach it, and each one's learner steps at the budget (None: not reached,
  or a baseline CSV without learner steps)."""
  target = baseline.mean_at(budget)
  run = RunCurve(logdir)
  reached = _first_reach(run, target)
  base_reached = _first_reach(baseline, target)
  return dict(target=target, reached=reached,
              learner_steps_to_target=run.learner_steps_at(reached),
              learner_steps_at_budget=run.learner_steps_at(budget),
              baseline_reached=base_reached,
              baseline_learner_steps_to_target=baseline.learner_steps_at(
                  base_reached),
              baseline_learner_steps_at_budget=baseline.learner_steps_at(
                  budget),
              baseline=baseline.name)


def _baseline(game, seed):
  """The baseline of game x seed: its run under --baseline_logroot, else
  its CSV in --baseline_outdir, else None."""
  if FLAGS.baseline_logroot:
    logdir = os.path.join(FLAGS.baseline_logroot, f'{game}_s{seed}')
    if os.path.exists(os.path.join(logdir, _DONE)):
      return RunCurve(logdir)
  if FLAGS.baseline_outdir:
    path = os.path.join(FLAGS.baseline_outdir, f'minatar_{game}_s{seed}.csv')
    if os.path.exists(path):
      return CsvCurve(path)
  return None


def summarize_efficiency(records):
  """The second table (--baseline_logroot), and minatar_efficiency.csv."""
  def count(v):
    return 'not reached' if v is None else f'{v:,.0f}'

  def learner(v, reached):
    return '–' if v is None and reached is not None else count(v)
  rows = []
  for r in records:
    baseline = _baseline(r['game'], r['seed'])
    if baseline is None:
      print(f'minatar.py: no baseline run or CSV for {r["game"]} seed '
            f'{r["seed"]}; left out of the comparison.')
      continue
    try:
      rows.append(dict(game=r['game'], seed=r['seed'], **efficiency(
          _logdir(r['game'], r['seed']), baseline, r['max_actor_steps']),
                       commit=r['commit'], cpu=r['cpu']))
    except ValueError as error:  # A baseline too short to give a target.
      print(f'minatar.py: {error} {r["game"]} seed {r["seed"]} left out of '
            'the comparison.')
  if not rows:
    return
  with open(os.path.join(FLAGS.outdir, 'minatar_efficiency.csv'), 'w',
            newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  sources = ', '.join(f for f in (FLAGS.baseline_logroot,
                                  FLAGS.baseline_outdir) if f)
  print(f'\nAgainst {sources} at the same env steps: the target is the '
        "baseline's mean of the last 100 training episodes there "
        '(minatar_efficiency.csv names each baseline). "–": a baseline CSV '
        'without learner steps.\n')
  print('| game | seed | target | baseline: env steps / learner steps to '
        'it | these runs: env steps / learner steps to it | learner steps '
        'at the budget: baseline / these |')
  print('|---|---|---:|---:|---:|---:|')
  for e in rows:
    base_to = learner(e['baseline_learner_steps_to_target'],
                      e['baseline_reached'])
    base_at = learner(e['baseline_learner_steps_at_budget'], 0)
    print(f"| {e['game']} | {e['seed']} | {e['target']:.1f} | "
          f"{count(e['baseline_reached'])} / {base_to} | "
          f"{count(e['reached'])} / {count(e['learner_steps_to_target'])} | "
          f"{base_at} / {count(e['learner_steps_at_budget'])} |")


def seed_curve(logdir):
  """Columns of one run on a grid of env steps: env_steps, wall_seconds,
  train_return_mean100, eval_return_mean10 (NaN before the first)."""
  run = curves.run_on_grid(logdir, FLAGS.points, TRAIN_WINDOW, EVAL_WINDOW,
                           pauses=program_runs.pauses(logdir))
  t_steps, train = run['train_curve']
  return dict(env_steps=run['env_steps'], wall_seconds=run['wall_seconds'],
              learner_steps=run['learner_steps'],
              train_return_mean100=run['train_mean'],
              eval_return_mean10=run['eval_mean'],
              final_train=float(train[-1]) if len(train) else float('nan'),
              episodes=len(t_steps))


def _label(program_flags):
  """What the runs are: the preset and the flags added to it."""
  return ' '.join(['--config=minatar'] + list(program_flags))


def _draw(game, seed_curves, path, label, baseline=None):
  """Mean over seeds with the min-max band; `baseline`: the seed curves
  of --baseline_outdir, drawn the same way up to these runs' budget."""
  from matplotlib import figure  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  fig = figure.Figure(figsize=(7., 4.5), dpi=100, layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  budget = max(c['env_steps'][-1] for c in seed_curves)
  base_name = 'baseline ' + os.path.basename(
      os.path.normpath(FLAGS.baseline_outdir or ''))
  for curves_, name in ((seed_curves, label), (baseline or [], base_name)):
    if not curves_:
      continue
    spread = curves.mean_and_spread(
        [(c['env_steps'], c['train_return_mean100']) for c in curves_])
    keep = spread.x <= budget * 1.001
    ax.fill_between(spread.x[keep], spread.low[keep], spread.high[keep],
                    alpha=0.25,
                    label=f'{name}: min-max over {len(curves_)} seeds')
    ax.plot(spread.x[keep], spread.mean[keep], label=f'{name}, mean')
  ax.axhline(AC_LAMBDA_5M[game], color='k', linestyle='--',
             label=f'AC(lambda) at 5M (Young and Tian 2019): '
             f'{AC_LAMBDA_5M[game]:g}')
  ax.set_xlabel('environment steps (frames)')
  ax.set_ylabel(f'return, mean of last {TRAIN_WINDOW} training episodes')
  ax.set_title(f'MinAtar {game}')
  ax.legend(loc='upper left', fontsize=8)
  fig.savefig(path)


def kept_seeds(game, present, outdir=None):
  """[(record, curve)] of the seeds of `game` whose per-seed CSV is in
  `outdir` (default --outdir) but whose run is not among `present` (seeds
  run on another machine or in another session, their CSVs committed): the
  table, picture and summary cover every seed the outdir holds."""
  out = []
  for path in sorted(glob.glob(os.path.join(outdir or FLAGS.outdir,
                                            f'minatar_{game}_s*.csv'))):
    seed = int(re.fullmatch(r'.*_s(\d+)\.csv', path).group(1))
    if seed in present:
      continue
    with open(path, newline='') as f:
      rows = list(csv.DictReader(f))
    if not rows:
      continue
    columns = {k: np.array([float(r[k]) for r in rows]) for k in (
        'env_steps', 'wall_seconds', 'train_return_mean100',
        'eval_return_mean10')}
    curve = dict(columns, final_train=float(columns[
        'train_return_mean100'][-1]))
    record = dict(game=game, seed=seed,
                  wall_seconds=float(columns['wall_seconds'][-1]),
                  max_actor_steps=FLAGS.max_actor_steps,
                  commit=rows[-1]['commit'], cpu=rows[-1]['cpu'])
    out.append((record, curve))
  return out


def summarize(records):
  os.makedirs(FLAGS.outdir, exist_ok=True)
  rows = []
  for game in FLAGS.games:
    runs = [(r, seed_curve(_logdir(game, r['seed']))) for r in records
            if r['game'] == game]
    for r, c in runs:
      program_runs.write_grid_csv(
          os.path.join(FLAGS.outdir, f'minatar_{game}_s{r["seed"]}.csv'), c,
          r)
    runs = sorted(runs + kept_seeds(game, {int(r['seed']) for r, _ in runs}),
                  key=lambda run: int(run[0]['seed']))
    if not runs:
      continue
    baseline = ([c for _, c in kept_seeds(game, set(),
                                          FLAGS.baseline_outdir)]
                if FLAGS.baseline_outdir else None)
    _draw(game, [c for _, c in runs],
          os.path.join(FLAGS.outdir, f'minatar_{game}.png'),
          _label(runs[0][0].get('program_flags', FLAGS.program_flags)),
          baseline)
    finals = np.array([c['final_train'] for _, c in runs])
    minutes = np.array([r['wall_seconds'] / 60 for r, _ in runs])
    rate = np.array([r['max_actor_steps'] / r['wall_seconds']
                     for r, _ in runs])
    rows.append(dict(
        game=game, seeds=' '.join(str(r['seed']) for r, _ in runs),
        final_mean=finals.mean(), final_std=finals.std(),
        per_seed=' / '.join(f'{v:.1f}' for v in finals),
        reference=AC_LAMBDA_5M[game],
        met='yes' if finals.mean() >= AC_LAMBDA_5M[game] else 'no',
        wall_minutes=minutes.mean(), env_steps_per_s=rate.mean(),
        max_actor_steps=runs[0][0]['max_actor_steps'],
        commits=','.join(sorted({r['commit'] for r, _ in runs})),
        cpus=' / '.join(sorted({r['cpu'] for r, _ in runs}))))
  with open(os.path.join(FLAGS.outdir, 'minatar_summary.csv'), 'w',
            newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ['game'])
    writer.writeheader()
    writer.writerows(rows)
  commits = sorted({r['commit'] for r in records} |
                   {c for r in rows for c in r['commits'].split(',')})
  print(f'\nminatar.py at {provenance.stamp()}; runs of '
        f'{",".join(commits)}.\n')
  print('| game | env steps | seeds | final return (last 100 episodes), '
        'mean +- std | per seed | AC(lambda) at 5M | at or above | '
        'wall min/run | env steps/s |')
  print('|---|---:|---|---:|---|---:|---|---:|---:|')
  for r in rows:
    print(f"| {r['game']} | {r['max_actor_steps']:,} | {r['seeds']} | "
          f"{r['final_mean']:.1f} +- {r['final_std']:.1f} | {r['per_seed']} "
          f"| {r['reference']:g} | {r['met']} | {r['wall_minutes']:.1f} | "
          f"{r['env_steps_per_s']:,.0f} |")
  notes = [program_runs.launches_note(f"{r['game']} seed {r['seed']}", r)
           for r in records]
  if any(notes):
    print('\n' + '\n'.join(n for n in notes if n))


def main(argv):
  del argv
  unknown = sorted(set(FLAGS.games) - set(GAMES))
  if unknown:
    raise app.UsageError(f'--games: unknown {unknown}; expected of '
                         f'{list(GAMES)}.')
  if FLAGS.summarize_only:
    records = []
    for game in FLAGS.games:
      for seed in FLAGS.seeds:
        record = program_runs.finished(_logdir(game, seed))
        if record is not None:
          records.append(record)
  else:
    print(f'minatar.py at {provenance.stamp()}: games {FLAGS.games}, seeds '
          f'{FLAGS.seeds}, {FLAGS.max_actor_steps:,} env steps each, one '
          'run at a time.', flush=True)
    records = [run(game, int(seed)) for game in FLAGS.games
               for seed in FLAGS.seeds]
  if not records and not glob.glob(os.path.join(FLAGS.outdir,
                                                'minatar_*_s*.csv')):
    raise SystemExit('minatar.py: no finished runs under '
                     f'{FLAGS.logroot} and no per-seed CSVs in '
                     f'{FLAGS.outdir} to summarise.')
  summarize(records)
  if FLAGS.baseline_logroot or FLAGS.baseline_outdir:
    summarize_efficiency(records)


if __name__ == '__main__':
  app.run(main)
