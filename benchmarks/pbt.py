"""Population-based training on one MinAtar game: does PBT help, and does
sharing experience with the trust region inside PBT help further (IMPALA
Appendix F; LASER section 5 and Figure 3 right)?

Four conditions, each a sweep of the same 4 agents (`--learning_rates`, the
minatar preset's rate times `--lr_factors`: 1/4, 1/2, 1 and 2), run with
`programs/laser_sweep_lp.py`, `--max_actor_steps` env steps per agent:

  impala         IMPALA agents (no replay, no trust region), no PBT;
  impala_pbt     IMPALA agents, PBT every --pbt_interval_steps (the shared
                 conditions' interval is scaled to the same env steps);
  shared         one replay shared by the 4, `--replay_fraction` of each
                 batch replayed, the trust region on (LASER's sweep: b 0.5,
                 entropy on online rows), no PBT;
  shared_pbt     the same, with PBT.

`--replay_fraction` defaults to 0.5, not LASER's 0.875: a learner step
takes B(1-f) online rows, so f = 0.875 needs 4 times the learner steps of
f = 0.5 for the same env steps, and 4 learners on 2 cores make a 1M-step
run hours long at 0.875.

Each (condition, seed) is one run, one at a time; a finished run leaves
`benchmark_run.json` in its logdir (`--logroot/<condition>_s<seed>`) and is
not run again. The measure is the MinAtar benchmark's: the mean return of an
agent's last 100 training episodes; a population's result is its best
agent's (PBT's own measure) and its mean. Writes under `--outdir`:

  pbt_<condition>_s<seed>.csv  per run, on a grid of env steps per agent:
                               the best and the mean over agents;
  pbt_<game>.png               best agent per condition, mean over seeds
                               with the min-max band;
  pbt_summary.csv, and a Markdown table: per condition and seed, each
                               agent's final mean, best and mean; the PBT
                               runs' exploit and explore counts; the commit
                               and CPU the run was made on.

  python benchmarks/pbt.py --game=Breakout --seeds=0,1,2
  python benchmarks/pbt.py --summarize_only

The summary covers --seeds and every other seed finished under --logroot
with the same settings: `--seeds=0`, then `--seeds=1`, ... add up.
"""

import csv
import glob
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import provenance  # pylint: disable=g-import-not-at-top

from acme_impala.agent import presets  # pylint: disable=g-import-not-at-top
from acme_impala.envs import minatar
from acme_impala.launch import curves
import program_runs  # pylint: disable=g-import-not-at-top

CONDITIONS = ('impala', 'impala_pbt', 'shared', 'shared_pbt')
LR_FACTORS = (0.25, 0.5, 1., 2.)  # The population's learning rates.
TRAIN_WINDOW = 100  # Training episodes per mean, as benchmarks/minatar.py.

flags.DEFINE_string('game', 'Breakout', f'One of {list(minatar.GAMES)}.')
flags.DEFINE_list('lr_factors', [f'{f:g}' for f in LR_FACTORS],
                  "The population: one agent per factor of the preset's "
                  'learning rate.')
flags.DEFINE_list('seeds', ['0', '1', '2'], 'Seeds (one run per condition).')
flags.DEFINE_list('conditions', list(CONDITIONS),
                  f'Conditions, of {list(CONDITIONS)}.')
flags.DEFINE_integer('max_actor_steps', 1_000_000,
                     'Env steps per agent.', lower_bound=1)
flags.DEFINE_integer('num_actors', 1, 'Actors per agent.', lower_bound=1)
flags.DEFINE_integer('pbt_interval_steps', 100,
                     'Learner steps between an agent\'s evolutions in the '
                     'IMPALA conditions (64k env steps with the preset); '
                     'the shared ones take B(1-f) online rows a step, so '
                     'theirs is this / (1 - f): both evolve every same '
                     'number of env steps.',
                     lower_bound=1)
flags.DEFINE_integer('run_timeout_s', 3 * 3600,
                     'A run taking longer is stopped and counted failed.',
                     lower_bound=1)
flags.DEFINE_float('replay_fraction', 0.5,
                   'The shared conditions\' replayed share of a batch, '
                   '0 <= f < 1.')
