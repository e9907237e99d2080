"""The training program's flags, declared once for every way of running it.

`programs/impala_lp.py` (local launch; `laser_sweep_lp.py` is it with a
sweep's defaults), `programs/impala_k8s.py` (manifests) and the Kubernetes
pod entry (`launch/k8s/node.py`) take the same flags and build the same program
from them: `define()` declares them, `prepare()` turns them into a
`PreparedRun` (one agent, or a LASER sweep when `--learning_rates` or
`--entropy_costs` is given), `forward()` writes them back as arguments for a
node process, which then rebuilds exactly the graph its launcher validated.
"""

import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from absl import flags

from acme_impala.agent import config as config_lib
from acme_impala.agent import presets
from acme_impala.distributed import lifecycle
from acme_impala.distributed import pbt
from acme_impala.launch import config_flags
from acme_impala.launch import isolation

FLAGS = flags.FLAGS
# Default run directories live under the repository root.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# A sweep is LASER as the paper runs it (Schmitt et al. 2019): 7 of 8 rows
# replayed, the trust region on, the entropy bonus on online rows. Sharing a
# replay without the trust region is what LASER's Figure 3 shows failing.
# b = 0.5: the value this project's LASER runs have used (the MinAtar ones
# in docs/benchmarks.md); no threshold sweep has run yet (issue 37).
SWEEP_DEFAULTS = {'replay_fraction': 0.875, 'kl_threshold': 0.5,
                  'entropy_on_online_only': True}
# Flags of a launcher (local.run_program, Launchpad) kept in the run's record.
LAUNCHER_FLAGS = ('lp_launch_type', 'restarts', 'node_start', 'verbose',
                  'progress_interval_s')


# How local_mp starts each node process (--node_start; launch/supervisor.py).
START_METHODS = ('fork', 'exec')

# Launchpad's flags a user of these programs sets (--help lists them).
_LAUNCHPAD_FLAGS = ('lp_launch_type', 'lp_termination_notice_secs')
# The names of every flag importing Launchpad defines (launchpad.flags, and
# absl.testing, which it imports), so that `reject_bad_flags` can pass them
# on before Launchpad is loaded; tests/test_program_flags.py checks this
# against a real import.
LAUNCHPAD_FLAG_PREFIXES = ('lp_', 'tmux_', 'test_', 'xml_output_file')
_HELP_FLAGS = ('--help', '-h', '--helpshort', '-?')


def _print_help(config_overrides: bool, launchpad: bool) -> None:
  # The program's own flags (defined in acme_impala's modules, and
  # Launchpad's launch type) as key flags of the main module, which is what
  # absl's short help lists.
  for module, defined in FLAGS.flags_by_module_dict().items():
    for flag in defined:
      if module.startswith('acme_impala') or (
          launchpad and flag.name in _LAUNCHPAD_FLAGS):
        FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  doc = (sys.modules['__main__'].__doc__ or '').strip()
  tail = ('--config.<field>=<value> sets any IMPALAConfig field; '
          if config_overrides else '')
  print(f'{doc}\n\nflags:\n{FLAGS.main_module_help()}\n\n'
        f'{tail}--helpfull lists every flag of every library.')


def _reject(name: str, message: str) -> None:
  print(f'{name}: error: {message} (see --help)', file=sys.stderr)
  sys.exit(2)


def flags_parser(name: str, config_overrides: bool = True,
                 launchpad: bool = True):
  """absl's `flags_parser` for the programs: --help lists the program's own
  flags and exits 0; a flag absl rejects (unknown, malformed, out of range)
  exits 2 (a usage error) with one line naming it, as the config's checks
  do. `config_overrides`: the program takes --config.<field> flags (its
  help says so); `launchpad`: it is a Launchpad program (its help lists
  Launchpad's launch flags)."""

  def parse(args):
    if any(a in _HELP_FLAGS for a in args[1:]):
      _print_help(config_overrides, launchpad)
      sys.exit(0)
    try:
      return FLAGS(args)
    except flags.Error as error:
      _reject(name, str(error))

  return parse


