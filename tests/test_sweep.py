"""LASER programs: mixing online and replayed data without deadlock (f = 1;
the README's LASER command and the sweep program on the default config),
and two-agent sweeps sharing one replay."""

import csv
import json
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest

import docs_commands

from acme_impala.agent import config as config_lib
from acme_impala.agent import presets
from acme_impala.distributed import sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ['--config.batch_size=8', '--config.unroll_length=10',
         '--config.lstm_size=16', '--config.envs_per_actor=2',
         '--config.max_queue_size=64', '--config.min_replay_size=8',
         '--config.replay_capacity=500']


def _run(program, args, timeout=300):
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'programs', program)] + SMALL + args,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      timeout=timeout, cwd=ROOT)
  return proc.returncode, proc.stdout


def _learner_rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def test_replay_only_runs_and_stops_without_deadlock(tmp_path):
  """f = 1 (no queue) with the default replay_core_state='recompute':
  replayed rows walk episodes (a walk spans several trajectories), and the
  program ends at its budget. (f = 0 is the plain program of
  test_program.py; f = 0.875 the README's LASER command below.)"""
  logdir = str(tmp_path / 'f1')
  rc, out = _run('impala_lp.py', [
      '--lp_launch_type=local_mp', f'--logdir={logdir}', '--num_actors=1',
      # Nothing blocks the actors: give the learner time to compile and
      # step before the budget is spent, even on a busy machine (beside a
      # Pong program on the AVX-512 AMD the learner compiled for 15 s and
      # logged 54 rows in 10k steps; the learner takes a core throughout,
      # so each step of budget costs).
      '--max_actor_steps=10000', '--noevaluator',
      '--config.replay_fraction=1.0'])
  assert rc == 0, out[-4000:]
  rows = _learner_rows(os.path.join(logdir, 'logs', 'learner', 'logs.csv'))
  assert rows and float(rows[-1]['learner_steps']) >= 1
  _walks_and_staleness(rows)
  assert 'Proposition 2' in out
  assert all(r['rejected_fraction_online'] == 'nan' for r in rows)


def _walks_and_staleness(rows):
  """Replayed rows' staleness is logged and they walk episodes over several
  trajectories (the share of rows starting a walk well below 1)."""
  staleness = [float(r['replay_staleness_mean']) for r in rows]
  assert any(s == s for s in staleness)  # Logged (not NaN) with replay.
  walk_starts = [float(r['walk_start_fraction']) for r in rows]
  walk_starts = [w for w in walk_starts if w == w]
  assert walk_starts and np.mean(walk_starts) < 0.9


def test_sweep_program_graph_shares_or_separates_replay(tmp_path):
  base = presets.get_config('cartpole').replace(replay_fraction=0.5)
  grid = config_lib.sweep_configs(base, [1e-3, 2e-3], [0.01])
  shared = sweep.make_sweep_program(grid, 1, 100, str(tmp_path / 's'))
  separate = sweep.make_sweep_program(grid, 1, 100, str(tmp_path / 'p'),
                                      share_replay=False)
  assert len(shared.groups['replay']) == 1
  assert len(separate.groups['replay']) == 2
  assert {'agent_0_learner', 'agent_1_learner', 'agent_0_actor',
          'agent_1_evaluator', 'coordinator'} <= set(shared.groups)


def test_sweep_validation_names_the_mismatch(tmp_path):
  base = presets.get_config('cartpole').replace(replay_fraction=0.5)
  other = base.replace(lstm_size=32)
  with pytest.raises(ValueError, match='lstm_size=32'):
    sweep.make_sweep_program([base, other], 1, 100, str(tmp_path / 'x'))
  with pytest.raises(ValueError, match="replay_core_state='stored'"):
    sweep.make_sweep_program(
        [base, base.replace(replay_core_state='stored')], 1, 100,
        str(tmp_path / 'z'))
  # 'stored' and 'burn_in' agents read the same trajectories.
  sweep.make_sweep_program(
      [base.replace(replay_core_state='stored'),
       base.replace(replay_core_state='burn_in', burn_in_length=2)], 1, 100,
      str(tmp_path / 'w'))
  with pytest.raises(ValueError, match='replay_fraction=0'):
    sweep.make_sweep_program([base.replace(replay_fraction=0.)], 1, 100,
                             str(tmp_path / 'y'))


# The README's LASER flags (also in docs/laser.md).
README_LASER = ['--config.replay_fraction=0.875', '--config.kl_threshold=0.5',
                '--config.entropy_on_online_only=true']


def _run_default(program, args, timeout=400):
  """`program` with the default config (no SMALL overrides)."""
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'programs', program)] + args,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      timeout=timeout, cwd=ROOT)
  return proc.returncode, proc.stdout


def _warm_up_then_mixed(rows, batch_size, num_online):
  """The learner's batches: all online while the replay warms up, then
  num_online online rows and the rest replayed, never back."""
  kinds = [(int(float(r['online_rows'])), int(float(r['replayed_rows'])))
           for r in rows]
  assert kinds[0] == (batch_size, 0), kinds[:5]
  mixed = (num_online, batch_size - num_online)
  assert mixed in kinds, kinds[-5:]
  switch = kinds.index(mixed)
  assert set(kinds[:switch]) == {(batch_size, 0)}
  assert set(kinds[switch:]) == {mixed}
  # The counter's totals account for every row of every step.
  last = rows[-1]
  assert (float(last['online_rows_total']) +
          float(last['replayed_rows_total'])) == (
              batch_size * float(last['learner_steps']))
  assert float(last['online_rows_total']) > (
      num_online * float(last['learner_steps']))


