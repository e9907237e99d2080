"""One agent on the five MinAtar games against five single-task agents at
the same total env steps (IMPALA section 5.3's comparison, Figure 5).

Runs `programs/impala_lp.py --config=minatar --config.env_ids=minatar5`
(one learner, `--num_actors` actors spread over the games, an evaluator per
game) for `--max_actor_steps` env steps in total, per seed, one run at a
time; a finished run leaves `benchmark_run.json` in its logdir
(`--logroot/s<seed>`) and is not run again; a run that fails or outlives
`--run_timeout_s` is noted, the other seeds go on, and the script exits
non-zero naming it. The single-task agents are
`benchmarks/minatar.py`'s runs, read from their committed per-seed CSVs
(`--singletask_dir`): at a total of T env steps, each of the five has had
T / 5.

The measure of both is the MinAtar benchmark's: per game, the mean return
of its last 100 training episodes (the multi-task agent's episodes of that
game); over games, IMPALA's mean capped normalised score
(`acme_impala.envs.multitask.suite_score`: random play 0, the MinAtar
paper's AC(lambda) at 5M 1). Writes under `--outdir`:

  multitask_s<seed>.csv   per seed, on a grid of total env steps: each
                          game's 100-episode mean and the suite score,
                          with the run's commit and CPU;
  multitask.png           the suite score of each seed of both against
                          total env steps;
  multitask_summary.csv   and a Markdown table: per game the final means
                          of each seed of both, and their suite scores;
                          the env steps each reached, whether it finished,
                          and the commit and CPU it was made on;
  multitask_game_steps.csv  the env steps each game got in each run, with
                          its commit and CPU.

  python benchmarks/multitask.py --seeds=0
  python benchmarks/multitask.py --summarize_only
"""

import csv
import json
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import provenance  # pylint: disable=g-import-not-at-top

from acme_impala.envs import minatar  # pylint: disable=g-import-not-at-top
from acme_impala.envs import multitask
from acme_impala.launch import curves
import program_runs  # pylint: disable=g-import-not-at-top

SUITE = 'minatar5'
TRAIN_WINDOW = 100  # Training episodes per mean, as benchmarks/minatar.py.

flags.DEFINE_list('seeds', ['0'], 'Seeds of the multi-task agent.')
flags.DEFINE_integer('max_actor_steps', 25_000_000,
                     'Env steps of a multi-task run, over all games (the '
                     'single-task runs: 5M each, 25M together).',
                     lower_bound=1)
flags.DEFINE_integer('num_actors', 10, 'Actors (a multiple of 5: the same '
                     'number per game).', lower_bound=1)
flags.DEFINE_list('program_flags', [], 'Extra flags for the program.')
flags.DEFINE_string('logroot', os.path.join(_ROOT, 'runs', 'multitask'),
                    'Run directories: <logroot>/s<seed>.')
flags.DEFINE_string('singletask_dir',
                    os.path.join(_ROOT, 'benchmarks', 'results', 'minatar'),
                    "benchmarks/minatar.py's outdir: its minatar_<game>_s"
                    '<seed>.csv files are the single-task agents.')
flags.DEFINE_string('outdir',
                    os.path.join(_ROOT, 'benchmarks', 'results', 'multitask'),
                    'Where the CSVs, picture and table go.')
flags.DEFINE_integer('points', 100, 'Grid points of the per-seed CSVs.',
                     lower_bound=2)
flags.DEFINE_bool('summarize_only', False,
                  'Run nothing; summarise the runs under --logroot.')
flags.DEFINE_bool('include_unfinished', False,
                  'Summarise also runs that did not finish (stopped or '
                  'failed part-way), up to their last logged episode, '
                  'marked unfinished. Without --summarize_only the seeds '
                  'are run first: an unfinished logdir is not run again '
                  '(counted failed, the exit status says so) but is '
                  'summarised.')
flags.DEFINE_integer('run_timeout_s', 8 * 3600,
                     'A run taking longer is stopped and counted failed.',
                     lower_bound=1)
FLAGS = flags.FLAGS


