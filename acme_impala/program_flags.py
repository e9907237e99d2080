"""The flags of a single-agent program, shared by every way of running it.

`programs/impala_lp.py` (local launch), `programs/impala_k8s.py` (manifests)
and the Kubernetes pod entry (`k8s/node.py`) take the same flags and build
the same program from them: `define()` declares them, `prepare()` turns them
into a `PreparedRun`, `forward()` writes them back as arguments for a node
process, which then rebuilds exactly the graph its launcher validated.
"""

import os
import time
from typing import Any, Dict, List

from absl import flags

from acme_impala import config_flags
from acme_impala import configs

FLAGS = flags.FLAGS
# Default run directories live under the repository root.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ('config', 'num_actors', 'max_actor_steps', 'logdir', 'seed',
         'restore', 'evaluator', 'eval_episodes')
# Flags of a launcher (launch.run_program, Launchpad) kept in the run's record.
LAUNCHER_FLAGS = ('lp_launch_type', 'restarts', 'node_start', 'verbose',
                  'progress_interval_s')


def define() -> None:
  flags.DEFINE_string('config', 'cartpole',
                      f'Named config, one of {list(configs.CONFIG_NAMES)}.')
  flags.DEFINE_integer('num_actors', 2, 'Actor processes.')
  # Enough for the default cartpole config to pass an evaluator average of
  # 450: the slowest run measured got there at 675k steps (README, learning
  # benchmark; 325k with issue 13's 2 x 32 defaults). About 2 minutes on 2
  # cores.
  flags.DEFINE_integer('max_actor_steps', 800_000,
                       'Environment steps (summed over actors) to train for.')
  flags.DEFINE_string('logdir', None,
                      'Logs and checkpoints; default runs/impala-<time>.')
  flags.DEFINE_integer('seed', None, 'Overrides config.seed.')
  flags.DEFINE_bool('restore', False,
                    'Resume from the checkpoints in --logdir.')
  flags.DEFINE_bool('evaluator', True, 'Run an evaluator node.')
  flags.DEFINE_integer('eval_episodes', 10,
                       'Episodes per evaluation round, played at once with '
                       'one weight version (one row each in the evaluator '
                       'logs).')


def default_logdir() -> str:
  return os.path.join(_ROOT, 'runs', time.strftime('impala-%Y%m%d-%H%M%S'))


def make_config(overrides: Dict[str, Any]):
  """The named config with --seed and --config.<field> applied; raises
  ValueError or TypeError naming a bad value."""
  config = configs.get_config(FLAGS.config)
  overrides = dict(overrides)
  if FLAGS.seed is not None:
    overrides['seed'] = FLAGS.seed
  return config.replace(**overrides)


def record_options(overrides: Dict[str, Any]) -> Dict[str, Any]:
  """What every program keeps in its run's record (`run_record`): the named
  config, the overrides and the launcher's flags that are defined."""
  return {'config_name': FLAGS.config,
          'config_overrides': config_flags.format_overrides(overrides),
          **{name: FLAGS[name].value for name in LAUNCHER_FLAGS
             if name in FLAGS}}


def run_options(overrides: Dict[str, Any]) -> Dict[str, Any]:
  """How this single-agent run was asked for, for its record."""
  return dict(record_options(overrides), seed_flag=FLAGS.seed)


def prepare(overrides: Dict[str, Any], logdir: str, launcher: bool = True):
  """`program.prepare_run` of these flags (see its `launcher` argument)."""
  from acme_impala import program  # pylint: disable=g-import-not-at-top
  return program.prepare_run(
      [make_config(overrides)], logdir, FLAGS.max_actor_steps,
      num_actors=FLAGS.num_actors, restore=FLAGS.restore,
      evaluator=FLAGS.evaluator, eval_episodes=FLAGS.eval_episodes,
      launcher=launcher,
      run_options=run_options(overrides))


def forward(overrides: Dict[str, Any], logdir: str) -> List[str]:
  """These flags as arguments for a node process of the same program."""
  args = [f'--config={FLAGS.config}', f'--num_actors={FLAGS.num_actors}',
          f'--max_actor_steps={FLAGS.max_actor_steps}', f'--logdir={logdir}',
          f'--restore={str(FLAGS.restore).lower()}',
          f'--evaluator={str(FLAGS.evaluator).lower()}',
          f'--eval_episodes={FLAGS.eval_episodes}']
  if FLAGS.seed is not None:
    args.append(f'--seed={FLAGS.seed}')
  return args + config_flags.format_overrides(overrides)
