"""Data efficiency: IMPALA vs IMPALA+replay vs LASER vs shared-replay sweeps.

Runs, side by side in one invocation, on the same environment and budget of
environment steps, for each seed:
  - IMPALA (f = 0),
  - IMPALA with replay (f = 0.5, IMPALA section 5.2.2),
  - LASER (f = 0.875 with the trust region, kl_threshold = b),
  - a 2-agent shared-replay sweep (learning rates x 1), with and without the
    trust region (LASER section 5.4).
Each is a real Launchpad program (`programs/*_lp.py`, local_mp). Training
returns come from the actors' CSVs (evaluator off, to spend the 2 cores on
learning). Reports env steps to reach the target 20-episode average and the
final average, prints a Markdown table and writes one learning-curve PNG per
setting under --outdir.

  python benchmarks/laser_efficiency.py --seeds=0,1 --max_actor_steps=300000

`--suite=table2` runs IMPALA's Table 2 instead: the off-policy corrections
(V-trace, 1-step importance sampling, epsilon-correction, none), each
without and with replay (f = 0.5). `--suite=replay_states`: IMPALA (f = 0)
vs LASER (f = 0.875, trust region) with the paper's recomputed LSTM states
vs the stored ones. `--suite=sharing`: sweeps of 4 agents (learning rate x
entropy cost) sharing one replay with and without the trust region, vs each
agent with its own replay, with recomputed states, the shared sweep with
stored states, and the same 4 agents with no replay (f = 0). `--config`
runs a preset (e.g. minatar) at its own sizes. Every invocation prints the git commit and its settings, and
adds its runs to those already in --outdir's files of the same suite, env
and env steps (a run of the same setting and seed replaces the earlier one:
a suite stopped part-way, or more seeds, are completed run by run), and
writes the raw per-seed summaries and curve points as CSV
(`--outdir/<prefix>_summary.csv`, `<prefix>_curves.csv`; the prefix is the
suite, plus the environment unless CartPole) beside the PNGs, and what the
learners logged at the end of each run (`<prefix>_learner.csv`: trust-region
rejections, policy lag, replay staleness, entropy, learner steps).
"""

import csv
import glob
import os
import re
import subprocess
import sys
import shutil
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
from acme_impala.launch import curves  # pylint: disable=g-import-not-at-top
import program_runs  # pylint: disable=g-import-not-at-top
import provenance  # pylint: disable=g-import-not-at-top

flags.DEFINE_enum('suite', 'laser',
                  ['laser', 'table2', 'replay_states', 'sharing'],
                  'laser: IMPALA vs replay vs LASER vs sweeps; table2: '
                  'IMPALA Table 2 (corrections x replay); replay_states: '
                  'IMPALA vs LASER with recomputed vs stored LSTM states; '
                  'sharing: 4-agent sweeps, shared replay with and without '
                  'the trust region vs separate replays.')
flags.DEFINE_string('from_csv', None,
                    'Re-summarise and re-draw from a <prefix>_curves.csv '
                    'written by an earlier invocation instead of running.')
flags.DEFINE_list('sweep_learning_rates', ['1e-3', '2e-3'],
                  'sharing: the swept learning rates.')
flags.DEFINE_list('sweep_entropy_costs', ['0.003', '0.01'],
                  'sharing: the swept entropy costs.')
flags.DEFINE_list('seeds', ['0', '1'], 'Seeds.')
flags.DEFINE_integer('max_actor_steps', 300_000, 'Env steps per agent.')
flags.DEFINE_string('env', 'CartPole-v1', 'Environment id.')
flags.DEFINE_float('target', 195., 'Target mean return of training episodes '
                  '(over the trailing tenth of the run).')
flags.DEFINE_float('kl_threshold', 0.5, 'LASER trust-region threshold b.')
# The CartPole tables in docs/benchmarks.md were measured with the cartpole
# config as it was before its baseline and entropy costs were tuned for the
# IMPALA program (0.1, 0.003); these flags reproduce them.
_CARTPOLE_TABLES_FLAGS = ['--config.baseline_cost=0.5',
                          '--config.entropy_cost=0.01']
