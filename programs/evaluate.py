"""Evaluates the policy of a run: episode returns, a video, a SavedModel.

  python programs/evaluate.py --logdir=runs/cartpole --episodes=10
  python programs/evaluate.py --logdir=runs/breakout --episodes=3 \\
      --video=breakout.mp4 --export=runs/breakout/policy

Reads the run's config (`<logdir>/config.json`), restores the network of the
latest learner checkpoint (`<logdir>/checkpoints/learner`) and plays
--episodes evaluation episodes (Atari: whole games, not lives) with the actor
the builder makes, which samples from the policy as the run's actors and
evaluator did (--greedy: the most likely action instead). Prints each
episode's return and length, then the mean ± std of the returns.

--video records the first episode from the environment's RGB frames into an
MP4 file with OpenCV (Atari renders with ale-py, classic control with
pygame). --export writes the policy as a
TensorFlow SavedModel (acme_impala/agent/export.py). Bad flags exit with status 2
and one line naming the bad value, before TensorFlow is imported where the
check allows it.
"""

import os
import sys

from acme_impala.host import quiet
quiet.silence()  # pylint: disable=g-import-not-at-top  # Before TensorFlow.

from absl import app
from absl import flags

from acme_impala.distributed import run_record
from acme_impala.launch import program_flags

FLAGS = flags.FLAGS
flags.DEFINE_string('logdir', None,
                    'Run directory of programs/impala_lp.py.')
flags.DEFINE_integer('episodes', 10, 'Number of evaluation episodes.')
flags.DEFINE_string('video', None,
                    'Records the first episode into this .mp4 file.')
flags.DEFINE_string('export', None,
                    'Writes the policy as a SavedModel into this directory.')
flags.DEFINE_integer('seed', 0,
                     'Seeds the environment and the action sampler.')
flags.DEFINE_bool('greedy', False,
                  'Take the most likely action instead of sampling.')
flags.DEFINE_integer('agent', 0,
                     'Which agent of a LASER sweep run (impala_lp.py with '
                     '--learning_rates/--entropy_costs) to evaluate; 0 for a '
                     'single agent.')
flags.DEFINE_string('task', None,
                    'A multi-task run (--config.env_ids): the task to play, '
                    'one of its env ids; default its first.')


class UsageError(ValueError):
  """A bad flag value: reported in one line, exit status 2."""


def _check_flags():
  """The run's config; UsageError naming the first bad value."""
  if FLAGS.episodes < 1:
    raise UsageError(f'--episodes={FLAGS.episodes}: must be at least 1.')
  if FLAGS.video is not None and not FLAGS.video.endswith('.mp4'):
    raise UsageError(f'--video={FLAGS.video!r}: must end in .mp4 (an MP4 '
                     'file is written).')
  if FLAGS.video is not None and not os.path.isdir(
      os.path.dirname(os.path.abspath(FLAGS.video))):
    raise UsageError(f'--video={FLAGS.video!r}: its directory does not '
                     'exist.')
  if FLAGS.export is not None and os.path.isfile(FLAGS.export):
    raise UsageError(f'--export={FLAGS.export!r} is a file; a SavedModel is '
                     'a directory.')
  if not FLAGS.logdir:
    raise UsageError('--logdir is required (a run directory of '
                     'programs/impala_lp.py).')
  if not os.path.isdir(FLAGS.logdir):
    raise UsageError(f'--logdir={FLAGS.logdir!r} is not a directory.')
  try:
    config = run_record.load_config(FLAGS.logdir, FLAGS.agent)
  except ValueError as error:
    raise UsageError(f'--logdir={FLAGS.logdir!r}: {error}') from None
  _task(config)
  return config


def _task(config) -> str:
  """The environment id to play: the run's, or the --task of a multi-task
  run; UsageError naming a --task the run has not."""
  from acme_impala.envs import multitask  # pylint: disable=g-import-not-at-top
  tasks = multitask.task_ids(config.env_ids)
  if not tasks:
    if FLAGS.task is not None:
      raise UsageError(f'--task={FLAGS.task!r}: {FLAGS.logdir} is a '
                       f'single-task run (env_id={config.env_id!r}); '
                       'expected no --task.')
    return config.env_id
  task = tasks[0] if FLAGS.task is None else FLAGS.task
  if task not in tasks:
    raise UsageError(f'--task={task!r}: expected one of the run\'s tasks '
                     f'{list(tasks)}.')
  return task


