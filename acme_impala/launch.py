"""Launching a built program and reporting how it ended.

`launch_and_wait` launches an `lp.Program` (local_mp by default), waits for
every node and turns the run's status directory into an exit status;
`run_program` is the absl entry point shared by `programs/`.
"""

import os
import sys

import launchpad as lp

from acme_impala import config_flags
from acme_impala import lifecycle


def launch_and_wait(program, logdir: str,
                    launch_type: str = 'local_mp') -> int:
  """Launches `program`, waits for every node, returns the exit status.

  0 when the program stopped normally (step budget, Ctrl-C, SIGTERM); 1 with
  the failing node's message when a node failed. Messages start with the
  program's own name.
  """
  name = program.name
  status_dir = os.path.join(os.path.abspath(logdir), 'status')
  kwargs = {}
  if launch_type == 'local_mp':
    kwargs['terminal'] = 'current_terminal'
  manager = lp.launch(program, launch_type=launch_type, **kwargs)
  crashed = None
  try:
    manager.wait()
  except Exception as error:  # pylint: disable=broad-except
    # Thread-based launches re-raise a node's exception here.
    crashed = error
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


def run_program(name: str, main) -> None:
  """absl entry point shared by programs/: strips --config.<field> flags,
  sets Launchpad defaults, and exits 2 with one line on a bad override.

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
      overrides = config_flags.parse_overrides(overrides_text)
    except ValueError as error:
      print(f'{name}: error: {error}', file=sys.stderr)
      sys.exit(2)
    sys.exit(main(argv, overrides))

  app.run(_main, argv=argv)