flags.register_validator(
    'replay_fraction', lambda f: 0. <= f < 1.,
    message='expected a replayed share f with 0 <= f < 1 (the shared '
    'conditions\' PBT interval is --pbt_interval_steps / (1 - f)).')
flags.DEFINE_list('program_flags', [], 'Extra flags for the program.')
flags.DEFINE_string('logroot', os.path.join(_ROOT, 'runs', 'pbt'),
                    'Run directories: <logroot>/<condition>_s<seed>.')
flags.DEFINE_string('outdir',
                    os.path.join(_ROOT, 'benchmarks', 'results', 'pbt'),
                    'Where the CSVs, picture and table go.')
flags.DEFINE_integer('points', 50, 'Grid points of the per-run CSVs.',
                     lower_bound=2)
flags.DEFINE_bool('summarize_only', False,
                  'Run nothing; summarise the runs under --logroot.')
FLAGS = flags.FLAGS


def _logdir(condition, seed):
  return os.path.join(FLAGS.logroot, f'{condition}_s{seed}')


def learning_rates():
  base = presets.get_config('minatar').learning_rate
  return [f'{base * float(f):g}' for f in FLAGS.lr_factors]


def interval_steps(condition) -> int:
  """The PBT interval in learner steps: the same env steps per evolution
  in every condition."""
  if condition.startswith('shared'):
    return int(round(FLAGS.pbt_interval_steps / (1. - FLAGS.replay_fraction)))
  return FLAGS.pbt_interval_steps


def run(condition, seed):
  """One sweep to its budget (or the record of an earlier one)."""
  logdir = _logdir(condition, seed)
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'laser_sweep_lp.py'),
         '--lp_launch_type=local_mp', '--config=minatar',
         f'--config.env_id=MinAtar/{FLAGS.game}-v1',
         f'--learning_rates={",".join(learning_rates())}',
         f'--num_actors={FLAGS.num_actors}', f'--seed={seed}',
         f'--max_actor_steps={FLAGS.max_actor_steps}', f'--logdir={logdir}',
         '--progress_interval_s=60']
  if condition.startswith('shared'):
    cmd += ['--share_replay=true',
            f'--config.replay_fraction={FLAGS.replay_fraction}']
  else:
    # IMPALA as the paper runs it: a sweep otherwise takes LASER's
    # settings (program_flags.SWEEP_DEFAULTS). At f = 0 every row is online,
    # so the online-only entropy learns the same; it is set off so that the
    # run's config.json records IMPALA's entropy, not LASER's.
    cmd += ['--share_replay=false', '--config.replay_fraction=0',
            '--config.kl_threshold=none',
            '--config.entropy_on_online_only=false']
  pbt = condition.endswith('_pbt')
  if pbt:
    cmd.append(f'--pbt_interval_steps={interval_steps(condition)}')
  cmd += list(FLAGS.program_flags)
  return program_runs.run_once(
      f'pbt.py: {condition} seed {seed}', cmd, logdir,
      timeout_s=FLAGS.run_timeout_s, game=FLAGS.game,
      condition=condition, seed=seed, max_actor_steps=FLAGS.max_actor_steps,
      replay_fraction=FLAGS.replay_fraction,
      program_flags=list(FLAGS.program_flags),
      lr_factors=list(FLAGS.lr_factors), num_actors=FLAGS.num_actors,
      pbt_interval_steps=interval_steps(condition) if pbt else 0)


def agent_curves(logdir):
  """[(env steps [E], 100-episode training mean [E])] per agent."""
  out = []
  for agent in curves.agent_names(logdir):
    paths = sorted(glob.glob(os.path.join(logdir, 'logs', agent, 'actor_*',
                                          'logs.csv')))
    steps, returns = curves.read_episodes(paths)
    out.append((steps, curves.moving_mean(returns, TRAIN_WINDOW)))
  return out


def events(logdir):
  """(exploits, explores) in the run's pbt/events.csv (0, 0 without)."""
  rows = []
  path = os.path.join(logdir, 'pbt', 'events.csv')
  if os.path.exists(path):
    with open(path, newline='') as f:
      rows = list(csv.DictReader(f))
  return (sum(r['action'] == 'exploit' for r in rows),
          sum(r['action'] == 'explore' for r in rows))