def _logdir(seed):
  return os.path.join(FLAGS.logroot, f's{seed}')


def run(seed):
  """One multi-task run to its budget (or the record of an earlier one)."""
  logdir = _logdir(seed)
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
         '--lp_launch_type=local_mp', '--config=minatar',
         f'--config.env_ids={SUITE}', f'--num_actors={FLAGS.num_actors}',
         f'--seed={seed}', f'--max_actor_steps={FLAGS.max_actor_steps}',
         f'--logdir={logdir}', '--progress_interval_s=60'
         ] + list(FLAGS.program_flags)
  return program_runs.run_once(
      f'multitask.py: seed {seed}', cmd, logdir,
      timeout_s=FLAGS.run_timeout_s, seed=seed,
      max_actor_steps=FLAGS.max_actor_steps, num_actors=FLAGS.num_actors,
      program_flags=list(FLAGS.program_flags))


def _game_actor_logs(logdir):
  """{game: [logs.csv of each actor that played it]} of a multi-task run,
  from its config.json (actor i: task i mod the number of tasks)."""
  with open(os.path.join(logdir, 'config.json')) as f:
    record = json.load(f)
  tasks = multitask.task_ids(record['configs'][0]['env_ids'])
  num_actors = record['options']['num_actors']
  return {minatar.game(task): [
      os.path.join(logdir, 'logs', f'actor_{i}', 'logs.csv')
      for i in range(k, num_actors, len(tasks))]
          for k, task in enumerate(tasks)}


def multitask_curves(logdir):
  """{game: (total env steps [E], 100-episode training mean [E])}: the
  episodes of the actors that played each game."""
  out = {}
  for game, paths in _game_actor_logs(logdir).items():
    steps, returns = curves.read_episodes(paths)
    out[game] = (steps, curves.moving_mean(returns, TRAIN_WINDOW))
  return out


def game_env_steps(logdir):
  """{game: env steps its actors played} of a multi-task run: each game's
  share of the total is what its actors managed, not exactly T / 5."""
  out = {}
  for game, paths in _game_actor_logs(logdir).items():
    total = 0.
    for path in paths:
      lengths = curves.read_csv(path).get('episode_length', np.zeros(0))
      total += float(np.nansum(lengths))
    out[game] = int(total)
  return out


def _reached(per_game):
  """The total env steps of a run's last logged episode (0 without any)."""
  return max((float(s[-1]) for s, _ in per_game.values() if len(s)),
             default=0.)


def _singletask_made_on(seed):
  """(commits, cpus) of benchmarks/minatar.py's runs of `seed`, from the
  commit and cpu columns of its per-game CSVs ('unknown' without them)."""
  commits, cpus = set(), set()
  for game in minatar.GAMES:
    path = os.path.join(FLAGS.singletask_dir, f'minatar_{game}_s{seed}.csv')
    with open(path, newline='') as f:
      rows = list(csv.DictReader(f))
    commits.add(rows[-1].get('commit') or 'unknown')
    cpus.add(rows[-1].get('cpu') or 'unknown')
  return ','.join(sorted(commits)), ' / '.join(sorted(cpus))


def singletask_curves(seed):
  """{game: (total env steps [P], 100-episode training mean [P])} of
  benchmarks/minatar.py's runs of `seed` (each game's steps times 5: the
  five agents' total), or None when a game's CSV is missing."""
  out = {}
  for game in minatar.GAMES:
    path = os.path.join(FLAGS.singletask_dir, f'minatar_{game}_s{seed}.csv')
    rows = curves.read_csv(path)
    if not len(rows.get('env_steps', [])):
      return None
    out[game] = (rows['env_steps'] * len(minatar.GAMES),
                 rows['train_return_mean100'])
  return out


def on_grid(per_game, grid, end=np.inf):
  """[P] suite score and {game: [P] mean} of `per_game` on `grid`; NaN past
  `end` (an unfinished run's last episode: it has no value there)."""
  means = {g: np.array([curves.value_at(c, x) if x <= end else np.nan
                        for x in grid])
           for g, c in per_game.items()}
  score = np.array([
      multitask.suite_score({f'MinAtar/{g}-v1': means[g][p] for g in means})
      if all(np.isfinite(means[g][p]) for g in means) else np.nan
      for p in range(len(grid))])
  return score, means


