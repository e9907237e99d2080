"""The distributed agent as a Launchpad program graph: wiring only.

Two steps, kept apart:
  - `prepare_run` does everything with a side effect or a judgement:
    validation (every bad value fails here, before any process starts), the
    configs' run-dependent values (the learning-rate annealing horizon from
    the step budget, the f = 1 warning), the run directory, the environment
    spec. It returns a `PreparedRun`.
  - `build_program(run)` is pure: it only builds the `lp.Program`, so any
    process can call it (twice, in two processes) and get the same graph.
One agent's nodes are added by `add_agent_nodes`; a single agent and a LASER
sweep (several agents, one shared replay or one each) are the same code.
Launching is `launch/local.py`; what each node does is `nodes.py`.
"""

import dataclasses
import functools
import os
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from acme import specs
from absl import logging
import launchpad as lp
import tensorflow as tf

from acme_impala.agent import builder as builder_lib
from acme_impala.agent import config as config_lib
from acme_impala.agent import networks
from acme_impala.distributed import lifecycle
from acme_impala.distributed import nodes
from acme_impala.distributed import pbt
from acme_impala.distributed import run_record
from acme_impala.envs import batched
from acme_impala.envs import multitask
from acme_impala.envs import registry

# Fields that fix the format of a trajectory: agents sharing a replay table
# must agree on them (one Reverb signature for the table).
DATA_FIELDS = ('env_id', 'env_ids', 'network', 'mlp_hidden_sizes', 'lstm_size',
               'use_prev_action_reward', 'unroll_length',
               'record_policy_version')
# Courier calls to a node that has already stopped must fail, not hang: a
# stuck call would outlive Launchpad's termination notice and get the whole
# program killed. The counter may still be starting when first called, so its
# calls wait for it, but only for a few seconds.
LEARNER_CLIENT_KWARGS = dict(call_timeout=5, wait_for_ready=False)
# The PBT controller's generator: its own seed stream of the run's seed.
_PBT_SEED_ROLE = 1000
COUNTER_CLIENT_KWARGS = dict(call_timeout=5, wait_for_ready=True)


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """Where and how long one agent runs (not hyperparameters)."""
  logdir: str
  max_actor_steps: int
  num_actors: int = 2
  restore: bool = False
  evaluator: bool = True
  # Seconds between evaluation rounds, and episodes per round (played at
  # once, one per environment, with one weight version).
  eval_interval_s: float = 2.0
  eval_episodes: int = 10
  # Agent name within a sweep ('' for a single agent): prefixes node labels,
  # log directories and checkpoint subdirectories.
  agent: str = ''
  # Agent index within a sweep: folded into every seed of the agent.
  agent_index: int = 0
  # Synchronous learner replicas (IMPALA Fig. 1 right): the learner group
  # has this many nodes, each learning from a 1/num_learners share of every
  # batch (agent/replicas.py).
  num_learners: int = 1

  def label(self, name: str) -> str:
    return f'{self.agent}/{name}' if self.agent else name

  def group(self, role: str) -> str:
    return f'{self.agent}_{role}' if self.agent else role

  @property
  def status_dir(self) -> str:
    return os.path.join(self.logdir, 'status')

  @property
  def checkpoint_dir(self) -> str:
    return os.path.join(self.logdir, 'checkpoints')


@dataclasses.dataclass(frozen=True)
class AgentRun:
  """One agent of a prepared run: its final config and options."""
  config: config_lib.IMPALAConfig
  options: RunOptions


@dataclasses.dataclass(frozen=True)
class PreparedRun:
  """Everything `build_program` needs; made by `prepare_run`."""
  name: str
  agents: Tuple[AgentRun, ...]
  environment_spec: specs.EnvironmentSpec
  share_replay: bool = True
  # Population-based training (IMPALA Appendix F) across a sweep's agents:
  # every `pbt_interval_steps` learner steps of an agent, after
  # `pbt_burn_in_steps`; 0 is off.
  pbt_interval_steps: int = 0
  pbt_burn_in_steps: int = 0

  @property
  def status_dir(self) -> str:
    return self.agents[0].options.status_dir


