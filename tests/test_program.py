"""The Launchpad program: test_mt graph, local_mp runs, restore, failures.

These start real Reverb servers and Launchpad programs on free ports and
check that they finish, write their logs, and leave no process behind.
"""

import csv
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from acme_impala.agent import config as config_lib
from acme_impala.agent import presets
from acme_impala.distributed import lifecycle
from acme_impala.distributed import run_record
from acme_impala.launch import config_flags
from acme_impala.launch import local

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
SMALL = ['--config.batch_size=8', '--config.unroll_length=10',
         '--config.lstm_size=16', '--config.envs_per_actor=2',
         '--config.max_queue_size=64']


def _rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def _run(args, logdir, timeout=240, env_extra=None):
  """Runs programs/impala_lp.py in its own session; returns (rc, output)."""
  env = dict(os.environ)
  env.update(env_extra or {})
  proc = subprocess.Popen(
      [PYTHON, os.path.join(ROOT, 'programs', 'impala_lp.py'),
       f'--logdir={logdir}'] + SMALL + args,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
      start_new_session=True, text=True)
  try:
    out, _ = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    pytest.fail(f'program did not finish within {timeout} s:\n{out[-5000:]}')
  return proc.returncode, out, proc.pid


def _node_output(logdir, node):
  with open(os.path.join(logdir, 'nodes', f'{node}.log'),
            errors='replace') as f:
    return f.read()


def _session_processes(sid):
  """Processes still alive in the launcher's session (orphans)."""
  left = []
  for p in psutil.process_iter(['pid', 'cmdline']):
    try:
      if os.getsid(p.info['pid']) == sid and p.status() != 'zombie':
        left.append(p.info)
    except (ProcessLookupError, psutil.Error, PermissionError):
      pass
  return left


def test_make_program_runs_under_test_mt(tmp_path):
  import launchpad as lp  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import presets  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import lifecycle  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import program as program_lib  # pylint: disable=g-import-not-at-top
  config = presets.get_config('cartpole').replace(
      batch_size=8, unroll_length=10, lstm_size=16, envs_per_actor=2,
      max_queue_size=64)
  logdir = str(tmp_path / 'mt')
  program = program_lib.make_program(config, num_actors=2,
                                     max_actor_steps=3000, logdir=logdir)
  assert isinstance(program, lp.Program)
  assert set(program.groups) == {'replay', 'counter', 'coordinator',
                                 'learner', 'actor', 'evaluator'}
  assert local.launch_and_wait(program, logdir, 'test_mt') == 0
  # The program's stop is not this process's: a later program's calls go out.
  assert not lifecycle.stop_requested()
  learner = _rows(os.path.join(logdir, 'logs', 'learner', 'logs.csv'))
  assert learner and float(learner[-1]['learner_steps']) >= 1
  for key in ('loss', 'policy_loss', 'baseline_loss', 'entropy'):
    assert key in learner[-1]
  for i in range(2):
    actor = _rows(os.path.join(logdir, 'logs', f'actor_{i}', 'logs.csv'))
    assert actor and 'episode_return' in actor[0]
  evaluator = _rows(os.path.join(logdir, 'logs', 'evaluator', 'logs.csv'))
  assert evaluator and {'actor_steps', 'episode_return'} <= set(evaluator[0])
  assert not lifecycle.read_failures(os.path.join(logdir, 'status'))


@pytest.fixture(scope='module')
def first_run(tmp_path_factory):
  logdir = str(tmp_path_factory.mktemp('mp') / 'run')
  rc, out, pid = _run(['--num_actors=2', '--max_actor_steps=4000',
                       '--progress_interval_s=1'], logdir)
  return logdir, rc, out, pid


# Lines every process printed before quiet.silence() (issue 14).
NOISE = ('Could not load dynamic library', 'cudart', 'cuInit',
         'Gym has been unmaintained', 'Sets are not currently considered')