def reject_bad_flags(name: str, argv: List[str],
                     check: Optional[Callable[[Dict[str, Any]], None]] = None,
                     config_overrides: bool = True,
                     launchpad: bool = True) -> None:
  """Exits 2 with one line naming a bad flag or value before the program
  imports Launchpad or TensorFlow (a second or more on 2 cores).

  The flags defined so far parse `argv`; any other flag must be one that
  importing Launchpad defines (when `launchpad`), whose values the full
  parse checks. Then `check(overrides)`, given the parsed --config.<field>
  flags, raises ValueError or TypeError on what else needs no TensorFlow to
  decide (the configs, the logdir). Leaves every flag unparsed, at its default, for the
  program's full parse.
  """
  if any(a in _HELP_FLAGS for a in argv[1:]):
    return  # The full parse lists every flag.
  _PASSED_ON.clear()
  args, overrides_text = (config_flags.split_config_overrides(argv)
                          if config_overrides else (argv, []))
  allowed = LAUNCHPAD_FLAG_PREFIXES if launchpad else ()
  try:
    rest, arguments, value_next = FLAGS(args, known_only=True), [], False
    for i, arg in enumerate(rest[1:], 1):
      if arg == '--':  # What follows are arguments.
        arguments.extend(rest[i + 1:])
        break
      if not arg.startswith('-'):
        if not value_next:  # Else the value of the flag before it.
          arguments.append(arg)
        value_next = False
        continue
      flag = arg.lstrip('-').split('=', 1)[0]
      if not (flag.startswith(allowed) or
              (flag.startswith('no') and flag[2:].startswith(allowed))):
        _reject(name, f'Unknown command line flag {flag!r}')
      value_next = '=' not in arg
      if flag in _LAUNCHPAD_FLAGS:
        _PASSED_ON[flag] = (arg.split('=', 1)[1] if '=' in arg else
                            rest[i + 1] if i + 1 < len(rest) else '')
    if arguments:
      _reject(name, f'Unexpected arguments: {arguments}; the program takes '
              'flags only')
    if check is not None:
      check(config_flags.parse_overrides(overrides_text))
  except flags.Error as error:
    _reject(name, str(error))
  except (ValueError, TypeError) as error:  # As main() reports them.
    print(f'{name}: error: {error}', file=sys.stderr)
    sys.exit(2)
  finally:
    FLAGS.unparse_flags()


# Launchpad's flags as the command line gives them, for checks made before
# Launchpad (which defines them) loads.
_PASSED_ON: Dict[str, str] = {}


def launch_type() -> str:
  """--lp_launch_type, parsed or (before Launchpad loads) as given."""
  if 'lp_launch_type' in FLAGS:
    return FLAGS['lp_launch_type'].value
  return _PASSED_ON.get('lp_launch_type', 'local_mp')


def define() -> None:
  flags.DEFINE_string('config', 'cartpole',
                      f'A preset, one of {presets.names()} (configs/), or '
                      'the path of a config file with get_config().')
  # Bounds here, not only in program.validate_run: absl checks them when
  # reject_bad_flags parses, before TensorFlow loads.
  flags.DEFINE_integer('num_actors', 2, 'Actor processes (per agent in a '
                       'sweep).', lower_bound=1)
  # Enough for the default cartpole config to pass an evaluator average of
  # 450: the slowest run measured got there at 675k steps (with the 2 x 32
  # defaults 325k; docs/benchmarks.md#learning-the-default-cartpole-program).
  # One to three minutes on 2 cores, by CPU.
  # IMPALA Fig. 1 right: K learners, gradients summed every step.
  flags.DEFINE_integer('num_learners', 1,
                       'Synchronous learner replicas (one agent): each '
                       'learns from 1/K of every batch (batch_size and its '
                       'replayed rows divisible by K), the gradients summed '
                       'over them every step; replica 0 serves the actors '
                       'and checkpoints.', lower_bound=1)
  flags.DEFINE_integer('max_actor_steps', 800_000,
                       'Environment steps (summed over actors) to train for '
                       '(per agent in a sweep).', lower_bound=1)
  flags.DEFINE_string('logdir', None,
                      'Logs and checkpoints; default runs/impala-<time> '
                      '(a sweep: runs/laser-<time>).')
  flags.DEFINE_integer('seed', None, 'Overrides config.seed.')
  flags.DEFINE_bool('restore', False,
                    'Resume from the checkpoints in --logdir.')
  flags.DEFINE_bool('evaluator', True, 'Run an evaluator node.')
  flags.DEFINE_integer('eval_episodes', 10,
                       'Episodes per evaluation round, played at once with '
                       'one weight version (one row each in the evaluator '
                       'logs).', lower_bound=1)
  # A LASER sweep (Schmitt et al. 2019, section 5.4): K agents in one
  # program, one per (learning rate, entropy cost) pair.
  flags.DEFINE_list('learning_rates', [],
                    'A sweep: its learning rates. Given (or with '
                    '--entropy_costs), the program trains one agent per '
                    '(learning rate, entropy cost) pair, with LASER\'s '
                    f'defaults {SWEEP_DEFAULTS} unless --config.<field> '
                    'sets them.')
  flags.DEFINE_list('entropy_costs', [],
                    'A sweep: its entropy costs (see --learning_rates).')
  flags.DEFINE_bool('share_replay', True,
                    'A sweep: one replay table shared by all agents (else '
                    'one each).')
  # IMPALA Appendix F; distributed/pbt.py and nodes.PBTControllerNode.
  flags.DEFINE_integer(
      'pbt_interval_steps', 0,
      'A sweep: population-based training, each agent evolving (exploit: '
      'copy a better agent\'s weights, optimiser state and hyperparameters; '
      'explore: perturb learning rate, entropy cost and RMSProp epsilon) '
      'every this many of its learner steps; events in '
      '<logdir>/pbt/events.csv. 0: off.', lower_bound=0)
  flags.DEFINE_integer(
      'pbt_burn_in_steps', None,
      'A sweep with PBT: learner steps before the first evolution (default: '
      'one --pbt_interval_steps).', lower_bound=0)


