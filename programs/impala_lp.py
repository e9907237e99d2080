"""Trains IMPALA, or a LASER sweep, as a Launchpad program.

  python programs/impala_lp.py --lp_launch_type=local_mp
  python programs/impala_lp.py --config=atari --config.env_id=ALE/Breakout-v5 \\
      --num_actors=8 --max_actor_steps=10_000_000 --logdir=runs/breakout
  python programs/impala_lp.py --logdir=runs/breakout --restore   # resume
  python programs/impala_lp.py --learning_rates=1e-3,2e-3 \\
      --entropy_costs=0.01 --num_actors=1        # a LASER sweep, one replay

One agent is replay, learner, N actors and an evaluator. With
--learning_rates and/or --entropy_costs the program is a LASER sweep: one
agent per (learning rate, entropy cost) pair, sharing one replay
(--noshare_replay: one each), with LASER's defaults (replay_fraction 0.875,
trust region kl_threshold 0.5, entropy on online rows), logs under
<logdir>/logs/agent_<i>/. `--config` is a preset name or a config file;
`--config.<field>=<value>` overrides any IMPALAConfig field. With no flags it
runs a short CartPole training (a few minutes on 2 cores). Bad flags or
config values fail here, before any process starts.
"""

import sys

from acme_impala.host import quiet
from acme_impala.launch import isolation
quiet.silence()  # pylint: disable=g-import-not-at-top  # Before TensorFlow.
if __name__ == '__main__':  # First, while this process has one thread.
  isolation.isolate_unless_exposed('impala_lp', sys.argv)

from absl import app
from absl import flags

from acme_impala.distributed import lifecycle
from acme_impala.distributed import run_record
from acme_impala.launch import program_flags

FLAGS = flags.FLAGS
program_flags.define()


def check_before_launchpad(overrides):
  """What `main` checks first, done before Launchpad and TensorFlow load:
  the restart limits, the configs' values, PBT's settings and the
  logdir."""
  lifecycle.parse_restart_policies(FLAGS.restarts)
  program_flags.checked_configs(overrides)
  run_record.check_logdir(FLAGS.logdir or program_flags.default_logdir())


def _describe(name, run, logdir):
  """What the run is, before its nodes start."""
  if program_flags.is_sweep():
    for agent in run.agents:
      config = agent.config
      print(f'{name}: {agent.options.agent or "agent"}: '
            f'learning_rate={config.learning_rate} '
            f'entropy_cost={config.entropy_cost} '
            f'replay_fraction={config.replay_fraction} '
            f'kl_threshold={config.kl_threshold} '
            f'lr_anneal_steps={config.lr_anneal_steps}', flush=True)
    print(f'{name}: logdir={logdir} share_replay={FLAGS.share_replay}',
          flush=True)
    return
  config = run.agents[0].config
  print(f'{name}: logdir={logdir} launch_type={FLAGS.lp_launch_type} '
        f'num_actors={FLAGS.num_actors} envs_per_actor={config.envs_per_actor}'
        f' env_engine={config.env_engine}'
        f' max_actor_steps={FLAGS.max_actor_steps} '
        f'lr_anneal_steps={config.lr_anneal_steps}', flush=True)


def main(argv, overrides, name='impala_lp'):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logdir = FLAGS.logdir or program_flags.default_logdir()
  try:
    # run_main checked the flags, configs and logdir before Launchpad
    # loaded; prepare() checks what needs TensorFlow.
    run = program_flags.prepare(overrides, logdir)
  except (ValueError, TypeError) as error:
    # Bad flags or config values: one clear line, no process started.
    print(f'{name}: error: {error}', file=sys.stderr)
    return 2
  from acme_impala.distributed import program as program_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.launch import local  # pylint: disable=g-import-not-at-top
  _describe(name, run, logdir)
  local.print_run_files(name, logdir)
  print(f'{name}: {isolation.describe()}', flush=True)
  return local.launch_and_wait(program_lib.build_program(run), logdir,
                               launch_type=FLAGS.lp_launch_type,
                               restarts=FLAGS.restarts,
                               termination_notice_s=(
                                   FLAGS.lp_termination_notice_secs),
                               start_method=FLAGS.node_start, run=run,
                               verbose=FLAGS.verbose,
                               progress_interval_s=FLAGS.progress_interval_s)


def run_main(name, main_fn):
  """Runs `main_fn` as the program `name`: its flags and the launcher's
  checked first, before Launchpad and TensorFlow load (about a second)."""
  program_flags.define_launcher()
  program_flags.reject_bad_flags(name, sys.argv, check_before_launchpad)
  from acme_impala.launch import local  # pylint: disable=g-import-not-at-top
  local.run_program(name, main_fn)


if __name__ == '__main__':
  run_main('impala_lp', main)
