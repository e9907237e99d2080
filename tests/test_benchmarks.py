"""Every benchmark command the docs show runs to its end at a small budget
(issue 35: a change of defaults must not silently break a documented
command).

Each documented `python benchmarks/...` command is run as written, with the
flags of `SMALL` (and of `SMALL_WITH`, per command) replaced, added or left
to the script's default (budgets cut to seconds, outputs sent to the test's
directory so nothing under benchmarks/results/ is touched) and the lists of
`FIRST` cut to their first entry (one seed, one game, one setting, one
engine).
Commands that are then the same, in any order of their flags, run once. Commands that differ only in the
`--config.<field>=<value>` values they pass to the program (the MinAtar
tuning rows) run once, and each other command's values are checked against
the config they go to, without a launch: every launch costs 10-20 s of
start-up on 2 cores, the whole file must fit CI's budget.
"""

import csv
import json
import os
import shlex
import subprocess
import sys

import pytest

import docs_commands
from docs_commands import ROOT

from acme_impala.agent import presets
from acme_impala.launch import config_flags

_T = '{tmp}'  # Replaced by the test's directory.
# Per script: the flags (without --) set for the small run.
SMALL = {
    'benchmarks/cartpole_program.py': dict(max_actor_steps=3000),
    'benchmarks/cartpole_single_process.py': dict(max_steps=2000,
                                                  max_seconds=60),
    # Each run ends once it has reported two different env step counts (a
    # rate), within 90 s: beside the other test worker's programs Sample
    # Factory took 22 s to start, and in a CI run on an AMD EPYC with
    # AVX-512 (630f4a9) it had reported once (5,120 steps) at 45 s, ours
    # only 0 steps. One of its variants; the other worker's programs may be
    # running.
    'benchmarks/vs_sample_factory.py': dict(
        repeats=1, seconds=90, warmup_s=2, stop_after_reports=2,
        sf_variants='vtrace', json_out=f'{_T}/sf.json',
        require_idle='false'),
    # Enough steps for the 4 learner log rows (1 s apart) a setting's row
    # needs: 8k steps of 1 x 32 CartPole gave 3 in CI; an Atari learner's
    # first step compiles for 20-30 s.
    # 40k: on an AMD EPYC with AVX-512, EnvPool's 1 x 32 spent 20k steps
    # with 3 learner rows logged (the script needs 4).
    'benchmarks/throughput.py': dict(steps_per_run=40000, acme_seconds=3,
                                     actor_seconds=1),
    # Its own budget (20k steps) is what its first learner step needs.
    'benchmarks/startup.py': dict(repeats=1, methods='fork'),
    # One process (oneDNN as this environment has it), not one per setting,
    # no Atari learner (each compiles for minutes on a busy 2-core machine:
    # 7 min for the whole --quick table in CI) and one of our compile modes
    # beside Acme's (the modes' updates are compared in test_learning.py).
    'benchmarks/learner_bench.py': dict(quick=None, repeats=1,
                                        onednn='process',
                                        envs='CartPole-v1',
                                        modes='vtrace_and_optimizer',
                                        json_out=f'{_T}/learner.json'),
    'benchmarks/policy_bench.py': dict(quick=None),
    'benchmarks/optimizer_bench.py': dict(quick=None),
    'benchmarks/vtrace_bench.py': dict(quick=None),
    'benchmarks/allreduce_bench.py': dict(nets='shallow', steps=2, warmup=1,
                                          repeats=1),
    # One setting of each suite runs; the others' configs are checked by
    # the script before its first run.
    'benchmarks/laser_efficiency.py': dict(max_actor_steps=3000,
                                           max_settings=1,
                                           outdir=f'{_T}/laser'),
    'benchmarks/faults.py': dict(
        max_actor_steps=30000, actor_kill_every_s=6, learner_kill_at_s=9,
        replay_kill_at_s=14, sample_every_s=2, warmup_s=2),
    'benchmarks/soak.py': dict(minutes=0.4, warmup_minutes=0.1,
                               sample_every_s=2, tolerance_mb_per_min=1e6,
                               logdir=f'{_T}/soak'),
    # Its own per-seed CSV as the baseline (written before the comparison
    # reads it): the comparison's code runs too. One seed of one game: any
    # seed runs the same code.
    'benchmarks/minatar.py': dict(games='Breakout', seeds='0',
                                  max_actor_steps=3000,
                                  logroot=f'{_T}/minatar',
                                  outdir=f'{_T}/minatar_out',
                                  baseline_outdir=f'{_T}/minatar_out'),
    # Any number of episodes runs the same code.
    'benchmarks/minatar_random.py': dict(episodes=3),
    # One actor per game, no evaluators: the summary reads the actors'
    # episodes (and the committed single-task CSVs).
    'benchmarks/multitask.py': dict(
        seeds='0', max_actor_steps=3000, num_actors=5,
        program_flags='--noevaluator,--config.envs_per_actor=4',
        logroot=f'{_T}/multitask', outdir=f'{_T}/multitask_out'),
    # The condition with every part (shared replay, PBT); the others run
    # the same program with fewer flags. Evolutions every 2 learner steps;
    # 2 agents, not 4 (the same code at half the processes: 4.8 min on a
    # loaded machine with 4).
    'benchmarks/pbt.py': dict(
        seeds='0', conditions='shared_pbt', max_actor_steps=3000,
        lr_factors='0.5,1',
        pbt_interval_steps=2,
        program_flags='--config.envs_per_actor=4,--eval_episodes=2',
        logroot=f'{_T}/pbt', outdir=f'{_T}/pbt_out'),
    # One actor of the preset's 8 Pongs; 10k steps: at 3k a quiet run
    # stopped before the learner logged a row (nothing to summarise).
    'benchmarks/pong.py': dict(seeds='0', max_actor_steps=10000,
                               program_flags='--num_actors=1',
                               logroot=f'{_T}/pong', outdir=f'{_T}/pong_out'),
    'benchmarks/reverb_capacity.py': dict(seconds=0.5, writers=1,
                                          configs='cartpole'),
}
# Per (script, flag as written): flags that replace SMALL's where a
# documented command passes that flag; DROP leaves the flag out (the
# script's default).
DROP = object()
SMALL_WITH = {
    # The gymnasium and EnvPool Pong programs at 1 x 16 and 2 x 8: its
    # EnvPool 2 x 8 run, which is the next command's, so the two run once
    # (its gymnasium 1 x 16 run took 50 s of CPU and 55-60 s of wall time
    # in CI runs on 2 cores). gymnasium's Atari environments run in the
    # gymnasium actor-only row's run, its program path in MinAtar's
    # programs.
    ('benchmarks/throughput.py', '--settings=1x16,2x8'): dict(
        engines=DROP, settings='2x8', steps_per_run=20000),
    # The EnvPool Atari run (2 x 8) likewise: at 40k it took 99 s of a CI
    # run on a 2.6 GHz AMD EPYC; an Atari learner step takes 640 env steps,
    # so 20k leave it tens of steps past its compilation.
    ('benchmarks/throughput.py', '--settings=2x8,1x16,2x128'): dict(
        steps_per_run=20000),
    ('benchmarks/throughput.py', '--settings=2x8'): dict(steps_per_run=20000),

    # A sweep of 2 agents sharing the replay, not 4: the sharing runs the
    # same code, at half the processes.
    ('benchmarks/laser_efficiency.py', '--suite=sharing'): dict(
        sweep_entropy_costs='0.01'),
    # Its first setting, 1 actor x 1 CartPole, steps slowest (2.5 min of a
    # CI run); one of 32 reaches the rows' budget in seconds.
    ('benchmarks/throughput.py',
     '--settings=1x1,1x8,1x16,1x32,1x64,2x32,4x16,8x8'): dict(settings='1x32'),
    # MinAtar's replay states (benchmarks/minatar.py once shadowed the
    # package there); CartPole's are the same code.
    ('benchmarks/learner_bench.py', '--replay_states'): dict(
        envs='MinAtar/Breakout-v1'),
}
# List flags cut to their first entry.
FIRST = ('seeds', 'games', 'settings', 'actor_rows', 'writers', 'configs',
         'engines')
