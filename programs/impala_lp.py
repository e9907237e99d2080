"""Trains IMPALA as a Launchpad program: replay, learner, N actors, evaluator.

  python programs/impala_lp.py --lp_launch_type=local_mp
  python programs/impala_lp.py --config=atari --config.env_id=ALE/Breakout-v5 \\
      --num_actors=8 --max_actor_steps=10_000_000 --logdir=runs/breakout
  python programs/impala_lp.py --logdir=runs/breakout --restore   # resume

`--config.<field>=<value>` overrides any IMPALAConfig field. With no flags it
runs a short CartPole training (a few minutes on 2 cores). Bad flags or
config values fail here, before any process starts.
"""

import sys

from acme_impala import quiet
quiet.silence()  # pylint: disable=g-import-not-at-top  # Before TensorFlow.

from absl import app
from absl import flags
import launchpad as lp  # Defines --lp_launch_type and friends.

from acme_impala import launch
from acme_impala import program_flags

FLAGS = flags.FLAGS
program_flags.define()


def main(argv, overrides):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  # Imports that pull TensorFlow come after flag parsing, so that --help and
  # flag errors are instant.
  from acme_impala import program as program_lib  # pylint: disable=g-import-not-at-top

  logdir = FLAGS.logdir or program_flags.default_logdir()
  try:
    run = program_flags.prepare(overrides, logdir)
  except (ValueError, TypeError) as error:
    # Bad flags or config values: one clear line, no process started.
    print(f'impala_lp: error: {error}', file=sys.stderr)
    return 2
  config = run.agents[0].config
  print(f'impala_lp: logdir={logdir} launch_type={FLAGS.lp_launch_type} '
        f'num_actors={FLAGS.num_actors} envs_per_actor={config.envs_per_actor}'
        f' env_engine={config.env_engine}'
        f' max_actor_steps={FLAGS.max_actor_steps} '
        f'lr_anneal_steps={config.lr_anneal_steps}', flush=True)
  launch.print_run_files('impala_lp', logdir)
  return launch.launch_and_wait(program_lib.build_program(run), logdir,
                                launch_type=FLAGS.lp_launch_type,
                                restarts=FLAGS.restarts,
                                termination_notice_s=(
                                    FLAGS.lp_termination_notice_secs),
                                start_method=FLAGS.node_start, run=run,
                                verbose=FLAGS.verbose,
                                progress_interval_s=FLAGS.progress_interval_s)


if __name__ == '__main__':
  launch.run_program('impala_lp', main)
