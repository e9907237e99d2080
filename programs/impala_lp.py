"""Trains IMPALA as a Launchpad program: replay, learner, N actors, evaluator.

  python programs/impala_lp.py --lp_launch_type=local_mp
  python programs/impala_lp.py --config=atari --config.env_id=ALE/Breakout-v5 \\
      --num_actors=8 --max_actor_steps=10_000_000 --logdir=runs/breakout
  python programs/impala_lp.py --logdir=runs/breakout --restore   # resume

`--config.<field>=<value>` overrides any IMPALAConfig field. With no flags it
runs a short CartPole training (a few minutes on 2 cores). Bad flags or
config values fail here, before any process starts.
"""

import os
import sys
import time

# Default run directories live under the repository root.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app
from absl import flags
import launchpad as lp  # Defines --lp_launch_type and friends.

from acme_impala import configs
from acme_impala import launch

FLAGS = flags.FLAGS
flags.DEFINE_string('config', 'cartpole',
                    f'Named config, one of {list(configs.CONFIG_NAMES)}.')
flags.DEFINE_integer('num_actors', 2, 'Actor processes.')
# Enough for the default cartpole config to pass an evaluator average of 450:
# the slowest run measured got there at 675k steps (README, learning
# benchmark). About 5 minutes on 2 cores.
flags.DEFINE_integer('max_actor_steps', 800_000,
                     'Environment steps (summed over actors) to train for.')
flags.DEFINE_string('logdir', None,
                    'Logs and checkpoints; default runs/impala-<time>.')
flags.DEFINE_integer('seed', None, 'Overrides config.seed.')
flags.DEFINE_bool('restore', False,
                  'Resume from the checkpoints in --logdir.')
flags.DEFINE_bool('evaluator', True, 'Run an evaluator node.')


def main(argv, overrides):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  # Imports that pull TensorFlow come after flag parsing, so that --help and
  # flag errors are instant.
  from acme_impala import program as program_lib  # pylint: disable=g-import-not-at-top

  try:
    config = configs.get_config(FLAGS.config)
    if FLAGS.seed is not None:
      overrides['seed'] = FLAGS.seed
    config = config.replace(**overrides)
  except (ValueError, TypeError) as error:
    print(f'impala_lp: error: {error}', file=sys.stderr)
    return 2
  logdir = FLAGS.logdir or os.path.join(
      _ROOT, 'runs', time.strftime('impala-%Y%m%d-%H%M%S'))
  try:
    run = program_lib.prepare_run(
        [config], logdir, FLAGS.max_actor_steps, num_actors=FLAGS.num_actors,
        restore=FLAGS.restore, evaluator=FLAGS.evaluator)
  except (ValueError, TypeError) as error:
    # Bad flags or config values: one clear line, no process started.
    print(f'impala_lp: error: {error}', file=sys.stderr)
    return 2
  config = run.agents[0].config
  print(f'impala_lp: logdir={logdir} launch_type={FLAGS.lp_launch_type} '
        f'num_actors={FLAGS.num_actors} envs_per_actor={config.envs_per_actor}'
        f' max_actor_steps={FLAGS.max_actor_steps} '
        f'lr_anneal_steps={config.lr_anneal_steps}', flush=True)
  return launch.launch_and_wait(program_lib.build_program(run), logdir,
                                launch_type=FLAGS.lp_launch_type,
                                restarts=FLAGS.restarts,
                                termination_notice_s=(
                                    FLAGS.lp_termination_notice_secs))


if __name__ == '__main__':
  launch.run_program('impala_lp', main)