flags.DEFINE_list('base_flags', None,
                  'Config overrides given to every setting. Unset: none '
                  'with --config; without it, those the CartPole tables '
                  f'were measured with ({",".join(_CARTPOLE_TABLES_FLAGS)}). '
                  '`--base_flags=`: none.')
flags.DEFINE_string('outdir', os.path.join(_ROOT, 'benchmarks', 'results'),
                    'Where the PNG curves go.')
flags.DEFINE_integer('max_settings', 0, 'Run only the first N settings of '
                     'the suite (0: all); every setting\'s config is still '
                     'checked before the first run.', lower_bound=0)
flags.DEFINE_integer('first_setting', 0, 'Start at this setting of the '
                     'suite (0-based; with --max_settings, a slice): the '
                     'rest of a suite stopped part-way.',
                     lower_bound=0)
flags.DEFINE_integer('stored_replay_capacity', None,
                     "sharing: the replay capacity of the 'stored' setting. "
                     "Its items are trajectories of unroll_length steps, "
                     "'recompute''s whole episodes: give it the env steps "
                     'the episodes hold (episodes x mean length / unroll). '
                     "Unset: the config's.")
flags.DEFINE_string('config', None,
                    'A preset (e.g. minatar) run with its own acting and '
                    'learner sizes and the programs\' actor counts. Unset: the '
                    'cartpole config with the sizes the older tables of '
                    'docs/benchmarks.md were measured with.')
flags.DEFINE_integer('run_timeout_s', 3600,
                     'A run taking longer fails (a 4-agent LASER sweep at '
                     '1M env steps per agent takes about 40 min on 2 cores).')
FLAGS = flags.FLAGS


def _table2_settings():
  settings = []
  for f in ('0', '0.5'):
    for correction, name in (('vtrace', 'V-trace'),
                             ('one_step_is', '1-step IS'),
                             ('epsilon', 'eps-correction'),
                             ('none', 'no correction')):
      settings.append((f'{name} f={f}', 'impala_lp.py',
                       [f'--config.off_policy_correction={correction}',
                        f'--config.replay_fraction={f}']))
  return settings


def _replay_states_settings():
  laser = ['--config.replay_fraction=0.875',
           f'--config.kl_threshold={FLAGS.kl_threshold}',
           '--config.entropy_on_online_only=true']
  return [
      ('IMPALA f=0', 'impala_lp.py', []),
      ('LASER f=0.875 +TR recompute', 'impala_lp.py',
       laser + ['--config.replay_core_state=recompute']),
      ('LASER f=0.875 +TR stored', 'impala_lp.py',
       laser + ['--config.replay_core_state=stored']),
  ]


def _sharing_settings():
  grid = [f'--learning_rates={",".join(FLAGS.sweep_learning_rates)}',
          f'--entropy_costs={",".join(FLAGS.sweep_entropy_costs)}',
          '--config.entropy_on_online_only=true']
  b = f'--config.kl_threshold={FLAGS.kl_threshold}'
  recompute = '--config.replay_core_state=recompute'
  return [
      ('shared +TR recompute', 'laser_sweep_lp.py', grid + [b, recompute]),
      # A sweep turns the trust region on unless told otherwise.
      ('shared no TR recompute', 'laser_sweep_lp.py',
       grid + ['--config.kl_threshold=none', recompute]),
      ('separate +TR recompute', 'laser_sweep_lp.py',
       grid + [b, recompute, '--noshare_replay']),
      ('shared +TR stored', 'laser_sweep_lp.py',
       grid + [b, '--config.replay_core_state=stored'] + (
           [f'--config.replay_capacity={FLAGS.stored_replay_capacity}']
           if FLAGS.stored_replay_capacity else [])),
      # The same 4 agents as IMPALA: what naive sharing is compared with
      # (LASER Figure 3 left).
      ('no replay f=0', 'laser_sweep_lp.py',
       grid + ['--noshare_replay', '--config.replay_fraction=0',
               '--config.kl_threshold=none']),
  ]


