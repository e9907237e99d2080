"""quiet.silence(): TensorFlow's, CUDA's and gym's start-up noise is off at
its source, in the process and in the node processes it starts by exec."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What a node process imports and runs: TensorFlow (with a first op, where
# CUDA is probed), Acme (which imports gym), tf.nest on a set (as
# TensorFlow's own structures do).
_WORK = """
import tensorflow as tf, acme, gym, minatar
tf.constant(1.) + 1.
tf.nest.flatten({'a': {1, 2}})
"""
NOISE = ('Could not load dynamic library', 'cuInit',
         'Gym has been unmaintained', 'Sets are not currently considered',
         'Cannot import matplotlib and/or seaborn')


def _stderr(code, env_extra=None):
  env = {k: v for k, v in os.environ.items()
         if k not in ('TF_CPP_MIN_LOG_LEVEL', 'ACME_IMPALA_QUIET')}
  env.update(env_extra or {})
  proc = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stderr


@pytest.fixture(scope='module')
def unsilenced():
  return _stderr(_WORK)


def test_without_silence_the_noise_is_there(unsilenced):
  # The control: on this stack every one of these lines appears.
  for noise in NOISE:
    assert noise in unsilenced, noise


def test_silence_removes_the_noise_in_this_process():
  err = _stderr('from acme_impala.host import quiet\nquiet.silence()\n' + _WORK)
  for noise in NOISE:
    assert noise not in err, (noise, err)


def test_exec_started_node_processes_silence_themselves():
  # Launchpad's process_entry imports acme_impala (unpickling a node)
  # before TensorFlow: the variable set by the launcher is enough.
  err = _stderr('import acme_impala\n' + _WORK, {'ACME_IMPALA_QUIET': '1'})
  for noise in NOISE:
    assert noise not in err, (noise, err)


def test_a_users_own_tensorflow_log_level_wins():
  err = _stderr('from acme_impala.host import quiet\nquiet.silence()\n' + _WORK,
                {'TF_CPP_MIN_LOG_LEVEL': '0'})
  assert 'Could not load dynamic library' in err
  assert 'Gym has been unmaintained' not in err