def _made_on(record):
  """[commit, cpu] a run was made on, from its benchmark_run.json."""
  return [record.get('commit', 'unknown'), record.get('cpu', 'unknown')]


def _settings_differ(record) -> dict:
  """{setting: (the run's, these flags')} where a finished run's record
  differs from this invocation's population and budget."""
  now = {'game': FLAGS.game, 'max_actor_steps': FLAGS.max_actor_steps,
         'lr_factors': list(FLAGS.lr_factors),
         'num_actors': FLAGS.num_actors,
         'replay_fraction': FLAGS.replay_fraction,
         'program_flags': list(FLAGS.program_flags)}
  return program_runs.settings_differ(record, now)


def summarize():
  os.makedirs(FLAGS.outdir, exist_ok=True)
  grid = np.linspace(FLAGS.max_actor_steps / FLAGS.points,
                     FLAGS.max_actor_steps, FLAGS.points)
  # (condition, seed) -> (per-agent [A, P], finals [A], events, record).
  results = {}
  for condition in FLAGS.conditions:
    # Seeds run one invocation at a time add up; runs of other settings
    # are left out, by name, below.
    for seed in program_runs.with_finished_seeds(
        FLAGS.seeds, FLAGS.logroot, [f'{c}_' for c in FLAGS.conditions]):
      logdir = _logdir(condition, seed)
      record = program_runs.finished(logdir)
      if record is None:
        print(f'pbt.py: no finished run {condition} seed {seed} under '
              f'{FLAGS.logroot}; left out.')
        continue
      differ = _settings_differ(record)
      if differ:
        print(f'pbt.py: {logdir} was run with other settings (run, now): '
              f'{differ}; left out.')
        continue
      per_agent = agent_curves(logdir)
      values = np.array([[curves.value_at(c, x) for x in grid] for c in per_agent])
      # At the budget: actors run on until every agent has reached it, so
      # an agent's last episodes may lie past it.
      finals = np.array([curves.value_at(c, FLAGS.max_actor_steps)
                         for c in per_agent])
      results[condition, seed] = (values, finals, events(logdir), record)
      with open(os.path.join(FLAGS.outdir, f'pbt_{condition}_s{seed}.csv'),
                'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['env_steps_per_agent', 'best_train_mean100',
                         'mean_train_mean100'])
        for p, x in enumerate(grid):
          column = values[:, p]
          ok = np.isfinite(column)
          writer.writerow([int(x), f'{np.max(column[ok]):.3f}' if ok.any()
                           else 'nan', f'{np.mean(column[ok]):.3f}'
                           if ok.any() else 'nan'])
  if not results:
    raise SystemExit('pbt.py: nothing to summarise.')
  _plot(results, grid)
  with open(os.path.join(FLAGS.outdir, 'pbt_summary.csv'), 'w',
            newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['game', 'condition', 'seed'] +
                    [f'agent_{i}' for i in range(len(FLAGS.lr_factors))] +
                    ['best', 'mean', 'exploits', 'explores', 'commit',
                     'cpu'])
    for (condition, seed), (_, finals, (exploits, explores), record) in sorted(
        results.items()):
      writer.writerow([FLAGS.game, condition, seed] +
                      [f'{v:.2f}' for v in finals] +
                      [f'{np.nanmax(finals):.2f}', f'{np.nanmean(finals):.2f}',
                       exploits, explores] + _made_on(record))
  print(f'\npbt.py at {provenance.stamp()}: {FLAGS.game}, '
        f'{len(FLAGS.lr_factors)} agents '
        f'(learning rates {", ".join(learning_rates())}), '
        f'{FLAGS.max_actor_steps:,} env steps each; the mean return of each '
        f'agent\'s last {TRAIN_WINDOW} training episodes. Each run\'s commit '
        'and CPU: those it was made on.\n')
  print('| condition | seed | agents | best | mean | exploits / explores | '
        'commit | cpu |')
  print('|---|---|---|---:|---:|---|---|---|')
  for (condition, seed), (_, finals, (exploits, explores), record) in sorted(
      results.items()):
    commit, cpu = _made_on(record)
    print(f'| {condition} | {seed} | ' +
          ', '.join(f'{v:.1f}' for v in finals) +
          f' | {np.nanmax(finals):.1f} | {np.nanmean(finals):.1f} | '
          f'{exploits} / {explores} | {commit} | {cpu} |')
  print('\n| condition | best: mean over seeds | seeds |')
  print('|---|---:|---|')
  for condition in FLAGS.conditions:
    bests = [np.nanmax(r[1]) for (c, _), r in results.items()
             if c == condition]
    if bests:
      print(f'| {condition} | {np.mean(bests):.1f} | '
            f'{", ".join(f"{b:.1f}" for b in bests)} |')