def _settings():
  if FLAGS.suite == 'table2':
    return _table2_settings()
  if FLAGS.suite == 'replay_states':
    return _replay_states_settings()
  if FLAGS.suite == 'sharing':
    return _sharing_settings()
  b = f'--config.kl_threshold={FLAGS.kl_threshold}'
  return [
      ('IMPALA f=0', 'impala_lp.py', []),
      ('IMPALA+replay f=0.5', 'impala_lp.py', ['--config.replay_fraction=0.5']),
      ('LASER f=0.875 +TR', 'impala_lp.py',
       ['--config.replay_fraction=0.875', b,
        '--config.entropy_on_online_only=true']),
      ('sweep shared f=0.875 +TR', 'laser_sweep_lp.py',
       ['--learning_rates=1e-3,2e-3', '--entropy_costs=0.01', b,
        '--config.entropy_on_online_only=true']),
      # A sweep turns the trust region on unless told otherwise.
      ('sweep shared f=0.875 no TR', 'laser_sweep_lp.py',
       ['--learning_rates=1e-3,2e-3', '--entropy_costs=0.01',
        '--config.kl_threshold=none',
        '--config.entropy_on_online_only=true']),
  ]


def _agent_logs(logdir, node):
  """{agent: [CSV logs of its `node` ('actor_*', 'learner')]}: agents
  'agent_0', ... of a sweep, '.' for one agent."""
  logs = os.path.join(logdir, 'logs')
  return {agent: sorted(glob.glob(os.path.join(logs, agent, node,
                                               'logs.csv')))
          for agent in curves.agent_names(logdir) or ['.']}


def _curves(logdir):
  """{agent: [(actor_steps, episode_return)]} of the actors' episodes, in
  env-step order."""
  out = {}
  for agent, paths in _agent_logs(logdir, 'actor_*').items():
    steps, returns = curves.read_episodes(paths)
    if len(steps):
      out[agent] = list(zip(steps.tolist(), returns.tolist()))
  return out


# What the learners logged that explains a result: means over the last
# tenth of each learner's logged steps.
LEARNER_COLUMNS = ('rejected_fraction_online', 'rejected_fraction_replay',
                   'policy_lag_mean', 'replay_staleness_mean', 'entropy')