def define_launcher() -> None:
  """The local launcher's flags (`local.run_program`), declared with the
  program's before Launchpad loads, so that `reject_bad_flags` checks them
  too."""
  flags.DEFINE_string(
      'restarts', '',
      'Restart limits per node role over the defaults (every role: 3 '
      'restarts within 600 s), as ROLE=N[/SECONDS],...; roles: '
      f'{", ".join(lifecycle.ROLES)}. E.g. --restarts=actor=5/600,learner=0.'
      ' A node process that dies without a program stop is restarted until '
      'its limit is exceeded; then the program stops with status 1.')
  flags.DEFINE_enum(
      'node_start', 'fork', START_METHODS,
      'How local_mp starts each node process: fork this launcher, which has '
      'imported everything already (start-up in seconds), or exec '
      "Launchpad's process_entry.py command (a new interpreter per node).")
  flags.DEFINE_bool(
      'verbose', False,
      'Also show every node\'s output in this terminal (prefixed with the '
      'node); it always goes to <logdir>/nodes/<group>-<index>.log.')
  flags.DEFINE_bool(
      isolation.EXPOSE_FLAG, False,
      'Let the run\'s Reverb and courier servers listen on every interface '
      '(unauthenticated: courier runs what it is sent). By default the run '
      'has a network namespace of its own with only loopback, and stops '
      'before starting if the kernel allows none.')
  flags.DEFINE_float(
      'progress_interval_s', 5.,
      'Seconds between progress lines (local_mp).', lower_bound=0.5)


def is_sweep() -> bool:
  return bool(FLAGS.learning_rates or FLAGS.entropy_costs)


def default_logdir() -> str:
  kind = 'laser' if is_sweep() else 'impala'
  return os.path.join(_ROOT, 'runs', time.strftime(f'{kind}-%Y%m%d-%H%M%S'))


def _floats(name: str) -> List[float]:
  values = []
  for text in FLAGS[name].value:
    try:
      values.append(float(text))
    except ValueError:
      raise ValueError(f'--{name}: {text!r} is not a number; expected '
                       'comma-separated numbers, e.g. 1e-3,2e-3.') from None
  return values


def make_config(overrides: Dict[str, Any]):
  """The named config with --seed and --config.<field> applied; raises
  ValueError or TypeError naming a bad value."""
  config = presets.get_config(FLAGS.config)
  overrides = dict(overrides)
  if FLAGS.seed is not None:
    overrides['seed'] = FLAGS.seed
  if is_sweep():
    for field, value in SWEEP_DEFAULTS.items():
      overrides.setdefault(field, value)
  return config.replace(**overrides)


def make_configs(overrides: Dict[str, Any]):
  """One config, or a sweep's grid (learning rate x entropy cost; a list
  not given keeps the config's value)."""
  base = make_config(overrides)
  if not is_sweep():
    return [base]
  grid = config_lib.sweep_configs(
      base, _floats('learning_rates') or [base.learning_rate],
      _floats('entropy_costs') or [base.entropy_cost])
  if len(grid) < 2:
    raise ValueError(
        f'--learning_rates={",".join(FLAGS.learning_rates)} '
        f'--entropy_costs={",".join(FLAGS.entropy_costs)} make 1 agent; a '
        'sweep needs at least 2 (learning rate, entropy cost) pairs (for one '
        'agent, set --config.learning_rate / --config.entropy_cost).')
  config_lib.validate_sweep(grid, FLAGS.share_replay)
  return grid


