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
# The table in docs/benchmarks.md was measured with the cartpole config as it was before
# its baseline and entropy costs were tuned for the IMPALA program (0.1,
# 0.003); these flags reproduce it. `--base_flags=` runs the current defaults.
flags.DEFINE_list('base_flags',
                  ['--config.baseline_cost=0.5', '--config.entropy_cost=0.01'],
                  'Config overrides given to every setting.')
flags.DEFINE_string('outdir', os.path.join(_ROOT, 'benchmarks', 'results'),
                    'Where the PNG curves go.')
flags.DEFINE_integer('max_settings', 0, 'Run only the first N settings of '
                     'the suite (0: all); every setting\'s config is still '
                     'checked before the first run.')
flags.DEFINE_integer('first_setting', 0, 'Start at this setting of the '
                     'suite (0-based; with --max_settings, a slice): the '
                     'rest of a suite stopped part-way.')
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
      ('sweep shared f=0.875 no TR', 'laser_sweep_lp.py',
       ['--learning_rates=1e-3,2e-3', '--entropy_costs=0.01',
        '--config.entropy_on_online_only=true']),
  ]


def _curves(logdir):
  """{agent: [(actor_steps, episode_return)]} from actor CSVs."""
  curves = {}
  for path in glob.glob(os.path.join(logdir, 'logs', '**', 'actor_*',
                                     'logs.csv'), recursive=True):
    agent = os.path.relpath(os.path.dirname(os.path.dirname(path)),
                            os.path.join(logdir, 'logs'))
    with open(path) as f:
      for row in csv.DictReader(f):
        try:
          point = (float(row['actor_steps']), float(row['episode_return']))
        except (KeyError, ValueError):
          continue
        if point[0] == point[0]:
          curves.setdefault(agent, []).append(point)
  # By step only (a stable sort keeps each actor's order within a step).
  return {k: sorted(v, key=lambda p: p[0]) for k, v in curves.items()}


# What the learners logged that explains a result: means over the last
# tenth of each learner's logged steps.
LEARNER_COLUMNS = ('rejected_fraction_online', 'rejected_fraction_replay',
                   'policy_lag_mean', 'replay_staleness_mean', 'entropy')


def learner_summary(logdir):
  """{agent: {column: mean over the last tenth of its steps, and
  'learner_steps': its last}} from the learners' CSV logs."""
  from acme_impala.launch import curves  # pylint: disable=g-import-not-at-top
  out = {}
  for path in glob.glob(os.path.join(logdir, 'logs', '**', 'learner',
                                     'logs.csv'), recursive=True):
    agent = os.path.relpath(os.path.dirname(os.path.dirname(path)),
                            os.path.join(logdir, 'logs'))
    columns = curves.read_csv(path)
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


def _write_learner_summary(learners, commit):
  with open(os.path.join(FLAGS.outdir, f'{_prefix()}_learner.csv'), 'w',
            newline='') as f:
    out = csv.writer(f)
    out.writerow(['setting', 'seed', 'agent', 'learner_steps'] +
                 list(LEARNER_COLUMNS) + ['commit'])
    for (name, seed), agents in learners.items():
      for agent, row in sorted(agents.items()):
        out.writerow([name, seed, agent, row['learner_steps']] +
                     [f'{row[c]:.4g}' for c in LEARNER_COLUMNS] + [commit])


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


def _read_curves_csv(path):
  """{setting: [(seed, agent, points)]} from a `<prefix>_curves.csv`."""
  results = {}
  with open(path) as f:
    # Lines starting with '#' say where the runs were made.
    for row in csv.DictReader(l for l in f if not l.startswith('#')):
      runs = results.setdefault(row['setting'], {})
      runs.setdefault((row['seed'], row['agent']), []).append(
          (float(row['actor_steps']), float(row['episode_return'])))
  return {name: [(seed, agent, sorted(points, key=lambda p: p[0]))
                 for (seed, agent), points in runs.items()]
          for name, runs in results.items()}