def _latest_readable(directory: str) -> str:
  """The checkpoint a node would restore from `directory`, read through
  (index and every tensor); ValueError naming the damaged file."""
  state = os.path.join(directory, 'checkpoint')
  try:
    latest = tf.train.latest_checkpoint(directory)
  except Exception as error:  # pylint: disable=broad-except
    # A damaged state file raises its parser's error, whichever it is.
    raise ValueError(f'{state} is damaged ({type(error).__name__}: '
                     f'{error}).') from None
  if latest is None:
    raise ValueError(f'{state} names no checkpoint that exists (damaged, or '
                     'its files were removed).')
  try:
    reader = tf.train.load_checkpoint(latest)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except Exception as error:  # pylint: disable=broad-except
    raise ValueError(f'the checkpoint {latest} (its .index or .data files) '
                     f'cannot be read: {str(error).splitlines()[0]}') from None
  return latest


def check_logdir_for_run(logdir: str, agents: Sequence[str],
                         restore: bool) -> None:
  """The one guard of a run's logdir, before any node starts.

  First the path itself must be usable (`run_record.check_logdir`). Then it
  decides from the whole logdir (config.json, and every checkpoint under
  checkpoints/: learners, counters, the replay) whether it is a new run
  (none of them there; `restore` must be False) or a run to restore (the
  record and each agent's learner checkpoint there, and every checkpoint
  readable through), and otherwise raises ValueError naming the file that
  is in the way, damaged or missing. Reads only: nothing is rotated.
  `agents`: the agents' labels ('' for a single agent).
  """
  run_record.check_logdir(logdir)
  root = os.path.join(logdir, 'checkpoints')
  record = run_record.path_of(logdir)
  states = sorted(os.path.join(d, 'checkpoint')
                  for d, _, files in os.walk(root) if 'checkpoint' in files)
  replay = os.path.join(root, 'replay')
  replay_dirs = sorted(os.listdir(replay)) if os.path.isdir(replay) else []
  present = ([record] if os.path.exists(record) else []) + states + (
      [replay] if replay_dirs else [])
  if not restore:
    if present:
      raise ValueError(
          f'logdir {logdir!r} already holds a run ({", ".join(present)}); '
          'pass --restore to resume it, or choose a new logdir.')
    return
  if not os.path.exists(record):
    raise ValueError(f'--restore: {record} is missing; a run to restore has '
                     'its record there (start a new logdir without --restore).')
  run_record.read_record(logdir)  # Raises, naming the file, if damaged.
  for agent in agents:
    learner = os.path.join(root, agent, 'learner')
    if not os.path.exists(os.path.join(learner, 'checkpoint')):
      raise ValueError(f'--restore: {learner}/checkpoint is missing; the run '
                       'never checkpointed its learner, so there is nothing to '
                       'resume (start a new logdir without --restore).')
  for state in states:
    _latest_readable(os.path.dirname(state))
  if replay_dirs and not any(
      os.path.exists(os.path.join(replay, d, 'DONE')) for d in replay_dirs):
    raise ValueError(f'--restore: no checkpoint under {replay} is complete '
                     '(none has its DONE file).')


def validate_run(config: config_lib.IMPALAConfig, options: RunOptions
                 ) -> None:
  """Fails before any process starts, naming the bad value (the logdir's
  contents are `check_logdir_for_run`'s)."""
  # The config's own rules ran when it was made (config.validate(): a
  # frozen dataclass); here what depends on this installation and CPU.
  tasks = (multitask.validate_task_ids(config.env_ids) if config.env_ids
           else (config.env_id,))
  for env_id in tasks:
    registry.validate_environment_id(env_id)
    batched.validate_engine(env_id, config.env_engine)
  networks.validate_torso_dtype(config.torso_dtype)
  if options.num_actors < 1:
    raise ValueError(f'num_actors={options.num_actors!r} is invalid: '
                     'expected an integer >= 1.')
  if options.num_actors % len(tasks):
    # IMPALA section 5.3: a fixed number of actors per task.
    raise ValueError(
        f'num_actors={options.num_actors!r} is invalid for the '
        f'{len(tasks)} tasks of env_ids={config.env_ids!r}: expected a '
        f'multiple of {len(tasks)} (the same number of actors per task).')
  if options.eval_episodes < 1:
    raise ValueError(f'eval_episodes={options.eval_episodes!r} is invalid: '
                     'an evaluation round needs at least 1 episode.')
  if options.max_actor_steps < 1:
    raise ValueError(f'max_actor_steps={options.max_actor_steps!r} is '
                     'invalid: expected an integer >= 1.')
  if not options.logdir:
    raise ValueError('logdir must be a non-empty path.')