def checked_configs(overrides: Dict[str, Any]):
  """`make_configs`, and PBT's settings checked against them (a population,
  evaluators): what every program checks before TensorFlow loads."""
  configs = make_configs(overrides)
  pbt.validate(**pbt_settings(), num_agents=len(configs),
               evaluator=FLAGS.evaluator)
  for config in configs:
    config_lib.validate_num_learners(config, FLAGS.num_learners,
                                     len(configs))
  if FLAGS.num_learners > 1 and launch_type() != 'local_mp':
    # Collective ops are configured per process, once: one process each.
    raise ValueError(
        f'--num_learners={FLAGS.num_learners} with --lp_launch_type='
        f'{launch_type()}: learner replicas need a process each; use '
        '--lp_launch_type=local_mp (or Kubernetes).')
  return configs


def pbt_settings() -> Dict[str, int]:
  """`program.prepare_run`'s PBT arguments from the flags."""
  interval = FLAGS.pbt_interval_steps
  burn_in = FLAGS.pbt_burn_in_steps
  return dict(pbt_interval_steps=interval,
              pbt_burn_in_steps=interval if burn_in is None else burn_in)


def record_options(overrides: Dict[str, Any]) -> Dict[str, Any]:
  """What every program keeps in its run's record (`run_record`): the named
  config, the overrides and the launcher's flags that are defined."""
  return {'config_name': FLAGS.config,
          'config_overrides': config_flags.format_overrides(overrides),
          **{name: FLAGS[name].value for name in LAUNCHER_FLAGS
             if name in FLAGS}}


def run_options(overrides: Dict[str, Any]) -> Dict[str, Any]:
  """How this run was asked for, for its record."""
  if is_sweep():
    return dict(record_options(overrides), seed_flag=FLAGS.seed,
                learning_rates=FLAGS.learning_rates,
                entropy_costs=FLAGS.entropy_costs)
  return dict(record_options(overrides), seed_flag=FLAGS.seed)


def prepare(overrides: Dict[str, Any], logdir: str, launcher: bool = True,
            **extra_options):
  """`program.prepare_run` of these flags (see its `launcher` argument);
  `extra_options` go into the run's record beside the flags."""
  from acme_impala.distributed import program  # pylint: disable=g-import-not-at-top
  return program.prepare_run(
      make_configs(overrides), logdir, FLAGS.max_actor_steps,
      num_actors=FLAGS.num_actors, restore=FLAGS.restore,
      evaluator=FLAGS.evaluator, eval_episodes=FLAGS.eval_episodes,
      share_replay=FLAGS.share_replay,
      name='laser_sweep' if is_sweep() else 'impala',
      launcher=launcher, **pbt_settings(), num_learners=FLAGS.num_learners,
      run_options=dict(run_options(overrides), **extra_options))


def forward(overrides: Dict[str, Any], logdir: str) -> List[str]:
  """These flags as arguments for a node process of the same program."""
  name = presets.preset_name(FLAGS.config)
  if name is None:
    # A node process (a pod) has the image's configs/, not this machine's
    # files.
    raise ValueError(
        f'--config={FLAGS.config!r}: a node process elsewhere cannot read a '
        f'config file outside configs/; expected a preset, one of '
        f'{presets.names()} (or configs/<preset>.py).')
  args = [f'--config={name}', f'--num_actors={FLAGS.num_actors}',
          f'--num_learners={FLAGS.num_learners}',
          f'--max_actor_steps={FLAGS.max_actor_steps}', f'--logdir={logdir}',
          f'--restore={str(FLAGS.restore).lower()}',
          f'--evaluator={str(FLAGS.evaluator).lower()}',
          f'--eval_episodes={FLAGS.eval_episodes}']
  if FLAGS.seed is not None:
    args.append(f'--seed={FLAGS.seed}')
  if is_sweep():
    args += [f'--learning_rates={",".join(FLAGS.learning_rates)}',
             f'--entropy_costs={",".join(FLAGS.entropy_costs)}',
             f'--share_replay={str(FLAGS.share_replay).lower()}']
  if FLAGS.pbt_interval_steps:
    args += [f'--{k}={v}' for k, v in pbt_settings().items()]
  return args + config_flags.format_overrides(overrides)