# Flags whose values are only passed on to the program as config overrides,
# and the config each script gives them to.
CONFIG_FLAGS = {'benchmarks/minatar.py': ('program_flags', 'minatar')}
# Setup scripts documented with a benchmark: run by the test of the
# benchmark that needs them.
SETUP = {'benchmarks/setup_sample_factory.sh': 'benchmarks/vs_sample_factory.py'}


def _script(words):
  return next((w for w in words if w.startswith('benchmarks/')), None)


def _flag(word):
  return word.lstrip('-').split('=')[0]


def documented():
  """[(doc, argv)] of every documented benchmark run (each `&&` part)."""
  runs = []
  for doc, command in docs_commands.documented_commands():
    for part in command.split('&&'):
      words = shlex.split(part)
      if _script(words) and words[0] == 'python':
        runs.append((doc, words))
  return runs


def small(words):
  """The small run of a documented command (with `{tmp}` placeholders)."""
  script = _script(words)
  flags = dict(SMALL[script])
  for (where, word), more in SMALL_WITH.items():
    if where == script and word in words:
      flags.update(more)
  out = [words[0], script]
  for word in words[words.index(script) + 1:]:
    name = _flag(word)
    if name in flags:
      continue
    if name in FIRST and '=' in word:
      word = word.split(',')[0]
    out.append(word)
  for name, value in flags.items():
    if value is not DROP:
      out.append(f'--{name}' if value is None else f'--{name}={value}')
  return out