def validate_shared_replay(configs: Sequence[config_lib.IMPALAConfig]) -> None:
  """Agents writing one replay table must agree on its format and size."""
  first = configs[0]
  for i, config in enumerate(configs[1:], start=1):
    for field in DATA_FIELDS + ('replay_capacity', 'min_replay_size'):
      if getattr(config, field) != getattr(first, field):
        raise ValueError(
            f'agent_{i}: {field}={getattr(config, field)!r} differs from '
            f'agent_0 ({getattr(first, field)!r}); agents sharing one '
            'replay must agree on the trajectory format and the replay.')
    # Whole episodes ('recompute') or trajectories: one kind of item.
    if config.replays_episodes != first.replays_episodes or (
        first.replays_episodes and config.replay_max_episode_steps !=
        first.replay_max_episode_steps):
      raise ValueError(
          f'agent_{i}: replay_core_state={config.replay_core_state!r} '
          f'(replay_max_episode_steps={config.replay_max_episode_steps}) '
          f'differs from agent_0 ({first.replay_core_state!r}, '
          f'{first.replay_max_episode_steps}); a shared replay holds either '
          "whole episodes ('recompute') or trajectories ('stored', "
          "'burn_in'), the same for every agent.")


def prepare_config(config: config_lib.IMPALAConfig, max_actor_steps: int,
                   label: str = '') -> config_lib.IMPALAConfig:
  """The config as it runs for a budget: the annealing horizon is set from
  the budget (`IMPALAConfig.learner_steps_for`), torso_dtype='auto' resolved
  in this process (`networks.resolve_torso_dtype`: the launcher's record
  says which ran wherever the nodes run on the launcher's kind of CPU, as
  under local_mp; a Kubernetes pod resolves it again on its own node), and
  f = 1 is warned about."""
  if config.replay_fraction == 1.0:
    logging.warning(
        '%sreplay_fraction=1: the learner sees no online data. LASER '
        '(Schmitt et al. 2019, Proposition 2) shows that learning only from '
        'replayed off-policy data with truncated importance weights can '
        'converge to a wrong policy; expect degraded results.',
        f'{label}: ' if label else '')
  config = config.replace(torso_dtype=networks.resolve_torso_dtype(
      config.torso_dtype, config.network))
  return config.with_annealing_horizon(max_actor_steps)


