"""A LASER sweep: K agents with different hyperparameters sharing one replay.

  python programs/laser_sweep_lp.py --lp_launch_type=local_mp \\
      --learning_rates=1e-3,2e-3 --entropy_costs=0.01 --max_actor_steps=200000
  python programs/laser_sweep_lp.py --noshare_replay ...   # one replay each

Every agent is the config named by --config with --config.<field> overrides,
replay_fraction defaulting to LASER's 0.875, and one (learning rate,
entropy cost) pair of the grid. Logs go under <logdir>/logs/agent_<i>/.
"""

import os
import sys
import time

from acme_impala import quiet
quiet.silence()  # pylint: disable=g-import-not-at-top  # Before TensorFlow.

# Default run directories live under the repository root.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app
from absl import flags
import launchpad as lp  # Defines --lp_launch_type and friends.

from acme_impala import configs
from acme_impala import launch
from acme_impala import program_flags

FLAGS = flags.FLAGS
flags.DEFINE_string('config', 'cartpole',
                    f'Named config, one of {list(configs.CONFIG_NAMES)}.')
flags.DEFINE_list('learning_rates', ['1e-3', '2e-3'], 'Swept learning rates.')
flags.DEFINE_list('entropy_costs', ['0.01'], 'Swept entropy costs.')
flags.DEFINE_bool('share_replay', True,
                  'One replay table shared by all agents (else one each).')
flags.DEFINE_integer('num_actors', 1, 'Actor processes per agent.')
flags.DEFINE_integer('max_actor_steps', 100_000,
                     'Environment steps per agent.')
flags.DEFINE_string('logdir', None,
                    'Logs and checkpoints; default runs/laser-<time>.')
flags.DEFINE_bool('evaluator', True, 'Run an evaluator per agent.')


def main(argv, overrides):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  from acme_impala import program as program_lib  # pylint: disable=g-import-not-at-top
  from acme_impala import sweep  # pylint: disable=g-import-not-at-top
  try:
    base = configs.get_config(FLAGS.config)
    overrides.setdefault('replay_fraction', 0.875)
    base = base.replace(**overrides)
    grid = sweep.sweep_configs(
        base, [float(x) for x in FLAGS.learning_rates],
        [float(x) for x in FLAGS.entropy_costs])
    logdir = FLAGS.logdir or os.path.join(
        _ROOT, 'runs', time.strftime('laser-%Y%m%d-%H%M%S'))
    run = sweep.prepare_sweep(
        grid, num_actors=FLAGS.num_actors,
        max_actor_steps=FLAGS.max_actor_steps, logdir=logdir,
        share_replay=FLAGS.share_replay, evaluator=FLAGS.evaluator,
        run_options=dict(program_flags.record_options(overrides),
                         learning_rates=FLAGS.learning_rates,
                         entropy_costs=FLAGS.entropy_costs))
  except (ValueError, TypeError) as error:
    print(f'laser_sweep_lp: error: {error}', file=sys.stderr)
    return 2
  for agent in run.agents:
    config = agent.config
    print(f'laser_sweep_lp: {agent.options.agent}: '
          f'learning_rate={config.learning_rate} '
          f'entropy_cost={config.entropy_cost} '
          f'replay_fraction={config.replay_fraction} '
          f'kl_threshold={config.kl_threshold} '
          f'lr_anneal_steps={config.lr_anneal_steps}', flush=True)
  print(f'laser_sweep_lp: logdir={logdir} share_replay={FLAGS.share_replay}',
        flush=True)
  launch.print_run_files('laser_sweep_lp', logdir)
  return launch.launch_and_wait(program_lib.build_program(run), logdir,
                                launch_type=FLAGS.lp_launch_type,
                                restarts=FLAGS.restarts,
                                termination_notice_s=(
                                    FLAGS.lp_termination_notice_secs),
                                start_method=FLAGS.node_start, run=run,
                                verbose=FLAGS.verbose,
                                progress_interval_s=FLAGS.progress_interval_s)


if __name__ == '__main__':
  launch.run_program('laser_sweep_lp', main)
