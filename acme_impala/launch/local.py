"""Launching a built program and reporting how it ended.

`launch_and_wait` launches an `lp.Program` (local_mp by default), waits for
every node and turns the run's status directory into an exit status;
`run_program` is the absl entry point shared by `programs/`.

The programs call `quiet.silence()` before anything imports TensorFlow.
"""

import logging
import os
import sys

import launchpad as lp

from acme_impala.distributed import collective
from acme_impala.distributed import lifecycle
from acme_impala.envs import multitask
from acme_impala.launch import config_flags
from acme_impala.launch import curves
from acme_impala.launch import plots
from acme_impala.launch import program_flags
from acme_impala.launch import progress
from acme_impala.launch import supervisor

# Under the run's logdir: one output file per node process.
NODE_LOGS = 'nodes'


def launch_and_wait(program, logdir: str,
                    launch_type: str = 'local_mp',
                    restarts: str = '',
                    termination_notice_s: float = 30.,
                    start_method: str = 'fork',
                    run=None,
                    verbose: bool = False,
                    progress_interval_s: float = 5.) -> int:
  """Launches `program`, waits for every node, returns the exit status.

  0 when the program stopped normally (step budget, Ctrl-C, SIGTERM) and
  every lost node process was restarted; 1 with the failing node's message
  when a node failed or a group exceeded its restart limit. Messages start
  with the program's own name. `local_mp` runs under `supervisor.Supervisor`
  (restarts per `restarts`, see `supervisor.parse_restart_policies`; node
  processes forked from this one or Launchpad's exec'd commands per
  `start_method`, see `program_flags.START_METHODS`); the thread-based launch
  types (`local_mt`, `test_mt`) have no processes to
  restart and use Launchpad's launcher.

  Under `local_mp` each node's output goes to `<logdir>/nodes/`, and to the
  terminal only when `verbose`. Given the `program.PreparedRun` it was built
  from (`run`), the terminal shows a progress line every
  `progress_interval_s` seconds and a summary at the end, and the run's
  curves are drawn into `<logdir>/curves.png` (path printed) however it
  ended.
  """
  name = program.name
  logdir = os.path.abspath(logdir)
  status_dir = os.path.join(logdir, 'status')
  learners = len(program.groups.get('learner', ()))
  if learners > 1:
    if launch_type != 'local_mp':
      raise ValueError(f'{learners} learner replicas need a process each: '
                       f'launch_type={launch_type!r}; expected local_mp.')
    # Where the replicas' collective group listens (distributed/
    # collective.py), inherited by every node process.
    os.environ[collective.ADDRESSES_ENV] = ','.join(
        collective.local_addresses(learners))
  if launch_type == 'local_mp':
    policies = supervisor.parse_restart_policies(restarts)
    tracker, at_end = None, None
    if run is not None:
      tracker = progress.Progress(
          logdir, run.agents[0].options.max_actor_steps,
          agents=[a.options.agent for a in run.agents],
          tasks=multitask.task_ids(run.agents[0].config.env_ids))
      at_end = lambda: write_curves(logdir)
    return supervisor.Supervisor(
        program, status_dir, policies,
        termination_notice_s=termination_notice_s,
        start_method=start_method,
        node_log_dir=os.path.join(logdir, NODE_LOGS), verbose=verbose,
        progress=tracker, progress_interval_s=progress_interval_s,
        at_end=at_end).run()
  manager = lp.launch(program, launch_type=launch_type)
  crashed = None
  try:
    manager.wait()
  except Exception as error:  # pylint: disable=broad-except
    # Thread-based launches re-raise a node's exception here.
    crashed = error
  finally:
    lifecycle.forget_stop()
  failures = lifecycle.read_failures(status_dir)
  if failures:
    for message in failures:
      print(f'{name}: {message}', flush=True)
    print(f'{name}: details in {status_dir}', flush=True)
    return 1
  if crashed is not None:
    print(f'{name}: a node crashed: {crashed!r}', flush=True)
    return 1
  print(f'{name}: all nodes stopped; exiting with status 0.', flush=True)
  return 0


def print_run_files(name: str, logdir: str) -> None:
  """Where a run keeps what it records (before its nodes start)."""
  print(f'{name}: config {os.path.join(logdir, "config.json")}; node output '
        f'{os.path.join(logdir, NODE_LOGS)}/; TensorBoard: tensorboard '
        f'--logdir {os.path.join(logdir, "tensorboard")}', flush=True)


def write_curves(logdir: str) -> str:
  """Draws <logdir>/curves.png; says where, or why not (a run that logged
  nothing to draw: its exit status is the run's, not the picture's)."""
  try:
    drawn = [plots.write_run_curves(logdir)]
    if curves.run_tasks(logdir):
      drawn.append(plots.write_task_curves(logdir))
    return f'curves: {", ".join(drawn)}'
  except Exception as error:  # pylint: disable=broad-except
    return f'no curves drawn: {error}'


def run_program(name: str, main) -> None:
  """absl entry point shared by programs/: strips --config.<field> flags,
  sets Launchpad defaults, and exits 2 with one line on a bad override. The
  program has declared its flags and the launcher's
  (`program_flags.define`, `define_launcher`).

  `main(argv, overrides)` returns the exit status.
  """
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top

  argv, overrides_text = config_flags.split_config_overrides(sys.argv)
  flags.FLAGS.set_default('lp_launch_type', 'local_mp')
  # A stop can arrive while the learner compiles its first step (10-20 s on
  # 2 busy cores), which cannot be interrupted; Launchpad's default notice
  # (10 s) would then kill the runtime instead of letting it checkpoint.
  flags.FLAGS.set_default('lp_termination_notice_secs', 30)

  def _main(argv):
    try:
      # --restarts was checked by program_flags.reject_bad_flags' caller.
      overrides = config_flags.parse_overrides(overrides_text)
    except ValueError as error:
      print(f'{name}: error: {error}', file=sys.stderr)
      sys.exit(2)
    status = main(argv, overrides)
    if flags.FLAGS.lp_launch_type == 'local_mp':
      # Every node has stopped (the supervisor returned) and this process
      # holds nothing left to flush but its streams. Python's finalisation
      # of TensorFlow, gRPC and Reverb would cost 1.2 s of CPU after the
      # last line (on a 2.6 GHz AMD EPYC), for every run.
      logging.shutdown()
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(status or 0)  # sys.exit's None is 0 too.
    sys.exit(status)

  app.run(_main, argv=argv, flags_parser=program_flags.flags_parser(name))