def _config_args(words):
  """(run key, config overrides) of a small run: the key leaves out the
  values a script only passes on to the program's config, and the order of
  the flags (absl's flags are the same in any order)."""
  script = _script(words)
  if script not in CONFIG_FLAGS:
    return _key(words), []
  flag, _ = CONFIG_FLAGS[script]
  key, overrides = [], []
  for word in words:
    if _flag(word) == flag:
      values = word.split('=', 1)[1].split(',')
      if all(v.startswith('--config.') for v in values if v):
        overrides += [v for v in values if v]
        continue
    key.append(word)
  return _key(key), overrides


def _key(words):
  at = words.index(_script(words)) + 1
  return tuple(words[:at]) + tuple(sorted(words[at:]))


def runs():
  """The distinct small runs: {key: argv}, and per key the config overrides
  of the documented commands it stands for."""
  keyed, overrides = {}, {}
  for _, words in documented():
    argv = small(words)
    key, config = _config_args(argv)
    keyed.setdefault(key, argv)
    overrides.setdefault(key, []).append((_script(words), config))
  return keyed, overrides


def test_every_documented_benchmark_has_a_small_budget():
  scripts = {_script(words) for _, words in documented()}
  assert len(scripts) >= 10  # The extraction finds the benchmarks.
  missing = scripts - set(SMALL)
  assert not missing, f'add a small budget to SMALL for {sorted(missing)}'
  for doc, command in docs_commands.documented_commands():
    for part in command.split('&&'):
      words = part.split()
      if words[0] == 'bash' and words[1].startswith('benchmarks/'):
        assert SETUP.get(words[1]) in scripts, (doc, part)


def test_config_values_of_commands_run_once_are_valid():
  """The config overrides of each command folded into another's run build
  a valid config (the config's own checks, as the program makes it)."""
  _, overrides = runs()
  checked = 0
  for entries in overrides.values():
    for script, config in entries:
      if not config:
        continue
      preset = CONFIG_FLAGS[script][1]
      presets.get_config(preset).replace(
          **config_flags.parse_overrides(config))
      checked += 1
  assert checked >= 4  # The tuning rows are folded.


def test_a_bad_config_value_is_caught_by_that_check():
  with pytest.raises(ValueError, match='learning_rate'):
    presets.get_config('minatar').replace(**config_flags.parse_overrides(
        ['--config.learning_rate=-1']))


_RUNS = runs()[0]


@pytest.mark.parametrize('key', list(_RUNS), ids=[
    ' '.join(argv[1:]).replace('benchmarks/', '')[:90]
    for argv in _RUNS.values()])
