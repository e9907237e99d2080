"""programs/evaluate.py on real runs: returns, video, export, bad flags.

A short CartPole training (programs/impala_lp.py) gives a run directory with
a learner checkpoint (CartPole's frames are drawn by pygame). Atari's frames
come from ale-py: a Breakout run directory whose checkpoint the learner's own
state and Acme's Checkpointer write, as the learner node does, for an
untrained network.
"""

import os
import re
import subprocess
import sys

from acme.tf import savers as tf2_savers
import cv2
import numpy as np
import pytest
import tensorflow as tf

from acme_impala.agent import builder as builder_lib
from acme_impala.agent import presets
from acme_impala.distributed import run_record
from acme_impala.envs import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
EVALUATE = os.path.join(ROOT, 'programs', 'evaluate.py')
SUMMARY = re.compile(r'evaluate: return (-?[\d.]+) ± ([\d.]+) over (\d+) '
                     r'episodes')
EPISODE = re.compile(r'evaluate: episode (\d+): return (-?[\d.e+]+), '
                     r'length (\d+)')


def _evaluate(*args, timeout=300):
  """Runs programs/evaluate.py; returns (status, stdout, stderr)."""
  proc = subprocess.run([PYTHON, EVALUATE, *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout)
  return proc.returncode, proc.stdout, proc.stderr


def _error_lines(stderr):
  return [l for l in stderr.splitlines() if l.startswith('evaluate: error:')]


@pytest.fixture(scope='module')
def trained_run(readme_run):
  """The run directory of a short CartPole training: the README's example
  run (conftest.readme_run), which the README's evaluate commands use."""
  return readme_run[0]


def _write_untrained_run(logdir, *configs):
  """A run directory as the launcher and the learner node(s) write it: the
  record, and each learner's state saved by Acme's Checkpointer (a sweep's
  agents under agent_<i>/)."""
  run_record.write_record(logdir,
                          run_record.make_record(configs, configs, {}))
  for i, config in enumerate(configs):
    spec = registry.environment_spec(config.env_id)
    builder = builder_lib.IMPALABuilder(config, spec)
    learner = builder.make_learner(builder.make_network(), iter(()))
    tf2_savers.Checkpointer(
        objects_to_save={'learner': learner.state}, directory=logdir,
        subdirectory=f'agent_{i}/learner' if len(configs) > 1 else 'learner',
        add_uid=False).save(force=True)


def test_evaluates_an_agent_of_a_sweep(tmp_path):
  logdir = str(tmp_path / 'sweep')
  config = presets.get_config('cartpole').replace(replay_fraction=0.875)
  # Agent 1 has another network size: only its own checkpoint restores.
  _write_untrained_run(logdir, config, config.replace(lstm_size=16))
  status, out, err = _evaluate(f'--logdir={logdir}', '--episodes=1',
                               '--agent=1')
  assert status == 0, err[-5000:]
  assert os.path.join(logdir, 'checkpoints', 'agent_1', 'learner') in out
  status, _, err = _evaluate(f'--logdir={logdir}', '--agent=2')
  assert status == 2 and 'agent=2' in err, err[-3000:]


@pytest.fixture(scope='module')
def atari_run(tmp_path_factory):
  logdir = str(tmp_path_factory.mktemp('atari') / 'run')
  _write_untrained_run(logdir, presets.get_config('atari').replace(
      env_id='ALE/Breakout-v5', lstm_size=16, anneal_learning_rate=False))
  return logdir


def test_bad_flags_exit_2_naming_the_value(tmp_path):
  config_only = tmp_path / 'config_only'
  run_record.write_record(str(config_only), run_record.make_record(
      [presets.get_config('cartpole')], [presets.get_config('cartpole')], {}))
  (tmp_path / 'empty').mkdir()
  cases = [
      ([f'--logdir={tmp_path}/missing'], f'{tmp_path}/missing'),
      ([f'--logdir={tmp_path}/empty'], f'{tmp_path}/empty/config.json'),
      ([f'--logdir={config_only}'],
       os.path.join(str(config_only), 'checkpoints', 'learner')),
      ([f'--logdir={config_only}', '--episodes=0'], '--episodes=0'),
      ([f'--logdir={config_only}', f'--video={tmp_path}/ep.avi'],
       f'{tmp_path}/ep.avi'),
      ([f'--logdir={config_only}', f'--video={tmp_path}/no/ep.mp4'],
       f'{tmp_path}/no/ep.mp4'),
      ([f'--logdir={config_only}', f'--export={config_only}/config.json'],
       f'{config_only}/config.json'),
      (['--episodes=2'], '--logdir'),
  ]
  for args, named in cases:
    status, out, err = _evaluate(*args)
    assert status == 2, (args, out, err[-3000:])
    errors = _error_lines(err)
    assert len(errors) == 1 and named in errors[0], (args, err[-3000:])
    assert not SUMMARY.search(out)
  assert not (tmp_path / 'ep.avi').exists()


def _frames(video):
  capture = cv2.VideoCapture(video)
  try:
    assert capture.isOpened()
    count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    ok, frame = capture.read()
  finally:
    capture.release()
  assert ok
  return count, frame


def test_evaluates_a_trained_run_and_exports_its_policy(trained_run,
                                                         tmp_path):
  policy_dir = str(tmp_path / 'policy')
  status, out, err = _evaluate(f'--logdir={trained_run}', '--episodes=3',
                               f'--export={policy_dir}', '--seed=1')
  assert status == 0, err[-5000:]
  step = re.search(r'checkpoint (\S+) \(learner step (\d+)\)', out)
  assert step and step.group(1).startswith(
      os.path.join(trained_run, 'checkpoints', 'learner')), out
  assert int(step.group(2)) > 0  # Trained weights, not initial ones.
  episodes = EPISODE.findall(out)
  assert [int(e[0]) for e in episodes] == [1, 2, 3], out
  returns = np.array([float(e[1]) for e in episodes])
  # CartPole pays 1 per step.
  np.testing.assert_array_equal(returns, [int(e[2]) for e in episodes])
  summary = SUMMARY.search(out)
  assert summary, out
  assert int(summary.group(3)) == 3
  assert float(summary.group(1)) == pytest.approx(returns.mean(), abs=0.006)
  assert float(summary.group(2)) == pytest.approx(returns.std(), abs=0.006)

  policy = tf.saved_model.load(policy_dir)
  state = policy.initial_state(2)
  actions = policy.step(np.zeros([2, 4], np.float32), np.zeros([2], np.int32),
                        np.zeros([2], np.float32), state['state_hidden'],
                        state['state_cell'],
                        np.zeros([2, 2], np.float32))['action']
  assert actions.shape == (2,) and set(actions.numpy()) <= {0, 1}
  assert os.path.exists(os.path.join(policy_dir, 'policy.json'))

  # The same seed plays the same episodes.
  status, again, err = _evaluate(f'--logdir={trained_run}', '--episodes=3',
                                 '--seed=1')
  assert status == 0, err[-5000:]
  assert EPISODE.findall(again) == episodes


def test_greedy_evaluation(trained_run):
  status, out, err = _evaluate(f'--logdir={trained_run}', '--episodes=2',
                               '--greedy')
  assert status == 0, err[-5000:]
  summary = SUMMARY.search(out)
  assert summary and int(summary.group(3)) == 2, out
  assert 'greedy actions' in out


# CartPole's frames are drawn by pygame (its size depends on the renderer),
# Atari's by ale-py (210 x 160).
@pytest.mark.parametrize('run, frame_shape', [('trained_run', None),
                                              ('atari_run', (210, 160, 3))])
def test_video_records_the_first_episode(request, tmp_path, run, frame_shape):
  video = str(tmp_path / 'ep.mp4')
  status, out, err = _evaluate(f'--logdir={request.getfixturevalue(run)}',
                               '--episodes=2', f'--video={video}')
  assert status == 0, err[-5000:]
  first = int(EPISODE.search(out).group(3))
  assert os.path.getsize(video) > 0
  count, frame = _frames(video)
  assert count == first + 1  # The first episode: its reset and each step.
  assert frame.ndim == 3 and frame.shape[2] == 3 and frame.std() > 0
  if frame_shape is not None:
    assert frame.shape == frame_shape