def prepare_run(configs: Sequence[config_lib.IMPALAConfig],
                logdir: str,
                max_actor_steps: int,
                num_actors: int = 2,
                restore: bool = False,
                evaluator: bool = True,
                eval_episodes: int = RunOptions.eval_episodes,
                share_replay: bool = True,
                name: Optional[str] = None,
                environment_spec: Optional[specs.EnvironmentSpec] = None,
                launcher: bool = True,
                run_options: Optional[Mapping[str, Any]] = None,
                pbt_interval_steps: int = 0,
                pbt_burn_in_steps: Optional[int] = None,
                num_learners: int = 1
                ) -> PreparedRun:
  """Validates a run of one or several agents and makes its directory.

  One config is a single agent (node labels without prefix); several are a
  sweep, agent i labelled `agent_<i>`, all in one Reverb server, sharing one
  replay table when `share_replay`. Raises ValueError (ConfigError) naming
  the bad value before anything is created.

  A launcher also writes the run's record, `<logdir>/config.json`
  (`run_record`: the configs, these options and `run_options`, e.g. the
  program's flags, versions, commit); with `restore` it first refuses
  changed hyperparameters, naming each (`run_record.check_restore`).

  `pbt_interval_steps` > 0 runs population-based training over a sweep's
  agents (`nodes.PBTControllerNode`), after `pbt_burn_in_steps` learner
  steps (default: one interval).

  `num_learners` > 1 runs a single agent's learner as that many
  synchronous replicas (IMPALA Fig. 1 right; agent/replicas.py), each
  learning from an equal share of every batch.

  `launcher=False` is for a process that runs one node of a program its
  launcher already prepared (a Kubernetes pod): the same validation of
  values, but no check of the logdir's checkpoints against `restore`, no
  directory made, no record written and no failure record cleared.
  """
  configs = list(configs)
  if not configs:
    raise ValueError('A run needs at least one agent config.')
  logdir = os.path.abspath(logdir) if logdir else logdir
  sweep = len(configs) > 1
  agents: List[AgentRun] = []
  for i, config in enumerate(configs):
    options = RunOptions(
        logdir=logdir, max_actor_steps=max_actor_steps,
        num_actors=num_actors, restore=restore, evaluator=evaluator,
        eval_episodes=eval_episodes, agent=f'agent_{i}' if sweep else '',
        agent_index=i, num_learners=num_learners)
    validate_run(config, options)
    config_lib.validate_num_learners(config, num_learners, len(configs))
    agents.append(AgentRun(
        prepare_config(config, max_actor_steps, options.agent), options))
  if pbt_burn_in_steps is None:
    pbt_burn_in_steps = pbt_interval_steps
  pbt.validate(pbt_interval_steps, pbt_burn_in_steps, len(configs),
               evaluator)
  if sweep and share_replay:
    validate_shared_replay([a.config for a in agents])
  for a in agents[1:]:
    for field in ('env_id', 'env_ids'):
      mine, first = (getattr(c.config, field) for c in (a, agents[0]))
      if mine != first:
        raise ValueError(f'{a.options.agent}: {field}={mine!r} differs '
                         f'from agent_0 ({first!r}); the agents of one run '
                         'share one environment.')
  if launcher:
    check_logdir_for_run(logdir, [a.options.agent for a in agents], restore)
  if launcher and restore:
    run_record.check_restore(logdir, configs)
  if environment_spec is None and configs[0].env_ids:
    environment_spec = registry.suite_environment_spec(configs[0].env_ids)
  elif environment_spec is None:
    environment_spec = registry.environment_spec(configs[0].env_id)
  name = name or ('laser_sweep' if sweep else 'impala')
  if launcher:
    os.makedirs(logdir, exist_ok=True)
    lifecycle.clear_run_status(agents[0].options.status_dir)
    run_record.write_record(logdir, run_record.make_record(
        configs, [a.config for a in agents],
        dict(name=name, logdir=logdir, max_actor_steps=max_actor_steps,
             num_actors=num_actors, restore=restore, evaluator=evaluator,
             eval_episodes=eval_episodes, share_replay=share_replay,
             pbt_interval_steps=pbt_interval_steps,
             pbt_burn_in_steps=pbt_burn_in_steps,
             num_learners=num_learners,
             **(run_options or {}))))
  return PreparedRun(name=name,
                     agents=tuple(agents), environment_spec=environment_spec,
                     share_replay=share_replay,
                     pbt_interval_steps=pbt_interval_steps,
                     pbt_burn_in_steps=pbt_burn_in_steps)


def _guarded(constructor, key: str, options: RunOptions):
  """A node constructor whose failure stops the program, naming the node."""
  return lifecycle.guarded_constructor(constructor, options.label(key),
                                       options.status_dir)


def add_agent_nodes(program: lp.Program, builder: builder_lib.IMPALABuilder,
                    replay, options: RunOptions):
  """Adds one agent's counter, learner, actors and evaluator to `program`.

  `replay` is the handle of the Reverb node holding the agent's tables.
  Returns the agent's `AgentHandles` (for the coordinator and PBT).
  """
  config = builder.config
  with program.group(options.group('counter')):
    counter = program.add_node(lp.CourierNode(
        _guarded(nodes.CounterNode, 'counter', options), options,
        config.checkpoint_period_minutes))
  counter.set_client_kwargs(**COUNTER_CLIENT_KWARGS)
  with program.group(options.group('learner')):
    # Replica 0 first: the node every other one calls.
    learners = [program.add_node(lp.CourierNode(
        _guarded(nodes.LearnerNode, nodes.learner_key(k), options),
        builder, replay, counter, options, k))
                for k in range(options.num_learners)]
  learner = learners[0]
  learner.set_client_kwargs(**LEARNER_CLIENT_KWARGS)
  with program.group(options.group('actor')):
    for i in range(options.num_actors):
      program.add_node(lp.CourierNode(
          _guarded(nodes.ActorNode, f'actor_{i}', options), builder, replay,
          learner, counter, i, options))
  evaluators = []
  if options.evaluator:
    with program.group(options.group('evaluator')):
      # One per task of a multi-task agent (IMPALA section 5.3).
      for task in builder.tasks:
        label = nodes.evaluator_key(builder, task)
        evaluators.append(program.add_node(lp.CourierNode(
            _guarded(nodes.EvaluatorNode, label, options), builder,
            learner, counter, options, task)))
        evaluators[-1].set_client_kwargs(**LEARNER_CLIENT_KWARGS)
  return AgentHandles(counter, learner, tuple(evaluators))