def test_terminal_shows_progress_and_no_noise(first_run):
  logdir, rc, out, _ = first_run
  assert rc == 0, out[-5000:]
  progress = re.findall(
      r'^impala: \d+s \| (?:starting|env steps [\d.k]+/4\.0k \(\d+%\))', out,
      re.MULTILINE)
  assert progress, out
  assert re.search(r'^impala: ran \d+s; \d+ env steps, \d+ learner steps',
                   out, re.MULTILINE), out
  # The end of the budget is said as such, not as a kill.
  assert re.search(r'^impala: stopping: the budget is reached: [\d,]+ actor '
                   r'steps >= max_actor_steps=4,000\.$', out, re.MULTILINE), out
  assert 'SIGTERM' not in out
  for noise in NOISE:
    assert noise not in out
  # Node output is in one file per node, not in the terminal.
  assert not re.search(r'^\[\w+/\d+\]', out, re.MULTILINE), out
  logs = sorted(os.listdir(os.path.join(logdir, 'nodes')))
  assert logs == ['actor-0.log', 'actor-1.log', 'coordinator-0.log',
                  'counter-0.log', 'evaluator-0.log', 'learner-0.log',
                  'replay-0.log']
  learner = _node_output(logdir, 'learner-0')
  assert 'learner: first step done' in learner
  # config.warm_up_update (the default): compiled before its first batch.
  warmed = learner.find('learner: update traced and compiled')
  assert 0 <= warmed < learner.index('learner: first step done'), learner
  assert 'warming up the update failed' not in learner
  for name in logs:
    text = _node_output(logdir, name[:-len('.log')])
    for noise in NOISE:
      assert noise not in text, (name, noise)


def test_plain_impala_learns_from_online_rows_only(first_run):
  """f = 0: every row of every batch online (batch_size 8 in SMALL), and no
  replay metric (NaN)."""
  logdir, rc, _, _ = first_run
  assert rc == 0
  rows = _rows(os.path.join(logdir, 'logs', 'learner', 'logs.csv'))
  assert rows
  for row in rows:
    assert (float(row['online_rows']), float(row['replayed_rows'])) == (
        8, 0), row
    for key in ('replay_staleness_mean', 'walk_start_fraction',
                'rejected_fraction_replay'):
      assert row[key] == 'nan', (key, row)
  assert float(rows[-1]['online_rows_total']) == (
      8 * float(rows[-1]['learner_steps']))


