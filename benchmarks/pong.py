"""Pong with the atari preset: the learning curve next to published agents'.

Runs `programs/impala_lp.py --config=atari` (local_mp, ALE/Pong-v5, with its
evaluator) for each seed to `--max_actor_steps` agent steps (frame skip 4:
4 frames each), one run at a time, and writes under `--outdir`:

  pong_s<seed>.csv  per seed, one row per `--points` grid point: env steps,
                    wall seconds, mean return of the last 100 training
                    episodes, evaluator return (mean of its last 10
                    episodes), learner steps, the run's commit and CPU;
  pong.png          each seed's training and evaluator curves, with the
                    published references (`REFERENCES`);
  and a Markdown table: per seed the returns at the budget, the env steps
  at which the training mean first reached 18, wall minutes, env steps/s.

Evidence of direction on a 2-core machine, not a goal (issue 37). A finished
run leaves `benchmark_run.json` in `--logroot/s<seed>` and is not run again;
`--summarize_only` redraws from the finished runs there (--seeds and every
other seed finished there with the same settings). A seed of --seeds with
no run directory there but with its `pong_s<seed>.csv` in `--outdir` (a run
made on another machine) is summarised from that CSV if it ends at
--max_actor_steps: its curves are the CSV's grid points, and its other
settings are not checked.

A run stopped before its budget (Ctrl-C, SIGTERM, a machine's time limit)
continues from its checkpoints with `--resume` (program_runs.run_once): its
wall minutes sum its launches, the CSVs' wall seconds leave out the time
between them, and its commit and CPU name each launch's.

  python benchmarks/pong.py --seeds=0 --max_actor_steps=2000000
  python benchmarks/pong.py --summarize_only
"""

import csv
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import provenance  # pylint: disable=g-import-not-at-top

from acme_impala.launch import curves  # pylint: disable=g-import-not-at-top
import program_runs  # pylint: disable=g-import-not-at-top

TRAIN_WINDOW = 100  # Training episodes per point.
EVAL_WINDOW = 10  # Evaluator episodes per point (one evaluation round).
TARGET = 18.  # The return whose env steps the references give.
# (label, agent steps, return): published Pong results in agent steps (4
# frames each), as issue 37 names them.
REFERENCES = (('RLlib APPO: 18 at about 2.5M steps', 2.5e6, 18.),
              ('CleanRL PPO: 20.4 at 10M steps', 10e6, 20.4))

flags.DEFINE_list('seeds', ['0'], 'Seeds (one run each).')
flags.DEFINE_integer('max_actor_steps', 2_000_000, 'Agent steps per run.',
                     lower_bound=1)
flags.DEFINE_list('program_flags', [], 'Extra flags for the program.')
flags.DEFINE_integer('run_timeout_s', 3 * 3600,
                     'A launch of a run taking longer is stopped and counted '
                     'failed (--resume continues it).',
                     lower_bound=1)
flags.DEFINE_string('logroot', os.path.join(_ROOT, 'runs', 'pong'),
                    'Run directories: <logroot>/s<seed>.')
flags.DEFINE_string('outdir',
                    os.path.join(_ROOT, 'benchmarks', 'results', 'pong'),
                    'Where the CSVs, picture and table go.')
flags.DEFINE_integer('points', 50, 'Grid points of the per-seed CSVs.',
                     lower_bound=2)
flags.DEFINE_bool('resume', False,
                  'Continue an unfinished run (stopped, e.g. by a '
                  "machine's time limit) from its checkpoints: the program "
                  'with --restore, its launches recorded.')
flags.DEFINE_bool('summarize_only', False,
                  'Run nothing; summarise the finished runs under --logroot.')
FLAGS = flags.FLAGS


def _logdir(seed):
  return os.path.join(FLAGS.logroot, f's{seed}')