def _plot(results, grid):
  from matplotlib import figure  # pylint: disable=g-import-not-at-top
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  fig = figure.Figure(figsize=(9., 5.5), dpi=100, layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  ax = fig.subplots()
  for k, condition in enumerate(FLAGS.conditions):
    runs = [np.nanmax(np.where(np.isfinite(v), v, -np.inf), axis=0)
            for (c, _), (v, *_) in results.items() if c == condition]
    if not runs:
      continue
    best = np.array(runs)
    best[~np.isfinite(best)] = np.nan
    ax.plot(grid, np.nanmean(best, axis=0), color=f'C{k}',
            label=f'{condition} ({len(runs)} seeds)')
    ax.fill_between(grid, np.nanmin(best, axis=0), np.nanmax(best, axis=0),
                    color=f'C{k}', alpha=0.15)
  ax.axhline(minatar.AC_LAMBDA_5M[FLAGS.game], color='k', linestyle=':',
             label='AC(lambda) at 5M steps')
  ax.set_xlabel('env steps per agent')
  ax.set_ylabel('best agent: mean of its last 100 training episodes')
  ax.set_title(f'MinAtar {FLAGS.game}: a population of 4, with and without '
               'PBT and a shared replay', fontsize=10)
  ax.xaxis.set_major_formatter(ticker.EngFormatter(sep=''))
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8)
  fig.savefig(os.path.join(FLAGS.outdir, f'pbt_{FLAGS.game}.png'), dpi=100)


def main(argv):
  del argv
  if FLAGS.game not in minatar.GAMES:
    raise SystemExit(f'pbt.py: --game={FLAGS.game!r}: expected one of '
                     f'{list(minatar.GAMES)}.')
  try:
    factors = [float(f) for f in FLAGS.lr_factors]
  except ValueError:
    factors = []
  if len(factors) < 2 or min(factors) <= 0:
    raise SystemExit(f'pbt.py: --lr_factors={",".join(FLAGS.lr_factors)}: '
                     'expected at least 2 positive numbers (a population).')
  bad = sorted(set(FLAGS.conditions) - set(CONDITIONS))
  if bad:
    raise SystemExit(f'pbt.py: --conditions: {bad}: expected some of '
                     f'{list(CONDITIONS)}.')
  print(f'pbt.py at {provenance.stamp()}: {FLAGS.game}, conditions '
        f'{FLAGS.conditions}, seeds {FLAGS.seeds}, '
        f'{FLAGS.max_actor_steps:,} env steps per agent, one run at a time.',
        flush=True)
  if FLAGS.summarize_only:
    summarize()
    return
  failed, finished = [], 0
  for seed in FLAGS.seeds:
    for condition in FLAGS.conditions:
      try:
        run(condition, seed)
      except SystemExit as error:  # Noted; the other runs go on.
        print(error, flush=True)
        failed.append(f'{condition} seed {seed}')
        continue
      finished += 1
      # The files so far: a long benchmark stopped part-way keeps them. A
      # failed run adds nothing, so the last of these covers every run.
      summarize()
  if failed:
    raise SystemExit(
        f'pbt.py: {len(failed)} run(s) failed: {"; ".join(failed)}' +
        ('' if finished else '; none finished, nothing summarised.'))


if __name__ == '__main__':
  app.run(main)