def _prefix():
  """Output file prefix: the suite, and the environment unless CartPole
  (whose files predate the others)."""
  if FLAGS.env == 'CartPole-v1':
    return FLAGS.suite
  env = re.sub(r'[^a-z0-9]+', '_', FLAGS.env.lower().replace('-v1', ''))
  return f'{FLAGS.suite}_{env.strip("_")}'


def main(argv):
  del argv
  os.makedirs(FLAGS.outdir, exist_ok=True)
  commit = provenance.git_commit()
  print(f'laser_efficiency.py --suite={FLAGS.suite} at commit {commit} '
        f'on {provenance.cpu()}: '
        f''
        f'env {FLAGS.env}, seeds {",".join(FLAGS.seeds)}, '
        f'{FLAGS.max_actor_steps} env steps per agent, target '
        f'{FLAGS.target:g}, base flags {" ".join(FLAGS.base_flags) or "none"}',
        flush=True)
  if FLAGS.from_csv:
    results = _read_curves_csv(FLAGS.from_csv)
    summary = FLAGS.from_csv.replace('_curves.csv', '_summary.csv')
    cpu = 'CPU not recorded'
    if os.path.exists(summary):  # The commit and CPU the runs were made on.
      with open(summary) as f:
        row = next(csv.DictReader(f))
      commit, cpu = row['commit'], row.get('cpu') or cpu
    print(f'(re-summarised from {FLAGS.from_csv}, runs made at commit '
          f'{commit} on {cpu}; not re-run)')
    _report(results, commit, cpu)
    return
  settings = _settings()
  for name, _, args in settings:
    _check_config(name, args)
  settings = settings[FLAGS.first_setting:]
  if FLAGS.max_settings:
    settings = settings[:FLAGS.max_settings]
  results, failed, learners = {}, [], {}
  for seed in FLAGS.seeds:
    for name, prog, args in settings:
      logdir = tempfile.mkdtemp(prefix='laser_eff_')
      print(f'{name}, seed {seed}...', flush=True)
      try:
        proc = subprocess.run(
            [sys.executable, os.path.join(_ROOT, 'programs', prog)] +
            _common_flags(seed, logdir) + args, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
            timeout=FLAGS.run_timeout_s)
        if proc.returncode != 0:
          print(f'  failed ({proc.returncode}): {proc.stdout[-500:]}')
          failed.append(f'{name}, seed {seed}')
          continue
        for agent, points in _curves(logdir).items():
          results.setdefault(name, []).append((seed, agent, points))
        learners[name, seed] = learner_summary(logdir)
        _write_learner_summary(learners, commit)
        # The files so far: a long suite stopped part-way keeps its runs.
        _report(results, commit, provenance.cpu(), quiet=True)
      finally:
        shutil.rmtree(logdir, ignore_errors=True)
  _report(results, commit, provenance.cpu())
  if failed:
    raise SystemExit(f'laser_efficiency.py: {len(failed)} run(s) failed: '
                     f'{"; ".join(failed)}')


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


def _report(results, commit, cpu, quiet=False):
  """Prints the tables (unless quiet), draws the PNGs and writes the CSVs."""
  print_ = (lambda *a, **k: None) if quiet else print
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

  with open(os.path.join(FLAGS.outdir, f'{_prefix()}_summary.csv'),
            'w', newline='') as f:
    out = csv.writer(f)
    out.writerow(['setting', 'seed', 'agent', 'env_steps_to_target',
                  'final_avg_return', 'commit', 'cpu', 'env',
                  'max_actor_steps'])
    for name, runs in results.items():
      for seed, agent, points in runs:
        reached, final = _summary(points)
        out.writerow([name, seed, agent, '' if reached is None else
                      int(reached), f'{final:.2f}', commit, cpu, FLAGS.env,
                      FLAGS.max_actor_steps])
  with open(os.path.join(FLAGS.outdir, f'{_prefix()}_curves.csv'), 'w',
            newline='') as f:
    f.write(f'# runs made at commit {commit} on {cpu}\n')
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
