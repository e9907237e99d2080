"""Tests of acme_impala/launch/program_flags.py: a bad flag is rejected
before the program loads Launchpad or TensorFlow (issue 38 item 6)."""

import os
import re
import subprocess
import sys

import pytest

from acme_impala.launch import program_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable


def test_launchpad_flag_prefixes_cover_every_flag_launchpad_defines():
  """`reject_bad_flags` passes these names on to the full parse; a flag a
  Launchpad import added under another name would be refused wrongly."""
  code = ('from absl import app, flags; before = set(flags.FLAGS); '
          'import launchpad; print(sorted(set(flags.FLAGS) - before))')
  proc = subprocess.run([PYTHON, '-c', code], capture_output=True,
                        text=True, timeout=120, check=True)
  added = eval(proc.stdout.strip().splitlines()[-1])  # pylint: disable=eval-used
  assert 'lp_launch_type' in added, added
  assert all(name.startswith(program_flags.LAUNCHPAD_FLAG_PREFIXES)
             for name in added), added
  # And nothing of the programs' own falls under them.
  assert not any(name.startswith(program_flags.LAUNCHPAD_FLAG_PREFIXES)
                 for name in ('config', 'num_actors', 'restarts', 'seed'))


def _reject(program, *args):
  """Runs `program` with `args` under -X importtime; returns its exit status,
  its error lines and the top-level packages it imported."""
  proc = subprocess.run([PYTHON, '-X', 'importtime',
                         os.path.join(ROOT, 'programs', program), *args],
                        cwd=ROOT, capture_output=True, text=True, timeout=120)
  lines = proc.stderr.splitlines()
  imported = {m.group(1).split('.')[0] for m in (
      re.match(r'import time:\s+\d+ \|\s+\d+ \|\s*(\S+)', line)
      for line in lines) if m}
  errors = [line for line in lines if not line.startswith('import time:')]
  return proc.returncode, errors, imported


_K8S = ['render', '--run_name=t1', '--image=img:1', '--output=/nonexistent']


@pytest.mark.parametrize('program,args,message', [
    ('impala_lp.py', ['--bogus=1'], "Unknown command line flag 'bogus'"),
    ('impala_lp.py', ['--nobogus'], "Unknown command line flag 'nobogus'"),
    ('impala_lp.py', ['--num_actors=abc'], 'flag --num_actors=abc'),
    ('impala_lp.py', ['--node_start=spawn'], 'flag --node_start=spawn'),
    ('impala_lp.py', ['--progress_interval_s=0.1'],
     'flag --progress_interval_s=0.1'),
    ('impala_lp.py', ['--num_actors=0'], 'flag --num_actors=0'),
    ('impala_lp.py', ['--max_actor_steps=0'], 'flag --max_actor_steps=0'),
    ('impala_lp.py', ['--restarts=actor=x'], "restarts entry 'actor=x'"),
    ('impala_lp.py', ['--config.discount=2'], 'IMPALAConfig.discount=2'),
    ('impala_lp.py', ['--config=nosuchpreset'], "'nosuchpreset'"),
    ('impala_lp.py', ['--logdir=/proc/acme_impala_test/run'],
     "--logdir='/proc/acme_impala_test/run'"),
    ('impala_lp.py', ['stray'], "Unexpected arguments: ['stray']"),
    # A Launchpad flag is passed on (its value is Launchpad's to check), and
    # what follows it is still checked.
    ('impala_lp.py', ['--lp_termination_notice_secs', '5', '--bogus'],
     "Unknown command line flag 'bogus'"),
    ('laser_sweep_lp.py', ['--learning_rates=x'], "'x'"),
    # PBT needs a population and its evaluators (issue 39).
    ('impala_lp.py', ['--pbt_interval_steps=100'], 'needs a population'),
    ('laser_sweep_lp.py', ['--pbt_interval_steps=100', '--noevaluator'],
     'noevaluator'),
    ('laser_sweep_lp.py', ['--pbt_interval_steps=-1'],
     'flag --pbt_interval_steps=-1'),
    ('impala_k8s.py', _K8S + ['--pbt_interval_steps=100'],
     'needs a population'),
    # Synchronous learner replicas (issue 40): equal shares of a batch, one
    # agent, one process each.
    ('impala_lp.py', ['--num_learners=0'], 'flag --num_learners=0'),
    ('impala_lp.py', ['--num_learners=3'],
     'num_learners=3 does not split a learner batch of batch_size=32'),
    ('impala_lp.py', ['--num_learners=2', '--config.compile_mode=full'],
     "compile_mode='full'"),
    ('impala_lp.py', ['--num_learners=2', '--lp_launch_type=local_mt'],
     '--lp_launch_type=local_mt: learner replicas need a process each'),
    ('laser_sweep_lp.py', ['--num_learners=2'],
     'num_learners=2 with a sweep of'),
    ('impala_k8s.py', _K8S + ['--num_learners=5'],
     'num_learners=5 does not split'),
    ('evaluate.py', ['--episodes=0'], '--episodes=0'),
    ('evaluate.py', ['--logdir=/nonexistent'], "--logdir='/nonexistent'"),
    # evaluate.py is no Launchpad program and takes no --config.<field>.
    ('evaluate.py', ['--lp_launch_type=local_mp'],
     "Unknown command line flag 'lp_launch_type'"),
    ('evaluate.py', ['--config.discount=0.9'],
     "Unknown command line flag 'config.discount'"),
    # impala_k8s.py render checks its inputs before it builds the program.
    ('impala_k8s.py', _K8S + ['--run_name=Bad_Name'],
     "run_name='Bad_Name' is invalid"),
    ('impala_k8s.py', _K8S + ['--logdir=/tmp/x'], 'under /data/'),
    ('impala_k8s.py', _K8S + ['--attempt=Not_A_Label'],
     "--attempt='Not_A_Label'"),
    ('impala_k8s.py', _K8S + ['--config.batch_size=-1'],
     'IMPALAConfig.batch_size=-1'),
    ('impala_k8s.py', _K8S + ['--resources=/nonexistent.yaml'],
     "--resources='/nonexistent.yaml'"),
])
def test_a_bad_flag_exits_2_before_launchpad_or_tensorflow_loads(
    program, args, message):
  code, errors, imported = _reject(program, *args)
  assert code == 2, errors
  assert len(errors) == 1 and message in errors[0], errors
  assert errors[0].startswith(program.replace('.py', '') + ': error: ')
  assert not {'launchpad', 'tensorflow', 'acme', 'reverb'} & imported, (
      sorted(imported))


def test_a_launchpad_flags_value_is_checked_by_the_full_parse():
  """Launchpad's flags are Launchpad's: their values are checked once it has
  loaded, still with one line and exit 2."""
  code, errors, imported = _reject('impala_lp.py', '--lp_launch_type=bogus')
  assert code == 2 and len(errors) == 1, errors
  assert 'flag --lp_launch_type=bogus' in errors[0]
  assert 'launchpad' in imported and 'tensorflow' not in imported