def _final(per_game):
  """{game: final 100-episode mean}, and their suite score."""
  finals = {g: float(m[-1]) if len(m) else np.nan
            for g, (_, m) in per_game.items()}
  ok = all(np.isfinite(v) for v in finals.values())
  score = (multitask.suite_score({f'MinAtar/{g}-v1': v
                                  for g, v in finals.items()})
           if ok else np.nan)
  return finals, score


def summarize(seeds):
  """Writes the files and prints the tables; False when no multi-task run
  of `seeds` is there to summarise."""
  os.makedirs(FLAGS.outdir, exist_ok=True)
  multi, made_on, ends = {}, {}, {}
  for seed in seeds:
    logdir = _logdir(seed)
    record = program_runs.finished(logdir)
    if record is not None:
      made_on[seed] = (record.get('commit', 'unknown'),
                       record.get('cpu', 'unknown'))
      multi[seed] = multitask_curves(logdir)
      ends[seed] = np.inf
    elif FLAGS.include_unfinished and os.path.exists(
        os.path.join(logdir, 'config.json')):
      multi[seed] = multitask_curves(logdir)
      ends[seed] = _reached(multi[seed])
      print(f'multitask.py: seed {seed} did not finish; summarised up to '
            f'its last logged episode, at {ends[seed]:,.0f} env steps.')
      # No benchmark_run.json: the program's own record names the commit
      # it started at, not the CPU.
      with open(os.path.join(logdir, 'config.json')) as f:
        commit = json.load(f).get('git_commit') or 'unknown'
      made_on[seed] = (commit[:7] + ('-dirty' if commit.endswith('-dirty')
                                     else ''), 'unknown')
    else:
      print(f'multitask.py: no finished run of seed {seed} under '
            f'{FLAGS.logroot}; left out.')
  single = {}
  for seed in sorted({*seeds, '0', '1', '2'}):
    curve = singletask_curves(seed)
    if curve is not None:
      single[seed] = curve
  if not multi:
    print(f'multitask.py: no multi-task run of seeds {list(seeds)} under '
          f'{FLAGS.logroot} to summarise.')
    return False
  budget = max(_reached(c) for c in multi.values())
  grid = np.linspace(budget / FLAGS.points, budget, FLAGS.points)
  for seed, per_game in multi.items():
    score, means = on_grid(per_game, grid, ends[seed])
    with open(os.path.join(FLAGS.outdir, f'multitask_s{seed}.csv'), 'w',
              newline='') as f:
      writer = csv.writer(f)
      writer.writerow(['total_env_steps'] + [f'{g}_train_mean100'
                                             for g in means] +
                      ['suite_score', 'commit', 'cpu'])
      for p, x in enumerate(grid):
        writer.writerow([int(x)] + [f'{means[g][p]:.3f}' for g in means] +
                        [f'{score[p]:.4f}', *made_on[seed]])
  _plot(multi, single, grid, ends)
  # (agent, seed, finals, suite score, env steps reached, finished, commit,
  # cpu).
  rows = [('multi-task', seed, *_final(c), _reached(c), ends[seed] == np.inf,
           *made_on[seed]) for seed, c in multi.items()]
  rows += [('single-task', seed, *_final(c), _reached(c), True,
            *_singletask_made_on(seed)) for seed, c in single.items()]
  with open(os.path.join(FLAGS.outdir, 'multitask_summary.csv'), 'w',
            newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['agent', 'seed'] + list(minatar.GAMES) +
                    ['suite_score', 'total_env_steps', 'finished', 'commit',
                     'cpu'])
    for agent, seed, finals, score, steps, finished, commit, cpu in rows:
      writer.writerow([agent, seed] + [f'{finals[g]:.2f}'
                                        for g in minatar.GAMES] +
                      [f'{score:.3f}', int(steps),
                       'yes' if finished else 'no', commit, cpu])
  print(f'\nmultitask.py at {provenance.stamp()}: the mean return of the '
        f'last {TRAIN_WINDOW} training episodes of each game, and the mean '
        'capped normalised score (random play 0, AC(lambda) at 5M 1). Each '
        "row's commit and CPU: those its runs were made on.\n")
  print('| agent | seed | ' + ' | '.join(minatar.GAMES) +
        ' | suite score | commit | cpu |')
  print('|---|---|' + '---:|' * (len(minatar.GAMES) + 1) + '---|---|')
  for agent, seed, finals, score, steps, finished, commit, cpu in rows:
    note = '' if finished else f' (unfinished at {steps:,.0f} env steps)'
    print(f'| {agent} | {seed}{note} | ' + ' | '.join(
        f'{finals[g]:.1f}' for g in minatar.GAMES) +
          f' | {score:.3f} | {commit} | {cpu} |')
  with open(os.path.join(FLAGS.outdir, 'multitask_game_steps.csv'), 'w',
            newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['seed'] + list(minatar.GAMES) + ['commit', 'cpu'])
    print('\nEnv steps each game got in the multi-task run (the single-task '
          'agents: the total / 5 each):\n')
    print('| seed | ' + ' | '.join(minatar.GAMES) + ' |')
    print('|---|' + '---:|' * len(minatar.GAMES))
    for seed in multi:
      steps = game_env_steps(_logdir(seed))
      writer.writerow([seed] + [steps.get(g, 0) for g in minatar.GAMES] +
                      list(made_on[seed]))
      print(f'| {seed} | ' + ' | '.join(f'{steps.get(g, 0):,}'
                                        for g in minatar.GAMES) + ' |')
  return True