if __name__ == '__main__':  # Before Acme and TensorFlow load (seconds).
  program_flags.reject_bad_flags('evaluate', sys.argv,
                                 lambda unused_overrides: _check_flags(),
                                 config_overrides=False, launchpad=False)

import acme  # pylint: disable=g-import-not-at-top,wrong-import-position
from acme.utils import loggers  # pylint: disable=g-import-not-at-top,wrong-import-position
from acme.utils import observers  # pylint: disable=g-import-not-at-top,wrong-import-position
import cv2  # pylint: disable=g-import-not-at-top,wrong-import-position
import gymnasium  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position


def _latest_checkpoint(checkpoint_dir: str) -> str:
  """The path of the latest checkpoint in `checkpoint_dir`; UsageError
  naming the directory when there is none."""
  missing = UsageError(f'no learner checkpoint in {checkpoint_dir!r}: the '
                       'run has not checkpointed yet.')
  # TensorFlow's checkpoint manager lists its checkpoints in this file: the
  # common case fails without importing TensorFlow.
  if not os.path.exists(os.path.join(checkpoint_dir, 'checkpoint')):
    raise missing
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = tf.train.latest_checkpoint(checkpoint_dir)
  if path is None:
    raise missing
  return path


def _restore(network, path: str) -> int:
  """Restores `network` from the learner checkpoint `path`; returns the
  learner step it was saved at."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  num_steps = tf.Variable(0, dtype=tf.int64)
  # The learner node saves {'learner': IMPALALearner.state} with Acme's
  # Checkpointer; the optimiser's slots are not needed to act, and the
  # assertion makes sure every network variable was found in the file.
  checkpoint = tf.train.Checkpoint(
      learner={'network': network, 'num_steps': num_steps})
  checkpoint.restore(path).expect_partial().assert_existing_objects_matched()
  return int(num_steps.numpy())


def _check_renders(environment, env_id: str):
  """UsageError unless `environment` (made with render_mode='rgb_array')
  renders RGB frames."""
  gym_env = environment.gymnasium_env
  # A gymnasium-level reset leaves the seeded first reset of the dm_env
  # environment (and so the episodes) as they would be without a video.
  gym_env.reset()
  try:
    frame = gym_env.render()
  except gymnasium.error.DependencyNotInstalled as error:
    raise UsageError(f'--video={FLAGS.video!r}: {env_id} cannot render here: '
                     f'{error}') from None
  if not (isinstance(frame, np.ndarray) and frame.ndim == 3):
    raise UsageError(f'--video={FLAGS.video!r}: {env_id} renders no RGB '
                     'frames.')


class VideoObserver(observers.EnvLoopObserver):
  """Writes every frame of the episodes it sees (Acme's EnvironmentLoop
  calls it at the reset and after each step) to an MP4 file at `path`;
  `close()` finishes the file."""

  def __init__(self, path: str, fps: float):
    self._path = path
    self.fps = fps
    self._writer = None

  def _write(self, env):
    frame = env.gymnasium_env.render()  # uint8 [H, W, 3], RGB.
    if self._writer is None:
      height, width = frame.shape[:2]
      self._writer = cv2.VideoWriter(
          self._path, cv2.VideoWriter_fourcc(*'mp4v'), self.fps,
          (width, height))
      if not self._writer.isOpened():
        raise OSError(f'OpenCV cannot write an MP4 file to {self._path!r}.')
    self._writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))

  def observe_first(self, env, timestep):
    self._write(env)

  def observe(self, env, timestep, action):
    self._write(env)

  def get_metrics(self):
    return {}

  def close(self):
    if self._writer is not None:
      self._writer.release()


def _greedy_actor(network):
  """Acme's recurrent actor taking argmax(logits) of `network`."""
  from acme.agents.tf import actors  # pylint: disable=g-import-not-at-top
  import sonnet as snt  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  greedy = snt.DeepRNN([
      network,
      lambda outputs: tf.argmax(outputs[0], axis=-1, output_type=tf.int32)])
  return actors.RecurrentActor(greedy)


def _frame_count(path: str) -> int:
  capture = cv2.VideoCapture(path)
  try:
    return int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) if (
        capture.isOpened()) else 0
  finally:
    capture.release()