@dataclasses.dataclass(frozen=True)
class AgentHandles:
  """An agent's nodes that other nodes call."""
  counter: Any
  learner: Any
  evaluators: Tuple[Any, ...]


def make_builders(run: PreparedRun) -> List[builder_lib.IMPALABuilder]:
  """One builder per agent, with the run's table names."""
  if len(run.agents) == 1:
    return [builder_lib.IMPALABuilder(run.agents[0].config,
                                      run.environment_spec)]
  return [builder_lib.IMPALABuilder.for_sweep_agent(
      agent.config, run.environment_spec, i, run.share_replay)
          for i, agent in enumerate(run.agents)]


def build_program(run: PreparedRun) -> lp.Program:
  """The Launchpad program of a prepared run. Pure: no side effect.

  Nodes: `replay` (one Reverb server with every agent's tables; one per
  agent when a sweep does not share its replay), each agent's `counter`,
  `learner` (× num_learners synchronous replicas), `actor` × num_actors and `evaluator` (`add_agent_nodes`; group
  names prefixed `agent_<i>_` in a sweep), and one `coordinator` that stops
  the program once every agent reached the budget; with PBT, one `pbt`
  controller (`nodes.PBTControllerNode`).
  """
  builders = make_builders(run)
  program = lp.Program(name=run.name)

  def replay_node(server_builders, label):
    options = run.agents[0].options
    roles = {}
    for b in server_builders:
      roles.update(b.table_roles(
          f'agent_{b.agent_id} ' if len(run.agents) > 1 else ''))
      if run.share_replay and len(run.agents) > 1 and b.uses_replay:
        # One table under one name, whichever agent described it last.
        roles[b.replay_table] = ('shared replay', roles[b.replay_table][1])
    return nodes.ReplayNode(
        functools.partial(builder_lib.make_server_tables, server_builders,
                          run.share_replay),
        checkpoint_dir=os.path.join(options.checkpoint_dir, label),
        period_minutes=min(b.config.checkpoint_period_minutes
                           for b in server_builders),
        label=label, status_dir=run.status_dir, table_roles=roles)

  with program.group('replay'):
    if run.share_replay:
      replays = [program.add_node(replay_node(builders, 'replay'))
                 ] * len(builders)
    else:
      replays = [program.add_node(replay_node([b], f'replay_{i}'))
                 for i, b in enumerate(builders)]
  handles = [add_agent_nodes(program, b, replay, a.options)
             for b, replay, a in zip(builders, replays, run.agents)]
  with program.group('coordinator'):
    program.add_node(lp.CourierNode(
        lifecycle.guarded_constructor(nodes.CoordinatorNode, 'coordinator',
                                      run.status_dir),
        [h.counter for h in handles], run.agents[0].options.max_actor_steps,
        run.status_dir))
  if run.pbt_interval_steps:
    with program.group('pbt'):
      program.add_node(lp.CourierNode(
          lifecycle.guarded_constructor(nodes.PBTControllerNode, 'pbt',
                                        run.status_dir),
          [h.learner for h in handles], [h.evaluators for h in handles],
          [a.options.agent for a in run.agents], builders[0].tasks,
          run.pbt_interval_steps, run.pbt_burn_in_steps,
          nodes.derive_seed(run.agents[0].config.seed, _PBT_SEED_ROLE),
          run.agents[0].options.logdir, run.status_dir))
  return program


def make_program(config: config_lib.IMPALAConfig,
                 num_actors: int,
                 max_actor_steps: int,
                 logdir: str,
                 restore: bool = False,
                 evaluator: bool = True,
                 environment_spec: Optional[specs.EnvironmentSpec] = None
                 ) -> lp.Program:
  """The single-agent IMPALA program: `prepare_run` then `build_program`."""
  return build_program(prepare_run(
      [config], logdir, max_actor_steps, num_actors=num_actors,
      restore=restore, evaluator=evaluator,
      environment_spec=environment_spec))