def run(seed):
  """One program run to its budget (or the record of an earlier one)."""
  logdir = _logdir(seed)
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
         '--lp_launch_type=local_mp', '--config=atari', f'--seed={seed}',
         f'--max_actor_steps={FLAGS.max_actor_steps}', f'--logdir={logdir}',
         '--progress_interval_s=60'] + list(FLAGS.program_flags)
  return program_runs.run_once(
      f'pong.py: seed {seed}', cmd, logdir, timeout_s=FLAGS.run_timeout_s,
      seed=seed, max_actor_steps=FLAGS.max_actor_steps,
      program_flags=list(FLAGS.program_flags),
      resume=FLAGS.resume)


def seed_curve(logdir):
  """One run's columns on a grid of env steps, and its training and
  evaluator curves (env steps [E], means [E])."""
  run = curves.run_on_grid(logdir, FLAGS.points, TRAIN_WINDOW, EVAL_WINDOW,
                           pauses=program_runs.pauses(logdir))
  columns = dict(env_steps=run['env_steps'], wall_seconds=run['wall_seconds'],
                 train_return_mean100=run['train_mean'],
                 eval_return_mean10=run['eval_mean'],
                 learner_steps=run['learner_steps'])
  return columns, run['train_curve'], run['eval_curve']


def first_reach(steps, values, target):
  """Env steps where `values` first reach `target`; None if never."""
  hit = np.nonzero(values >= target)[0]
  return float(steps[hit[0]]) if len(hit) else None


def _draw(per_seed, path):
  from matplotlib import figure  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  fig = figure.Figure(figsize=(8., 4.8), dpi=100, layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  for k, (seed, (_, train, evaluation, _)) in enumerate(per_seed.items()):
    ax.plot(*train, color=f'C{k}',
            label=f'seed {seed}: last {TRAIN_WINDOW} training episodes')
    ax.plot(*evaluation, color=f'C{k}', linestyle=':',
            label=f'seed {seed}: evaluator, last {EVAL_WINDOW}')
  for j, (label, _, value) in enumerate(REFERENCES):
    ax.axhline(value, color=f'C{7 + j}', linestyle='--', linewidth=1,
               label=label)
  ax.set_xlabel('env steps (agent steps, 4 frames each)')
  ax.set_ylabel('return')
  ax.set_ylim(-21.5, 21.5)
  ax.set_title('ALE/Pong-v5, the atari preset (IMPALA, shallow network)',
               fontsize=10)
  ax.xaxis.set_major_formatter(ticker.EngFormatter(sep=''))
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=7, loc='upper left')
  fig.savefig(path)


def _csv_path(seed):
  return os.path.join(FLAGS.outdir, f'pong_s{seed}.csv')


def seed_from_csv(path):
  """(columns, training curve, evaluator curve, record) from a per-seed CSV
  this script wrote; the curves are its grid points."""
  with open(path, newline='') as f:
    rows = list(csv.DictReader(f))
  if not rows:
    raise SystemExit(f'pong.py: {path} has no rows; expected the per-seed '
                     'CSV this script writes.')
  columns = {k: np.array([float(r[k]) for r in rows])
             for k in program_runs.GRID_KEYS}
  steps = columns['env_steps']
  train = columns['train_return_mean100']
  evaluation = columns['eval_return_mean10']
  record = dict(commit=rows[-1]['commit'], cpu=rows[-1]['cpu'],
                wall_seconds=float(columns['wall_seconds'][-1]))
  return (columns, (steps[~np.isnan(train)], train[~np.isnan(train)]),
          (steps[~np.isnan(evaluation)], evaluation[~np.isnan(evaluation)]),
          record)