def evaluate(config) -> int:
  """Finds the checkpoint, makes the environment, plays; the exit status."""
  from acme_impala.envs import registry

  # A sweep's agents checkpoint under checkpoints/agent_<i>/ (RunOptions).
  sweep = len(run_record.read_record(FLAGS.logdir)['configs']) > 1
  checkpoint_dir = os.path.join(
      FLAGS.logdir, 'checkpoints',
      *([f'agent_{FLAGS.agent}'] if sweep else []), 'learner')
  path = _latest_checkpoint(checkpoint_dir)
  env_seed, policy_seed = (
      int(s) for s in np.random.SeedSequence(FLAGS.seed).generate_state(2))
  task = _task(config)
  # A multi-task run's network takes every task in the suite's one spec.
  task_kwargs = registry.task_kwargs(config.env_ids)
  environment = registry.make_environment(
      task, seed=env_seed, evaluation=True,
      render_mode='rgb_array' if FLAGS.video else None, **task_kwargs)
  try:
    if FLAGS.video:
      _check_renders(environment, task)
    return _play(config, path, environment, policy_seed, task, task_kwargs)
  finally:
    environment.close()


def _play(config, path: str, environment, policy_seed: int, task: str,
          task_kwargs) -> int:
  """Restores the network from `path`, plays the episodes, reports, exports;
  returns the exit status."""
  # Imported here: they import TensorFlow, which bad flags need not wait for.
  from acme_impala.agent import builder as builder_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import export  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import atari
  from acme_impala.envs import registry

  spec = registry.environment_spec(task, **task_kwargs)
  builder = builder_lib.IMPALABuilder(config, spec)
  network = builder.make_network()
  step = _restore(network, path)
  print(f'evaluate: {task}, checkpoint {path} (learner step '
        f'{step})', flush=True)
  if FLAGS.greedy:
    actor = _greedy_actor(network)
  else:
    # No variable source: the actor acts with the restored network itself.
    actor = builder.make_actor(network, seed=policy_seed)

  def run_episode(loop_observers=()):
    return acme.EnvironmentLoop(
        environment, actor, logger=loggers.NoOpLogger(), should_update=False,
        observers=loop_observers).run_episode()

  video = None
  if FLAGS.video:
    fps = environment.gymnasium_env.metadata.get('render_fps') or 30
    if task.startswith('ALE/'):
      # One frame per agent step, which repeats its action on 4 emulator
      # frames: real-time playback.
      fps /= atari.ATARI_FRAME_SKIP
    video = VideoObserver(FLAGS.video, fps)
  returns, lengths = [], []
  for episode in range(FLAGS.episodes):
    if episode == 0 and video is not None:
      try:
        result = run_episode([video])
      finally:
        video.close()
    else:
      result = run_episode()
    returns.append(float(result['episode_return']))
    lengths.append(int(result['episode_length']))
    print(f'evaluate: episode {episode + 1}: return {returns[-1]:g}, '
          f'length {lengths[-1]}', flush=True)
  print(f'evaluate: return {np.mean(returns):.2f} ± {np.std(returns):.2f} '
        f'over {len(returns)} episodes (mean length {np.mean(lengths):.1f}; '
        f'{"greedy" if FLAGS.greedy else "sampled"} actions)', flush=True)

  if video is not None:
    # Read back: a writer without a working codec leaves an empty file.
    frames = _frame_count(FLAGS.video)
    if frames < 1:
      print(f'evaluate: error: {FLAGS.video} is not a readable video.',
            file=sys.stderr)
      return 1
    print(f'evaluate: video {FLAGS.video} ({frames} frames, '
          f'{video.fps:g} fps)')
  if FLAGS.export:
    export.export_policy(network, spec, FLAGS.export)
    print(f'evaluate: exported the policy to {FLAGS.export} (inputs in '
          f'{os.path.join(FLAGS.export, export.POLICY_FILE)})')
  return 0


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    config = _check_flags()
    return evaluate(config)
  except UsageError as error:
    print(f'evaluate: error: {error}', file=sys.stderr)
    return 2


if __name__ == '__main__':
  app.run(main, flags_parser=program_flags.flags_parser(
      'evaluate', config_overrides=False, launchpad=False))