def test_documented_benchmark_runs_at_a_small_budget(key, tmp_path):
  argv = [a.replace(_T, str(tmp_path)) for a in _RUNS[key]]
  script = argv[1]
  if script == 'benchmarks/vs_sample_factory.py':
    setup = subprocess.run(
        ['bash', os.path.join(ROOT, 'benchmarks/setup_sample_factory.sh')],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=900)
    assert setup.returncode == 0, setup.stdout[-3000:]
  argv = [sys.executable] + argv[1:]
  before = _results_state()
  rc, out = docs_commands.run(argv, timeout=600)
  assert rc == 0, f'{shlex.join(argv)}\n{out[-4000:]}'
  # Every benchmark prints the commit its table was measured at.
  commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True).stdout.strip()
  assert commit[:7] in out, out[-3000:]
  assert '|---' in out, out[-3000:]  # ... and a table.
  assert _results_state() == before  # Nothing written into the repository.


def _results_state():
  results = os.path.join(ROOT, 'benchmarks', 'results')
  return sorted((os.path.relpath(os.path.join(d, f), results),
                 os.path.getmtime(os.path.join(d, f)))
                for d, _, files in os.walk(results) for f in files)


def _script_run(script, *flags):
  return docs_commands.run([sys.executable, f'benchmarks/{script}',
                            *flags], timeout=120)