def summarize():
  per_seed, from_csv = {}, []
  for seed in program_runs.with_finished_seeds(FLAGS.seeds, FLAGS.logroot):
    if not os.path.isdir(_logdir(seed)) and os.path.exists(_csv_path(seed)):
      from_file = seed_from_csv(_csv_path(seed))
      last = from_file[0]['env_steps'][-1]
      if abs(last - FLAGS.max_actor_steps) > 0.02 * FLAGS.max_actor_steps:
        print(f'pong.py: {_csv_path(seed)} ends at {last:,.0f} env steps, '
              f'not --max_actor_steps={FLAGS.max_actor_steps:,}; left out.')
        continue
      print(f'pong.py: seed {seed} from {_csv_path(seed)} (no run directory '
            f'under {FLAGS.logroot}; its other settings are not checked).')
      per_seed[seed] = from_file
      from_csv.append(seed)
      continue
    record = program_runs.finished(_logdir(seed))
    if record is None:
      print(f'pong.py: no finished run of seed {seed} under {FLAGS.logroot}; '
            'left out.')
      continue
    now = dict(max_actor_steps=FLAGS.max_actor_steps,
               program_flags=list(FLAGS.program_flags))
    differ = program_runs.settings_differ(record, now)
    if differ:
      print(f'pong.py: {_logdir(seed)} was run with other settings (run, '
            f'now): {differ}; left out.')
      continue
    columns, train, evaluation = seed_curve(_logdir(seed))
    per_seed[seed] = (columns, train, evaluation, record)
  if not per_seed:
    raise SystemExit('pong.py: nothing to summarise.')
  os.makedirs(FLAGS.outdir, exist_ok=True)
  for seed, (columns, _, _, record) in per_seed.items():
    if seed not in from_csv:
      program_runs.write_grid_csv(_csv_path(seed), columns, record)
  _draw(per_seed, os.path.join(FLAGS.outdir, 'pong.png'))
  print(f'\npong.py at {provenance.stamp()}: programs/impala_lp.py '
        f'--config=atari {" ".join(FLAGS.program_flags)}, '
        f'{FLAGS.max_actor_steps:,} env steps per seed. Each run\'s commit '
        'and CPU: those it was made on.\n')
  print(f'| seed | env steps | training, last {TRAIN_WINDOW} | evaluator, '
        f'last {EVAL_WINDOW} | env steps to {TARGET:g} (training mean) | '
        'wall minutes | env steps/s | commit | cpu |')
  print('|---|---:|---:|---:|---:|---:|---:|---|---|')
  for seed, (columns, train, evaluation, record) in per_seed.items():
    reach = first_reach(*train, TARGET)
    wall = record.get('wall_seconds', float('nan'))
    steps = columns['env_steps'][-1]
    final = train[1][-1] if len(train[1]) else float('nan')
    print(f'| {seed} | {steps:,.0f} | {final:.1f} | '
          f'{evaluation[1][-1] if len(evaluation[1]) else float("nan"):.1f} | '
          f'{"not reached" if reach is None else f"{reach:,.0f}"} | '
          f'{wall / 60:.1f} | {steps / wall:,.0f} | '
          f'{record.get("commit")} | {record.get("cpu")} |')
  notes = [program_runs.launches_note(f'Seed {seed}', record)
           for seed, (_, _, _, record) in per_seed.items()]
  if any(notes):
    print('\n' + '\n'.join(n for n in notes if n))
  if from_csv:
    print(f'\nSeed(s) {", ".join(from_csv)}: from the CSV in {FLAGS.outdir}: '
          'curves and env steps to the target at its grid points; wall '
          'minutes from the learner\'s first step to the last point (the '
          'other rows: the whole run, start-up included).')
  print('\nReferences: ' + '; '.join(label for label, _, _ in REFERENCES) +
        '.')


def main(argv):
  del argv
  print(f'pong.py at {provenance.stamp()}: seeds {FLAGS.seeds}, '
        f'{FLAGS.max_actor_steps:,} env steps each, one run at a time.',
        flush=True)
  if FLAGS.summarize_only:
    summarize()
    return
  failed = []
  for seed in FLAGS.seeds:
    try:
      run(seed)
    except SystemExit as error:  # Noted; the other seeds go on.
      print(error, flush=True)
      failed.append(seed)
  if len(failed) < len(FLAGS.seeds):
    summarize()
  if failed:
    raise SystemExit(f'pong.py: seed(s) {", ".join(failed)} failed.')


if __name__ == '__main__':
  app.run(main)