def learner_summary(logdir):
  """{agent: {column: mean over the last tenth of its log's rows (written
  about once a second), and 'learner_steps': its last}} from the learners'
  CSV logs."""
  out = {}
  for agent, paths in _agent_logs(logdir, 'learner').items():
    if not paths:
      continue
    columns = curves.read_csv(paths[0])
    steps = columns.get('learner_steps', np.zeros(0))
    if not len(steps):
      continue
    tail = slice(len(steps) - max(1, len(steps) // 10), None)
    row = {'learner_steps': int(np.nanmax(steps))}
    for name in LEARNER_COLUMNS:
      values = columns.get(name, np.full(len(steps), np.nan))[tail]
      row[name] = (float(np.nanmean(values)) if np.isfinite(values).any()
                   else float('nan'))
    out[agent] = row
  return out


def _write_learner_summary(learners, made):
  with open(_path('learner'), 'w', newline='') as f:
    out = csv.writer(f)
    out.writerow(['setting', 'seed', 'agent', 'learner_steps'] +
                 list(LEARNER_COLUMNS) + ['commit', 'cpu'])
    for (name, seed), agents in learners.items():
      for agent, row in sorted(agents.items()):
        out.writerow([name, seed, agent, row['learner_steps']] +
                     [f'{row[c]:.4g}' for c in LEARNER_COLUMNS] +
                     list(made[name, seed]))


def _window(points) -> float:
  """The summaries' window of environment steps: a tenth of the run."""
  return max(1000., max(s for s, _ in points) / 10.)


def _trailing(points):
  """(steps, mean return, episode count) over the trailing window at each
  logged step, in step order."""
  steps = np.array([s for s, _ in points])
  returns = np.array([r for _, r in points])
  window = _window(points)
  xs = np.unique(steps)
  inside = [(steps > x - window) & (steps <= x) for x in xs]
  return (xs, np.array([returns[m].mean() for m in inside]),
          np.array([m.sum() for m in inside]))


def _summary(points):
  """(env steps to target, final return) of one agent's training episodes.

  Actors log `actor_steps` from the shared counter, which moves in coarse
  increments (1,000 steps here), so many episodes share one value and their
  order within it is not kept by every reader: both numbers are means over
  windows of environment steps, not over a count of episodes. Final: the
  mean return of the episodes of the last tenth of the run. Steps to
  target: the first logged step at which the mean over the trailing tenth
  reaches the target (with at least 10 episodes in the window)."""
  if not points:
    return None, float('nan')
  xs, means, counts = _trailing(points)
  hits = np.flatnonzero((counts >= 10) & (means >= FLAGS.target))
  reached = xs[hits[0]] if len(hits) else None
  return reached, means[-1]


def _rows(path):
  """The rows of one of this script's CSVs ([] if there is none); lines
  starting with '#' say where the runs were made."""
  if not os.path.exists(path):
    return []
  with open(path, newline='') as f:
    return list(csv.DictReader(l for l in f if not l.startswith('#')))


def _read_files(curves_path):
  """(results {setting: [(seed, agent, points)]}, made {(setting, seed):
  (commit, cpu)}, learners {(setting, seed): {agent: row}}, the summary's
  rows) from the files of an earlier invocation, named by its
  `<prefix>_curves.csv`."""
  runs = {}
  for row in _rows(curves_path):
    runs.setdefault(row['setting'], {}).setdefault(
        (row['seed'], row['agent']), []).append(
            (float(row['actor_steps']), float(row['episode_return'])))
  results = {name: [(seed, agent, sorted(points, key=lambda p: p[0]))
                    for (seed, agent), points in by_run.items()]
             for name, by_run in runs.items()}
  summary = _rows(curves_path.replace('_curves.csv', '_summary.csv'))
  made = {(name, seed): ('commit not recorded', 'CPU not recorded')
          for name, by_run in runs.items() for seed, _ in by_run}
  made.update({(r['setting'], r['seed']): (
      r['commit'], r.get('cpu') or 'CPU not recorded') for r in summary})
  learners = {}
  for row in _rows(curves_path.replace('_curves.csv', '_learner.csv')):
    learners.setdefault((row['setting'], row['seed']), {})[row['agent']] = {
        'learner_steps': int(row['learner_steps']),
        **{c: float(row[c]) for c in LEARNER_COLUMNS}}
  return results, made, learners, summary


def _prefix():
  """Output file prefix: the suite, and the environment unless CartPole
  (whose files predate the others)."""
  if FLAGS.env == 'CartPole-v1':
    return FLAGS.suite
  env = re.sub(r'[^a-z0-9]+', '_', FLAGS.env.lower().replace('-v1', ''))
  return f'{FLAGS.suite}_{env.strip("_")}'


def _path(kind):
  """`<outdir>/<prefix>_<kind>.csv`."""
  return os.path.join(FLAGS.outdir, f'{_prefix()}_{kind}.csv')


def _earlier_runs(reruns):
  """The runs in --outdir's files of this suite and env (as `_read_files`)
  but those of the (setting, seed) pairs in `reruns`, after checking they
  were made at this invocation's env steps."""
  results, made, learners, summary = _read_files(_path('curves'))
  for row in summary:
    if int(row['max_actor_steps']) != FLAGS.max_actor_steps:
      raise app.UsageError(
          f'{_path("summary")} holds runs of {row["max_actor_steps"]} env '
          f'steps, this invocation runs {FLAGS.max_actor_steps}: its runs '
          'would be mixed with them. Use another --outdir.')
  kept = {n: [r for r in runs if (n, r[0]) not in reruns]
          for n, runs in results.items()}
  return ({n: runs for n, runs in kept.items() if runs},
          {k: v for k, v in made.items() if k not in reruns},
          {k: v for k, v in learners.items() if k not in reruns})


def main(argv):
  del argv
  if FLAGS.base_flags is None:
    FLAGS.base_flags = [] if FLAGS.config else _CARTPOLE_TABLES_FLAGS
  os.makedirs(FLAGS.outdir, exist_ok=True)
  print(f'laser_efficiency.py --suite={FLAGS.suite} at commit '
        f'{provenance.git_commit()} on {provenance.cpu()}: '
        f'env {FLAGS.env}, seeds {",".join(FLAGS.seeds)}, '
        f'{FLAGS.max_actor_steps} env steps per agent, target '
        f'{FLAGS.target:g}, base flags {" ".join(FLAGS.base_flags) or "none"}',
        flush=True)
  if FLAGS.from_csv:
    results, made, _, _ = _read_files(FLAGS.from_csv)
    if not results:
      raise app.UsageError(f'--from_csv={FLAGS.from_csv}: no runs there '
                           '(expected a <prefix>_curves.csv of this script).')
    print(f'(re-summarised from {FLAGS.from_csv}, runs made at '
          f'{_made_at(made)}; not re-run)')
    _report(results, made)
    return
  settings = _settings()
  for name, _, args in settings:
    _check_config(name, args)
  if FLAGS.first_setting >= len(settings):
    raise app.UsageError(
        f'--first_setting={FLAGS.first_setting}: the {FLAGS.suite} suite has '
        f'{len(settings)} settings (0 to {len(settings) - 1}).')
  settings = settings[FLAGS.first_setting:]
  if FLAGS.max_settings:
    settings = settings[:FLAGS.max_settings]
  results, made, learners = _earlier_runs(
      {(name, seed) for name, _, _ in settings for seed in FLAGS.seeds})
  failed = []
  for seed in FLAGS.seeds:
    for name, prog, args in settings:
      logdir = tempfile.mkdtemp(prefix='laser_eff_')
      print(f'{name}, seed {seed}...', flush=True)
      # The code each run starts with: a suite's hours see the tree change.
      commit = provenance.git_commit()
      try:
        output = os.path.join(logdir, 'launcher.log')
        with open(output, 'w') as out:
          code = program_runs.run_program(
              [sys.executable, os.path.join(_ROOT, 'programs', prog)] +
              _common_flags(seed, logdir) + args, FLAGS.run_timeout_s,
              stdout=out, stderr=subprocess.STDOUT)
        if code != 0:
          with open(output) as f:
            tail = f.read()[-500:]
          print(f'  ran past {FLAGS.run_timeout_s} s and was stopped'
                if code is None else f'  failed ({code})', f': {tail}')
          failed.append(f'{name}, seed {seed}')
          continue
        made[name, seed] = (commit, provenance.cpu())
        results[name] = [r for r in results.get(name, []) if r[0] != seed]
        for agent, points in _curves(logdir).items():
          results[name].append((seed, agent, points))
        learners[name, seed] = learner_summary(logdir)
        _write_learner_summary(learners, made)
        # The files so far: a long suite stopped part-way keeps its runs.
        _report(results, made, quiet=True)
      finally:
        shutil.rmtree(logdir, ignore_errors=True)
  if results:
    _report(results, made)
  if failed:
    raise SystemExit(f'laser_efficiency.py: {len(failed)} run(s) failed: '
                     f'{"; ".join(failed)}')


def _made_at(made):
  """'commit(s) X, Y on CPU' for each CPU the runs were made on."""
  by_cpu = {}
  for commit, cpu in made.values():
    by_cpu.setdefault(cpu, set()).add(commit)
  return '; '.join(f'commit(s) {", ".join(sorted(commits))} on {cpu}'
                   for cpu, commits in sorted(by_cpu.items()))


def _common_flags(seed, logdir):
  """The program flags of every setting."""
  run = [f'--max_actor_steps={FLAGS.max_actor_steps}', f'--logdir={logdir}',
         f'--config.env_id={FLAGS.env}', f'--config.seed={seed}']
  if FLAGS.config:
    # The programs' own actor counts: 2 for one agent (as
    # benchmarks/minatar.py runs it), 1 per agent of a sweep.
    return (['--lp_launch_type=local_mp', '--noevaluator',
             f'--config={FLAGS.config}'] + run + list(FLAGS.base_flags))
  return ['--lp_launch_type=local_mp', '--noevaluator', '--num_actors=1',
          # The LASER tables of docs/benchmarks.md were measured with the
          # cartpole config's acting and learner sizes before issue 13's: 8
          # environments per actor, batch 8, lr 2e-3, queue 128.
          '--config.envs_per_actor=8', '--config.batch_size=8',
          '--config.learning_rate=2e-3', '--config.max_queue_size=128',
          # ... and the gymnasium engine (EnvPool has no MinAtar games).
          '--config.env_engine=gymnasium'] + run + list(FLAGS.base_flags)


def _check_config(name, args):
  """Fails, naming the setting, if its config values are not valid (the
  config's own checks, as the program makes it), before any run starts."""
  from acme_impala.agent import presets  # pylint: disable=g-import-not-at-top
  from acme_impala.launch import config_flags  # pylint: disable=g-import-not-at-top
  values = [a for a in _common_flags(0, '') + args
            if a.startswith('--config.')]
  try:
    presets.get_config(FLAGS.config or 'cartpole').replace(
        **config_flags.parse_overrides(values))
  except (ValueError, TypeError) as e:
    raise app.UsageError(f'setting {name!r}: {e}') from None


def _report(results, made, quiet=False):
  """Prints the tables (unless quiet), draws the PNGs and writes the CSVs;
  settings in the suite's order."""
  print_ = (lambda *a, **k: None) if quiet else print
  order = [name for name, _, _ in _settings()]
  results = dict(sorted(results.items(), key=lambda item: (
      order.index(item[0]) if item[0] in order else len(order))))
  print_(f'\n{FLAGS.env}, {FLAGS.max_actor_steps} env steps per agent, '
        f'target: mean return over the trailing tenth of the run >= '
        f'{FLAGS.target:g} (training episodes); final: mean return of the '
        'last tenth\n')
  print_('| setting | seed | agent | env steps to target | final avg return |')
  print_('|---|---|---|---:|---:|')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  for name, runs in results.items():
    fig, ax = plt.subplots(figsize=(6, 4))
    for seed, agent, points in runs:
      reached, final = _summary(points)
      print_(f'| {name} | {seed} | {agent} | '
            f'{int(reached) if reached is not None else "not reached"} | '
            f'{final:.1f} |')
      if points:
        xs, ys, _ = _trailing(points)
        label = f'seed {seed}' + ('' if agent == '.' else f' {agent}')
        ax.plot(xs, ys, label=label)
    ax.set_title(name)
    ax.set_xlabel('environment steps')
    ax.set_ylabel('episode return (mean over trailing tenth of run)')
    ax.legend(fontsize=7)
    fname = name.replace(' ', '_').replace('=', '').replace('+', 'plus')
    if FLAGS.suite != 'laser' or FLAGS.env != 'CartPole-v1':
      fname = f'{_prefix()}_{fname}'
    fig.savefig(os.path.join(FLAGS.outdir, f'{fname}.png'), dpi=80,
                bbox_inches='tight')
    plt.close(fig)

  with open(_path('summary'), 'w', newline='') as f:
    out = csv.writer(f)
    out.writerow(['setting', 'seed', 'agent', 'env_steps_to_target',
                  'final_avg_return', 'commit', 'cpu', 'env',
                  'max_actor_steps'])
    for name, runs in results.items():
      for seed, agent, points in runs:
        reached, final = _summary(points)
        out.writerow([name, seed, agent, '' if reached is None else
                      int(reached), f'{final:.2f}', *made[name, seed],
                      FLAGS.env, FLAGS.max_actor_steps])
  with open(_path('curves'), 'w', newline='') as f:
    f.write(f'# runs made at {_made_at(made)}\n')
    out = csv.writer(f)
    out.writerow(['setting', 'seed', 'agent', 'actor_steps',
                  'episode_return'])
    for name, runs in results.items():
      for seed, agent, points in runs:
        out.writerows([name, seed, agent, int(step), ret]
                      for step, ret in points)

  # Across seeds: how many reached the target, the median steps of those
  # that did, and the final return's mean and spread.
  num_seeds = len({seed for runs in results.values() for seed, _, _ in runs})
  print_(f'\nAcross seeds ({num_seeds}):\n')
  print_('| setting | agent | seeds reaching target | median env steps to '
        'target (those reaching it) | final avg return, mean ± std |')
  print_('|---|---|---:|---:|---:|')
  for name, runs in results.items():
    by_agent = {}
    for seed, agent, points in runs:
      by_agent.setdefault(agent, []).append(_summary(points))
    for agent, summaries in sorted(by_agent.items()):
      reached = [r for r, _ in summaries if r is not None]
      finals = np.array([f for _, f in summaries])
      median = f'{int(np.median(reached))}' if reached else '-'
      print_(f'| {name} | {"-" if agent == "." else agent} | '
            f'{len(reached)}/{len(summaries)} | {median} | '
            f'{finals.mean():.1f} ± {finals.std():.1f} |')


if __name__ == '__main__':
  app.run(main)