def test_vs_sample_factory_rate_needs_two_different_counts():
  # In its own process: the script defines absl flags at import.
  checks = """
import vs_sample_factory as v
rate = v.window_rate
# Before the warm-up (1 s) nothing counts; 1000 steps from 2 s to 6 s.
assert rate([(0.5, 0), (2., 1000), (4., 1500), (6., 2000)], 1.) == 250.
# Rows read in one poll share its time: no rate (no division by 0).
assert rate([(2., 0), (2., 1000)], 1.) is None
# Reports without progress are no measurement, not a rate of 0.
assert rate([(2., 0), (4., 0), (6., 0)], 1.) is None
assert rate([(0.5, 0), (2., 1000)], 1.) is None
assert v.window([(2., 0), (2., 1000), (3., 1000)], 1.) == [
    (2., 1000), (3., 1000)]
print('checked')
"""
  done = subprocess.run([sys.executable, '-c', checks],
                        cwd=os.path.join(ROOT, 'benchmarks'),
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 0 and 'checked' in done.stdout, done.stderr


def test_pbt_names_its_failed_runs_when_none_finished(tmp_path):
  # Logdirs of unfinished runs: each run is refused before it starts.
  for condition in ('impala', 'shared_pbt'):
    (tmp_path / 'runs' / f'{condition}_s0').mkdir(parents=True)
  rc, out = _script_run('pbt.py', '--seeds=0',
                        '--conditions=impala,shared_pbt',
                        f'--logroot={tmp_path}/runs',
                        f'--outdir={tmp_path}/out')
  assert rc != 0, out
  assert ('2 run(s) failed: impala seed 0; shared_pbt seed 0; none '
          'finished') in out, out
  assert 'nothing to summarise' not in out, out


def test_pong_summarises_a_seed_run_elsewhere_from_its_csv(tmp_path):
  """A seed with no run directory here but with its per-seed CSV in
  --outdir (a run made on another machine) is tabulated and drawn from that
  CSV, which is left as it was."""
  out = tmp_path / 'out'
  out.mkdir()
  rows = [(0, 0, 'nan', 'nan', 1), (1000, 10, -20.5, -21, 2),
          (2000, 20, 18.5, 17, 3), (3000, 30, 19.25, 20, 4)]
  path = out / 'pong_s7.csv'
  with open(path, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['env_steps', 'wall_seconds', 'train_return_mean100',
                     'eval_return_mean10', 'learner_steps', 'commit', 'cpu'])
    for row in rows:
      writer.writerow(list(row) + ['abc1234', 'Some CPU'])
  before = path.read_bytes()
  rc, text = _script_run('pong.py', '--summarize_only', '--seeds=7',
                         '--max_actor_steps=3000',
                         f'--logroot={tmp_path}/runs', f'--outdir={out}')
  assert rc == 0, text
  # Final training and evaluator means, first reach of 18 (at 2000 env
  # steps), 30 s = 0.5 min, 3000 / 30 = 100 env steps/s.
  assert ('| 7 | 3,000 | 19.2 | 20.0 | 2,000 | 0.5 | 100 | abc1234 | '
          'Some CPU |') in text, text
  assert 'Seed(s) 7: from the CSV' in text, text
  assert path.read_bytes() == before
  assert (out / 'pong.png').stat().st_size > 0
  # Run to another budget: left out, by name.
  rc, text = _script_run('pong.py', '--summarize_only', '--seeds=7',
                         '--max_actor_steps=5000',
                         f'--logroot={tmp_path}/runs', f'--outdir={out}')
  assert rc != 0, text
  assert 'ends at 3,000 env steps, not --max_actor_steps=5,000' in text, text


def _finished_sweep(logdir, record, returns):
  """A finished sweep's files as pbt.py reads them: its benchmark_run.json
  and each agent's actor episodes (agent i's return: returns[i])."""
  for i, value in enumerate(returns):
    actor = os.path.join(logdir, 'logs', f'agent_{i}', 'actor_0')
    os.makedirs(actor)
    with open(os.path.join(actor, 'logs.csv'), 'w', newline='') as f:
      writer = csv.writer(f)
      writer.writerow(['actor_steps', 'episode_return'])
      for step in range(0, 1200, 10):
        writer.writerow([step, value])
  with open(os.path.join(logdir, 'benchmark_run.json'), 'w') as f:
    json.dump(record, f)


def test_pbt_summary_adds_up_seeds_run_one_at_a_time(tmp_path):
  """`--seeds=1` after `--seeds=0`: the summary covers both finished runs
  (not only the seed just run), and leaves out, by name, a run of the same
  condition made with another budget."""
  record = dict(game='Breakout', condition='impala', max_actor_steps=1000,
                replay_fraction=0.5, program_flags=[],
                lr_factors=['0.5', '1'], num_actors=1, commit='abc1234',
                cpu='test CPU')
  runs = tmp_path / 'runs'
  _finished_sweep(str(runs / 'impala_s0'), dict(record, seed='0'), [1., 3.])
  _finished_sweep(str(runs / 'impala_s1'), dict(record, seed='1'), [2., 5.])
  _finished_sweep(str(runs / 'impala_s2'),
                  dict(record, seed='2', max_actor_steps=5000), [9., 9.])
  rc, out = _script_run('pbt.py', '--summarize_only', '--seeds=1',
                        '--conditions=impala', '--lr_factors=0.5,1',
                        '--max_actor_steps=1000', f'--logroot={runs}',
                        f'--outdir={tmp_path}/out')
  assert rc == 0, out
  with open(tmp_path / 'out' / 'pbt_summary.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  assert [(r['seed'], r['best'], r['mean']) for r in rows] == [
      ('0', '3.00', '2.00'), ('1', '5.00', '3.50')]
  assert f'{runs}/impala_s2 was run with other settings' in out, out
  assert "'max_actor_steps': (5000, 1000)" in out, out
  assert '| impala | 4.0 | 3.0, 5.0 |' in out, out


def test_pbt_refuses_a_replay_fraction_of_one():
  rc, out = _script_run('pbt.py', '--replay_fraction=1', '--summarize_only')
  assert rc != 0
  assert '--replay_fraction=1.0: expected' in out and '0 <= f < 1' in out


def _multitask_logdir(logdir, episodes, record=None):
  """A 5-actor minatar5 run: each actor's episodes of 100 steps."""
  logdir.mkdir(parents=True)
  (logdir / 'config.json').write_text(json.dumps(
      {'configs': [{'env_ids': ['minatar5']}], 'options': {'num_actors': 5},
       'git_commit': '0123456789abcdef-dirty'}))
  for i in range(5):
    (logdir / 'logs' / f'actor_{i}').mkdir(parents=True)
    rows = ['actor_steps,episode_return,episode_length'] + [
        f'{(e + 1) * 500},{i},100' for e in range(episodes)]
    (logdir / 'logs' / f'actor_{i}' / 'logs.csv').write_text(
        '\n'.join(rows) + '\n')
  if record is not None:
    (logdir / 'benchmark_run.json').write_text(json.dumps(record))


def test_multitask_goes_on_past_a_failed_seed_and_marks_it_unfinished(
    tmp_path):
  runs = tmp_path / 'runs'
  # Seed 1 stopped part-way: refused as a run (noted), summarised.
  _multitask_logdir(runs / 's1', episodes=20)
  # Seed 0 finished at another commit, on another CPU.
  _multitask_logdir(runs / 's0', episodes=50, record=dict(
      seed='0', max_actor_steps=25000, num_actors=5, program_flags=[],
      commit='c0ffee1', cpu='Other CPU', exit=0,
      command=['impala_lp.py', '--lp_launch_type=local_mp',
               '--config=minatar', '--config.env_ids=minatar5',
               '--num_actors=5', '--seed=0', '--max_actor_steps=25000',
               f'--logdir={runs}/s0', '--progress_interval_s=60']))
  rc, out = _script_run('multitask.py', '--seeds=1,0', '--num_actors=5',
                        '--max_actor_steps=25000', '--include_unfinished',
                        f'--logroot={runs}', f'--outdir={tmp_path}/out',
                        f'--singletask_dir={tmp_path}/none')
  assert rc != 0, out
  assert '1 run(s) failed: seed 1' in out, out
  assert '| 1 (unfinished at 10,000 env steps) |' in out, out
  with open(tmp_path / 'out' / 'multitask_summary.csv', newline='') as f:
    rows = {r['seed']: r for r in csv.DictReader(f)}
  assert [rows['0'][k] for k in ('total_env_steps', 'finished', 'commit',
                                 'cpu')] == ['25000', 'yes', 'c0ffee1',
                                             'Other CPU']
  assert [rows['1'][k] for k in ('total_env_steps', 'finished', 'commit',
                                 'cpu')] == ['10000', 'no', '0123456-dirty',
                                             'unknown']


def test_throughput_reads_each_node_kinds_cpu_from_the_supervisors_pids(
    tmp_path):
  # The program table's CPU columns: the pids of the supervisor's
  # nodes.json, summed per node kind; a pid that is gone (a node between
  # restarts) is skipped, and there is nothing before the file exists.
  code = f'''
import json, os, sys, time
sys.path.insert(0, 'benchmarks')
import throughput
status = {str(tmp_path)!r}
assert throughput.node_cpu_seconds(status) is None
gone = os.fork()
if gone == 0:
  os._exit(0)
os.waitpid(gone, 0)
with open(os.path.join(status, 'nodes.json'), 'w') as f:
  json.dump({{'learner/0': {{'pid': os.getpid()}},
             'actor/0': {{'pid': gone}}}}, f)
before = throughput.node_cpu_seconds(status)
end = time.process_time() + 0.5
while time.process_time() < end:
  pass
after = throughput.node_cpu_seconds(status)
print(json.dumps([before, after]))
'''
  proc = subprocess.run([sys.executable, '-c', code], cwd=ROOT, text=True,
                        capture_output=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  before, after = json.loads(proc.stdout.strip().splitlines()[-1])
  assert set(after) == {'learner'}, after
  assert 0.4 <= after['learner'] - before['learner'] <= 5, (before, after)


def test_throughput_actor_parts_time_the_loops_three_calls():
  # The 'parts' probe wraps the policy, the engine's step and the loop's
  # record in place: each must have been timed (a loop that stopped calling
  # one of them by the wrapped name would leave it at zero), and the three
  # sit inside the loop's wall time per env step.
  rc, out = _script_run('throughput.py',
                        '--probe=gymnasium:CartPole-v1:8:parts',
                        '--actor_seconds=1')
  assert rc == 0, out
  parts = json.loads(out.strip().splitlines()[-1])
  assert parts['calls'] > 0, parts
  named = [parts[f'{p}_us'] for p in ('policy', 'engine', 'record')]
  assert all(x > 0 for x in named), parts
  # One policy call per loop step of 8 envs: about 8 env steps per call
  # (fewer where an environment restarted).
  assert 0 < parts['steps'] / parts['calls'] <= 8, parts
  assert sum(named) < 1e6 / parts['env_sps'], parts