def test_run_writes_its_curves(first_run):
  logdir, _, out, _ = first_run
  path = os.path.join(logdir, 'curves.png')
  assert f'impala: curves: {path}' in out
  with open(path, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  assert os.path.getsize(path) > 10_000


def test_config_json_records_the_run(first_run):
  logdir, _, _, _ = first_run
  record = run_record.read_record(logdir)
  expected = presets.get_config('cartpole').replace(
      **config_flags.parse_overrides(SMALL))
  # Round trip: the recorded config is the one the run used.
  assert run_record.config_from_dict(record['config']) == expected
  assert run_record.load_config(logdir) == expected.with_annealing_horizon(
      4000)
  assert record['options']['max_actor_steps'] == 4000
  assert record['options']['num_actors'] == 2
  assert record['options']['config_name'] == 'cartpole'
  assert record['options']['lp_launch_type'] == 'local_mp'
  assert record['versions']['tensorflow'] == '2.8.4'
  assert record['versions']['dm-launchpad'] == '0.5.2'
  assert record['git_commit'] is None or re.fullmatch(
      r'[0-9a-f]{40}(-dirty)?', record['git_commit'])


def test_restore_with_a_changed_hyperparameter_fails_before_any_process(
    first_run):
  logdir, _, _, _ = first_run
  sizes = {name: os.path.getsize(os.path.join(logdir, 'nodes', name))
           for name in os.listdir(os.path.join(logdir, 'nodes'))}
  record = run_record.read_record(logdir)
  rc, out, _ = _run(['--restore', '--config.learning_rate=0.01',
                     '--config.entropy_cost=0.5', '--max_actor_steps=9000'],
                    logdir, timeout=120)
  assert rc == 2, out[-3000:]
  old = record['config']
  assert (f"config.learning_rate: {old['learning_rate']!r} recorded, 0.01 "
          'given') in out
  assert (f"config.entropy_cost: {old['entropy_cost']!r} recorded, 0.5 "
          'given') in out
  assert 'max_actor_steps' not in out.split('error:')[1]  # A run option.
  # No node started: no node wrote a line, the record is unchanged.
  assert sizes == {name: os.path.getsize(os.path.join(logdir, 'nodes', name))
                   for name in os.listdir(os.path.join(logdir, 'nodes'))}
  assert run_record.read_record(logdir) == record


def test_local_mp_run_exits_0_writes_csv_and_leaves_no_process(first_run):
  logdir, rc, out, pid = first_run
  assert rc == 0, out[-5000:]
  # The launcher speaks with the program's own name.
  assert 'impala: all nodes stopped; restarts: none; exiting with status 0.' in out
  for label in ('learner', 'actor_0', 'actor_1', 'evaluator'):
    path = os.path.join(logdir, 'logs', label, 'logs.csv')
    assert os.path.exists(path), label
  time.sleep(1)
  assert _session_processes(pid) == []
  assert os.listdir(os.path.join(logdir, 'tensorboard'))


def test_without_restore_an_existing_logdir_is_refused(first_run):
  logdir, _, _, _ = first_run
  rc, out, _ = _run(['--max_actor_steps=100'], logdir, timeout=120)
  assert rc == 2
  assert 'already holds a run' in out and '--restore' in out


def _damage(path, how):
  if how == 'garbage':
    with open(path, 'w') as f:
      f.write('not a checkpoint state {{{')
  elif how == 'truncate':
    with open(path, 'rb') as f:
      data = f.read()
    with open(path, 'wb') as f:
      f.write(data[:len(data) // 2])
  else:
    os.remove(path)


def _one(directory, suffix):
  return next(os.path.join(directory, f) for f in sorted(os.listdir(directory))
              if suffix in f)


@pytest.mark.parametrize('target,how,restore,message', [
    # The case: a damaged learner state file is not "no run".
    ('learner/checkpoint', 'garbage', True, 'learner/checkpoint'),
    ('learner/checkpoint', 'garbage', False, 'already holds a run'),
    ('learner/checkpoint', 'remove', False, 'counter/checkpoint'),
    ('learner/checkpoint', 'remove', True, 'learner/checkpoint is missing'),
    ('learner/.index', 'truncate', True, 'cannot be read'),
    ('learner/.data-', 'truncate', True, 'cannot be read'),
    ('counter/.index', 'truncate', True, 'counter/ckpt-'),
    ('config.json', 'remove', True, 'config.json is missing'),
    ('config.json', 'garbage', True, 'config.json is not valid JSON'),
    ('config.json', 'remove', False, 'already holds a run'),
])
def test_the_logdir_guard_names_what_is_in_the_way(first_run, tmp_path,
                                                   target, how, restore,
                                                   message):
  """Issue 38: one guard reads the whole logdir (record, learner, counter,
  replay) before any node starts; it names the damaged, missing or
  leftover file, and changes nothing."""
  import shutil  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import program as program_lib  # pylint: disable=g-import-not-at-top
  source, rc, out, _ = first_run
  assert rc == 0, out[-3000:]
  logdir = str(tmp_path / 'copy')
  shutil.copytree(source, logdir)
  program_lib.check_logdir_for_run(logdir, [''], restore=True)  # Intact.
  if target == 'config.json':
    path = os.path.join(logdir, target)
  else:
    role, name = target.split('/')
    directory = os.path.join(logdir, 'checkpoints', role)
    path = (os.path.join(directory, name) if name == 'checkpoint' else
            _one(directory, name))
  _damage(path, how)
  before = sorted(os.walk(logdir))
  with pytest.raises(ValueError, match=re.escape(message)):
    program_lib.check_logdir_for_run(logdir, [''], restore=restore)
  assert sorted(os.walk(logdir)) == before  # Nothing rotated or removed.


def test_failing_node_stops_program_with_message(tmp_path):
  logdir = str(tmp_path / 'fail')
  rc, out, pid = _run(['--num_actors=2', '--max_actor_steps=1000000'],
                      logdir, env_extra={
                          lifecycle.INJECT_FAILURE_ENV: 'actor_1'})
  assert rc == 1, out[-5000:]
  assert "impala: node 'actor_1' failed: InjectedFailure" in out
  assert "impala: stopping: node 'actor_1' failed." in out
  time.sleep(1)
  assert _session_processes(pid) == []


@pytest.mark.parametrize('node', ['actor_0', 'learner'])
def test_node_failing_in_construction_stops_program(tmp_path, node):
  """A node that raises before it runs (e.g. in its environment's or
  network's constructor) must not leave the rest of the program waiting."""
  logdir = str(tmp_path / 'fail_construct')
  rc, out, pid = _run(['--num_actors=1', '--max_actor_steps=1000000',
                       '--noevaluator'], logdir, timeout=180, env_extra={
                           lifecycle.INJECT_FAILURE_ENV: f'{node}:construct'})
  assert rc == 1, out[-5000:]
  assert f"node '{node}' failed: InjectedFailure" in out
  assert 'construction' in out
  time.sleep(1)
  assert _session_processes(pid) == []


def test_bad_config_fails_before_any_process(tmp_path):
  logdir = str(tmp_path / 'bad')
  # A bad value of a config field: test_program_flags.py.
  rc, out, _ = _run(['--config.env_id=NoSuchGame-v0'], logdir, timeout=120)
  assert rc == 2 and "'NoSuchGame-v0'" in out and 'CartPole-v1' in out
  # A bfloat16 torso in processes without oneDNN's kernels.
  rc, out, _ = _run(['--config=atari', '--config.torso_dtype=bfloat16'],
                    logdir, timeout=120,
                    env_extra={'TF_ENABLE_ONEDNN_OPTS': '0'})
  assert rc == 2 and "TF_ENABLE_ONEDNN_OPTS='0'" in out, out[-2000:]
  assert not os.path.exists(os.path.join(logdir, 'logs'))


# impala_lp.py's: test_program_flags.py, which also checks that they come
# before TensorFlow loads.
@pytest.mark.parametrize('program', ['laser_sweep_lp.py', 'impala_k8s.py'])
@pytest.mark.parametrize('flag,message', [
    ('--bogus=1', "Unknown command line flag 'bogus'"),
    ('--num_actors=abc', "flag --num_actors=abc: invalid literal"),
])  # An enum flag: tests/test_supervisor.py.
def test_bad_flags_exit_2_with_one_line_naming_them(program, flag, message):
  """Issue 38: a flag absl rejects exits 2 (a usage error) with one line,
  as the config's checks do, not absl's exit 1."""
  proc = subprocess.run([PYTHON, os.path.join(ROOT, 'programs', program),
                         flag], cwd=ROOT, capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and message in lines[0], proc.stderr
  assert lines[0].startswith(program.replace('.py', '') + ': error: ')


@pytest.mark.parametrize('kind', ['file', 'under a file', 'uncreatable'])
def test_an_unusable_logdir_exits_2_naming_it(tmp_path, kind):
  """Issue 38: no traceback, nothing started or created, before TensorFlow
  loads."""
  afile = tmp_path / 'afile'
  afile.write_text('not a directory')
  logdir = {'file': str(afile), 'under a file': str(afile / 'run'),
            'uncreatable': '/proc/acme_impala_test/run'}[kind]
  proc = subprocess.run([PYTHON, os.path.join(ROOT, 'programs',
                                              'impala_lp.py'),
                         f'--logdir={logdir}'], cwd=ROOT, capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and f"--logdir='{logdir}'" in lines[0], proc.stderr
  assert proc.stdout == ''  # Nothing described, nothing launched.
  assert sorted(os.listdir(tmp_path)) == ['afile']


def test_help_lists_the_programs_own_flags():
  proc = subprocess.run([PYTHON, os.path.join(ROOT, 'programs',
                                              'impala_lp.py'), '--help'],
                        cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  listed = set(re.findall(r'^  --(?:\[no\])?(\w+)', proc.stdout, re.M))
  # From program_flags, local.run_program and Launchpad.
  assert {'config', 'num_actors', 'max_actor_steps', 'logdir', 'restore',
          'seed', 'learning_rates', 'restarts', 'progress_interval_s',
          'lp_launch_type'} <= listed, listed
  assert not any(f.startswith('lp_dummy') for f in listed), listed


_DESCRIBE = r'''
import json, sys
from acme_impala.agent import builder
from acme_impala.agent import presets
from acme_impala.distributed import nodes
from acme_impala.distributed import program
config = presets.get_config('cartpole').replace(
    replay_fraction=0.5, anneal_learning_rate=True)
# As a pod rebuilds its launcher's graph: no record written, so the second
# process is not refused a logdir the first one made.
run = program.prepare_run([config, config.replace(learning_rate=1e-3)],
                          sys.argv[1], 50_000, num_actors=2, launcher=False)

def describe(value):
  if isinstance(value, builder.IMPALABuilder):
    return ['builder', repr(value.config), value.agent_id, value.table_names]
  if isinstance(value, (list, tuple)):
    return [describe(v) for v in value]
  if isinstance(value, (int, float, str)) or value is None:
    return value
  if isinstance(value, program.RunOptions):
    return repr(value)
  return type(value).__name__

out = {}
for group, group_nodes in program.build_program(run).groups.items():
  # Launchpad keeps a CourierNode's constructor arguments in _args (no
  # public accessor); the guarded constructor is a partial naming the node.
  out[group] = [[type(n).__name__,
                 describe(getattr(n, '_args', ())),
                 describe(list(getattr(getattr(n, '_constructor', None),
                                       'args', ()))[1:2])]
                for n in group_nodes]
print('DESCRIPTION ' + json.dumps(out, sort_keys=True))
'''


def _describe_in_subprocess(logdir):
  proc = subprocess.run([PYTHON, '-c', _DESCRIBE, logdir], cwd=ROOT,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:]
  line = [l for l in proc.stdout.splitlines() if l.startswith('DESCRIPTION ')]
  return line[-1]


def test_build_program_gives_the_same_graph_in_two_processes(tmp_path):
  logdir = str(tmp_path / 'sweep')
  first = _describe_in_subprocess(logdir)
  second = _describe_in_subprocess(logdir)
  assert first == second
  # It describes a real two-agent graph (not an empty one).
  for name in ('agent_0_actor', 'agent_1_learner', 'coordinator', 'replay'):
    assert f'"{name}"' in first
  assert '"agent_1/actor_1"' in first


def test_build_program_has_no_side_effects(tmp_path):
  from acme_impala.agent import presets  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import program as program_lib  # pylint: disable=g-import-not-at-top
  logdir = tmp_path / 'run'
  run = program_lib.prepare_run([presets.get_config('cartpole')], str(logdir),
                                1000)
  assert logdir.is_dir()  # prepare_run made the run directory.
  before = sorted(p for p in tmp_path.rglob('*'))
  for _ in range(2):
    program = program_lib.build_program(run)
  assert sorted(p for p in tmp_path.rglob('*')) == before
  assert program.name == 'impala'
  assert set(program.groups) == {'replay', 'counter', 'coordinator',
                                 'learner', 'actor', 'evaluator'}


def test_prepare_run_sets_the_annealing_horizon_from_online_rows(tmp_path):
  from acme_impala.agent import presets  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import program as program_lib  # pylint: disable=g-import-not-at-top
  config = presets.get_config('cartpole').replace(
      replay_fraction=0.875, anneal_learning_rate=True, batch_size=8)
  assert config.unroll_length == 10
  run = program_lib.prepare_run([config], str(tmp_path / 'a'), 800_000)
  # One online trajectory of 10 steps per learner step: 80k learner steps
  # consume the budget (batch_size * unroll_length would give 10k, and the
  # rate would reach 0 after an eighth of the run).
  assert run.agents[0].config.lr_anneal_steps == 80_000


def test_prepare_run_resolves_auto_torso_dtype_and_records_it(
    tmp_path, monkeypatch):
  """'auto' is resolved once, before any process starts; the record keeps
  both what was asked ('auto') and what runs."""
  from acme_impala.agent import networks  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import program as program_lib  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv('TF_ENABLE_ONEDNN_OPTS', '1')
  config = presets.get_config('atari').replace(torso_dtype='auto')
  monkeypatch.setattr(networks, 'cpu_has_amx', lambda: False)
  for units, resolved in ((True, 'bfloat16'), (False, 'float32')):
    monkeypatch.setattr(networks, 'cpu_has_bfloat16_units', lambda u=units: u)
    monkeypatch.setattr(networks, 'bfloat16_probe', lambda: None)
    logdir = str(tmp_path / resolved)
    run = program_lib.prepare_run([config], logdir, 100_000)
    assert run.agents[0].config.torso_dtype == resolved
    record = run_record.read_record(logdir)
    assert record['configs'][0]['torso_dtype'] == 'auto'
    assert record['effective_configs'][0]['torso_dtype'] == resolved
    assert run_record.load_config(logdir).torso_dtype == resolved


def test_sweep_agents_get_their_own_seed_streams(tmp_path):
  from acme_impala.agent import presets  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import nodes  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import sweep  # pylint: disable=g-import-not-at-top
  base = presets.get_config('cartpole').replace(replay_fraction=0.5)
  grid = config_lib.sweep_configs(base, [1e-3, 2e-3], [0.01])
  assert grid[0].seed == grid[1].seed
  program = sweep.make_sweep_program(grid, 2, 100, str(tmp_path / 's'))
  seeds = []
  for i in range(2):
    for node in program.groups[f'agent_{i}_actor']:
      # CourierNode keeps its constructor arguments in _args.
      builder, _, _, _, actor_id, options = node._args  # pylint: disable=protected-access
      envs = [nodes.node_seed(builder.config, options, 1, actor_id, j)
              for j in range(builder.config.envs_per_actor)]
      seeds += envs + [nodes.node_seed(builder.config, options, 2, actor_id)]
    evaluator = program.groups[f'agent_{i}_evaluator'][0]
    builder, _, _, options, task = evaluator._args  # pylint: disable=protected-access
    assert task == builder.config.env_id  # One task: the evaluator's.
    seeds += [nodes.node_seed(builder.config, options, 3, j)
              for j in range(options.eval_episodes)]
    seeds.append(nodes.node_seed(builder.config, options, 4))
  # Every environment and sampler of both agents has its own seed.
  k, rounds = base.envs_per_actor, options.eval_episodes
  assert len(seeds) == 2 * (2 * (k + 1) + rounds + 1)
  assert len(set(seeds)) == len(seeds)


def _initial_weights(logdir):
  found = re.search(r'learner: initial weights (\w+) \(init seed (\d+)\)',
                    _node_output(logdir, 'learner-0'))
  assert found, _node_output(logdir, 'learner-0')[-3000:]
  return found.group(1), int(found.group(2))


def test_two_programs_with_one_seed_start_from_the_same_weights(
    first_run, tmp_path):
  """Issue 37: the same --seed gives the same initial learner weights in
  two separate programs, and they are the network the builder makes from
  the seed the learner node derives (computed here, a third process)."""
  from acme_impala.agent import builder as builder_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import networks  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import nodes  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import registry  # pylint: disable=g-import-not-at-top
  from acme import specs  # pylint: disable=g-import-not-at-top
  first_logdir, rc, out, _ = first_run
  assert rc == 0, out[-3000:]
  logdir = str(tmp_path / 'again')
  # Another actor count and budget: neither may change the first weights.
  rc, out, _ = _run(['--num_actors=1', '--max_actor_steps=500',
                     '--noevaluator', '--seed=0'], logdir)
  assert rc == 0, out[-3000:]
  digest, init_seed = _initial_weights(logdir)
  assert (digest, init_seed) == _initial_weights(first_logdir)
  config = run_record.load_config(logdir)
  spec = specs.make_environment_spec(
      registry.make_environment(config.env_id, seed=0))
  from acme_impala.distributed import program as program_lib  # pylint: disable=g-import-not-at-top
  options = program_lib.RunOptions(logdir=logdir, max_actor_steps=500)
  assert init_seed == nodes.learner_init_seed(config, options)
  net = builder_lib.IMPALABuilder(config, spec).make_network(seed=init_seed)
  assert networks.weights_digest(net.trainable_variables) == digest
  other = builder_lib.IMPALABuilder(config, spec).make_network(
      seed=nodes.learner_init_seed(config.replace(seed=1), options))
  assert networks.weights_digest(other.trainable_variables) != digest


def test_restore_brings_back_the_replay_contents(tmp_path):
  """The replay node checkpoints its tables (Reverb's checkpointer) into
  the run's logdir at stop; --restore starts it from that checkpoint."""
  logdir = str(tmp_path / 'laser')
  laser = ['--config.replay_fraction=0.5', '--config.min_replay_size=8',
           '--config.replay_capacity=500', '--noevaluator', '--num_actors=1']
  rc, out, _ = _run(laser + ['--max_actor_steps=3000'], logdir)
  assert rc == 0, out[-5000:]
  # Actors may insert while the checkpoint is taken: the node logs the
  # sizes before and after it, and the checkpoint holds one in between.
  saved = re.search(r"replay: checkpointed tables \{[^}]*'replay': (\d+)"
                    r"[^(]*\(sizes when it ended: \{[^}]*'replay': (\d+)",
                    _node_output(logdir, 'replay-0'))
  assert saved, out[-5000:]
  low, high = int(saved.group(1)), int(saved.group(2))
  assert 0 < low <= high
  assert os.listdir(os.path.join(logdir, 'checkpoints', 'replay'))
  rc, out, pid = _run(laser + ['--max_actor_steps=4000', '--restore'], logdir)
  assert rc == 0, out[-5000:]
  restored = re.search(r"replay: restored tables from [^{]*\{[^}]*"
                       r"'replay': (\d+)", _node_output(logdir, 'replay-0'))
  assert restored, out[-5000:]
  assert low <= int(restored.group(1)) <= high
  time.sleep(1)
  assert _session_processes(pid) == []


def test_bfloat16_is_refused_before_any_process_where_it_cannot_run(
    tmp_path):
  """On a CPU where TensorFlow's bfloat16 kernels are wrong (an AMD EPYC
  without AVX-512 here), asking for them fails with the one-line refusal
  and exit status 2 before any node starts, not inside a node. (Where they
  work there is nothing to refuse; the message itself is tested on every CPU
  in test_networks.py.)"""
  from acme_impala.agent import networks  # pylint: disable=g-import-not-at-top
  if networks.bfloat16_probe() is None:
    pytest.skip('bfloat16 runs on this CPU: nothing to refuse.')
  logdir = str(tmp_path / 'bf16')
  rc, out, _ = _run(['--config=atari', '--config.torso_dtype=bfloat16'],
                    logdir, timeout=180)
  assert rc == 2, out[-2000:]
  refusal = [line for line in out.splitlines()
             if 'cannot run on this CPU' in line]
  assert len(refusal) == 1, out[-2000:]
  assert "use torso_dtype='float32'" in refusal[0]
  assert not os.path.exists(os.path.join(logdir, 'logs'))