def test_readme_laser_command_on_the_default_config_reaches_its_budget(
    tmp_path):
  """Issue 35: on the default program (2 actors x 32 environments, a queue
  of 64, the replay sampled from 100 episodes on) the queue filled before
  the replay reached its minimum and neither could move. Now the learner
  trains on online rows until the replay can be sampled, then mixes."""
  logdir = str(tmp_path / 'laser')
  rc, out = _run_default('impala_lp.py', README_LASER + [
      '--max_actor_steps=30000', f'--logdir={logdir}'])
  assert rc == 0, out[-4000:]
  assert 'stopping: the budget is reached' in out, out[-4000:]
  config = presets.get_config('cartpole')
  rows = _learner_rows(os.path.join(logdir, 'logs', 'learner', 'logs.csv'))
  _warm_up_then_mixed(rows, config.batch_size, config.batch_size // 8)
  _walks_and_staleness(rows)
  assert any(float(r['rejected_fraction_replay']) >= 0 for r in rows)


def test_sweep_program_with_no_flags_reaches_its_budget(tmp_path):
  """The sweep program as shipped (two agents sharing one replay, default
  config, f = 0.875), only its budget made small."""
  logdir = str(tmp_path / 'sweep')
  rc, out = _run_default('laser_sweep_lp.py', [
      '--max_actor_steps=20000', f'--logdir={logdir}'])
  assert rc == 0, out[-4000:]
  assert 'stopping: the budget is reached' in out, out[-4000:]
  assert 'for every agent' in out
  assert 'share_replay=True' in out
  config = presets.get_config('cartpole')
  for i, base_lr in enumerate((1e-3, 2e-3)):  # The program's default grid.
    agent = f'agent_{i}'
    assert (f'{agent}: learning_rate={base_lr} entropy_cost=0.01 '
            'replay_fraction=0.875 kl_threshold=0.5') in out
    rows = _learner_rows(os.path.join(logdir, 'logs', agent, 'learner',
                                      'logs.csv'))
    _warm_up_then_mixed(rows, config.batch_size, config.batch_size // 8)
    # Each agent learns with its own rate (not annealed by default).
    np.testing.assert_allclose([float(r['learning_rate']) for r in rows],
                               base_lr, rtol=1e-6)
    assert os.path.exists(os.path.join(logdir, 'logs', agent, 'evaluator',
                                       'logs.csv'))


# Builds (does not launch) the program of each argv, as impala_lp.py and a
# Kubernetes pod do: the groups, the agents' configs and the arguments
# forwarded to a node process, or the one-line error.
_FLAGS_TO_PROGRAM = r'''
import json, sys
from absl import flags
from acme_impala.distributed import program
from acme_impala.launch import program_flags
program_flags.define()
FLAGS = flags.FLAGS
def shape(argv):
  FLAGS.unparse_flags()
  FLAGS(['impala_lp'] + argv)
  try:
    run = program_flags.prepare({}, '/tmp/acme_impala_unused', launcher=False)
    groups = {g: len(n) for g, n in program.build_program(run).groups.items()}
    return {'groups': groups,
            'agents': [[a.options.agent, a.config.learning_rate,
                        a.config.entropy_cost, a.config.replay_fraction]
                       for a in run.agents],
            'forward': program_flags.forward({}, '/data/run')}
  except ValueError as error:
    return {'error': str(error)}
shapes = []
for argv in json.loads(sys.argv[1]):
  if argv == 'FORWARDED':  # What the first run sends a node process.
    argv = [a for a in shapes[0]['forward'] if not a.startswith('--logdir')]
  shapes.append(shape(argv))
print(json.dumps(shapes))
'''


def _shapes(argvs):
  proc = subprocess.run([sys.executable, '-c', _FLAGS_TO_PROGRAM,
                         json.dumps(argvs)], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_docs_sweep_command_builds_a_sweep_a_pod_rebuilds(tmp_path):
  """docs/laser.md's sweep (train.sh = impala_lp.py with --learning_rates
  and --noshare_replay): two agents, one replay each, LASER's replay
  fraction, per-agent flags; the arguments forwarded to a node process build
  the same graph. A one-agent grid and a config file a pod cannot read are
  refused in one line."""
  command, = [c for doc, c in docs_commands.documented_commands()
              if doc == 'docs/laser.md' and '--learning_rates' in c
              and 'train.sh' in c]
  flags_of_docs = [a for a in shlex.split(command) if a.startswith('--')]
  mine = tmp_path / 'mine.py'
  mine.write_text('from acme_impala.agent import presets\n'
                  'def get_config():\n'
                  '  return presets.get_config("cartpole")\n')
  docs, again, one_agent, my_file, preset_path = _shapes([
      flags_of_docs, 'FORWARDED', ['--learning_rates=1e-3'],
      [f'--config={mine}'],
      ['--config=configs/atari.py', '--learning_rates=1e-3,2e-3']])
  assert docs['groups']['replay'] == 2, docs  # --noshare_replay.
  assert docs['groups']['agent_0_actor'] == 1, docs  # --num_actors, each.
  assert [a[0] for a in docs['agents']] == ['agent_0', 'agent_1']
  cartpole = presets.get_config('cartpole')
  assert [a[1:] for a in docs['agents']] == [
      [1e-3, cartpole.entropy_cost, 0.875], [2e-3, cartpole.entropy_cost,
                                             0.875]]
  assert '--share_replay=false' in docs['forward']
  assert again['groups'] == docs['groups'] and again['agents'] == docs[
      'agents']
  assert 'make 1 agent; a sweep needs at least 2' in one_agent['error']
  assert 'cannot read a config file outside configs/' in my_file['error']
  assert '--config=atari' in preset_path['forward']