def _plot(multi, single, grid, ends):
  from matplotlib import figure  # pylint: disable=g-import-not-at-top
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  fig = figure.Figure(figsize=(9., 5.5), dpi=100, layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  ax = fig.subplots()
  for seed, per_game in multi.items():
    ax.plot(grid, on_grid(per_game, grid, ends[seed])[0], color='C0',
            linewidth=1.5, label=f'one agent, 5 games (seed {seed})')
  for seed, per_game in single.items():
    ax.plot(grid, on_grid(per_game, grid)[0], color='C1', linewidth=1.,
            linestyle='--', label=f'5 single-task agents (seed {seed})')
  ax.set_xlabel('env steps, all games together')
  ax.set_ylabel('mean capped normalised score')
  ax.set_title('MinAtar, 5 games: one multi-task agent vs five single-task '
               'agents\n(each game: mean of its last 100 training episodes)',
               fontsize=10)
  ax.xaxis.set_major_formatter(ticker.EngFormatter(sep=''))
  ax.set_ylim(bottom=min(0., ax.get_ylim()[0]))
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8)
  fig.savefig(os.path.join(FLAGS.outdir, 'multitask.png'), dpi=100)


def main(argv):
  del argv
  if FLAGS.num_actors % len(minatar.GAMES):
    raise SystemExit(f'multitask.py: --num_actors={FLAGS.num_actors}: '
                     f'expected a multiple of {len(minatar.GAMES)} (the same '
                     'number of actors per game).')
  print(f'multitask.py at {provenance.stamp()}: seeds {FLAGS.seeds}, '
        f'{FLAGS.max_actor_steps:,} env steps each over {len(minatar.GAMES)} '
        'games, one run at a time.', flush=True)
  failed = []
  if not FLAGS.summarize_only:
    for seed in FLAGS.seeds:
      try:
        run(seed)
      except SystemExit as error:  # Noted; the other seeds go on.
        print(error, flush=True)
        failed.append(f'seed {seed}')
  summarized = summarize(FLAGS.seeds)
  if failed:
    raise SystemExit(
        f'multitask.py: {len(failed)} run(s) failed: {"; ".join(failed)}' +
        ('' if summarized else '; nothing summarised.'))
  if not summarized:
    raise SystemExit('multitask.py: nothing to summarise.')


if __name__ == '__main__':
  app.run(main)
