"""A LASER hyperparameter sweep sharing one replay (LASER section 5.4).

K agents with different hyperparameters run in one Launchpad program, each
with its own counter, learner, queue, actors and evaluator, all logging
under their own label (`agent_<i>/...`). With `share_replay=True` every
agent's actors also write into, and every learner samples from, one replay
table; with `share_replay=False` each agent has its own replay, for
comparison. Trajectories in a shared replay come from all agents' behaviour
policies, which is what LASER's trust region is for.
"""

import dataclasses
import functools
import os
from typing import List, Sequence

from absl import logging
import launchpad as lp

from acme_impala import builder as builder_lib
from acme_impala import config as config_lib
from acme_impala import environments
from acme_impala import lifecycle
from acme_impala import program as program_lib

# Fields that fix the format of a trajectory: agents sharing a replay table
# must agree on them (one Reverb signature for the table).
DATA_FIELDS = ('env_id', 'network', 'mlp_hidden_sizes', 'lstm_size',
               'use_prev_action_reward', 'unroll_length',
               'record_policy_version')


def validate_sweep(configs: Sequence[config_lib.IMPALAConfig],
                   share_replay: bool) -> None:
  if len(configs) < 1:
    raise ValueError('A sweep needs at least one agent config.')
  for i, config in enumerate(configs):
    config.validate()
    if config.replay_fraction == 0:
      raise ValueError(
          f'agent_{i}: replay_fraction=0 uses no replay; a LASER sweep needs '
          'replay_fraction in (0, 1].')
  if share_replay:
    first = configs[0]
    for i, config in enumerate(configs[1:], start=1):
      for field in DATA_FIELDS + ('replay_capacity', 'min_replay_size'):
        if getattr(config, field) != getattr(first, field):
          raise ValueError(
              f'agent_{i}: {field}={getattr(config, field)!r} differs from '
              f'agent_0 ({getattr(first, field)!r}); agents sharing one '
              'replay must agree on the trajectory format and the replay.')


class SweepCoordinator:
  """Stops the program once every agent has taken `max_actor_steps`."""

  def __init__(self, counters, max_actor_steps: int, status_dir: str):
    self._counters = counters
    self._max = max_actor_steps
    self._status_dir = status_dir

  def run(self):
    def loop():
      while not lp.wait_for_stop(0.5):
        try:
          steps = [c.get_counts().get('actor_steps', 0)
                   for c in self._counters]
        except Exception as error:  # pylint: disable=broad-except
          logging.warning('coordinator: counters not reachable yet (%s).',
                          error)
          continue
        if min(steps) >= self._max:
          logging.info('coordinator: every agent reached %d actor steps; '
                       'stopping the program.', self._max)
          lp.stop()
          return
    lifecycle.run_guarded('coordinator', self._status_dir, loop)


def make_sweep_program(configs: Sequence[config_lib.IMPALAConfig],
                       num_actors: int,
                       max_actor_steps: int,
                       logdir: str,
                       share_replay: bool = True,
                       evaluator: bool = True) -> lp.Program:
  """K agents (one per config), one shared replay table (or one each)."""
  validate_sweep(configs, share_replay)
  logdir = os.path.abspath(logdir)
  options: List[program_lib.RunOptions] = []
  for i, config in enumerate(configs):
    opts = program_lib.RunOptions(
        logdir=logdir, max_actor_steps=max_actor_steps,
        num_actors=num_actors, evaluator=evaluator, agent=f'agent_{i}')
    program_lib.validate_run(config, opts)
    options.append(opts)
  os.makedirs(logdir, exist_ok=True)
  lifecycle.clear_failures(options[0].status_dir)
  spec = environments.environment_spec(configs[0].env_id)
  builders = [
      builder_lib.IMPALABuilder(config, spec, queue_table=f'queue_{i}',
                                replay_table=('replay' if share_replay else
                                              f'replay_{i}'))
      for i, config in enumerate(configs)]

  program = lp.Program(name='laser_sweep')
  replays = []
  if share_replay:
    def shared_tables(builders=builders):
      tables = []
      for b in builders:
        tables.extend(b.make_replay_tables(include_replay=False))
      tables.append(builders[0].make_replay_table())
      return tables
    with program.group('replay'):
      shared = program.add_node(lp.ReverbNode(shared_tables))
    replays = [shared] * len(configs)
  else:
    with program.group('replay'):
      for b in builders:
        replays.append(program.add_node(lp.ReverbNode(b.make_replay_tables)))

  counters = []
  for i, (config, b, opts) in enumerate(zip(configs, builders, options)):
    name = f'agent_{i}'
    guard = functools.partial(program_lib.guarded_node, options=opts)
    with program.group(f'{name}_counter'):
      counter = program.add_node(
          lp.CourierNode(guard(program_lib.CounterNode, 'counter'), opts,
                         config))
    counter.set_client_kwargs(call_timeout=5, wait_for_ready=True)
    counters.append(counter)
    with program.group(f'{name}_learner'):
      learner = program.add_node(lp.CourierNode(
          guard(program_lib.LearnerNode, 'learner'), b, replays[i], counter,
          opts))
    learner.set_client_kwargs(call_timeout=5, wait_for_ready=False)
    with program.group(f'{name}_actor'):
      for j in range(num_actors):
        program.add_node(lp.CourierNode(
            guard(program_lib.ActorNode, f'actor_{j}'), b, replays[i],
            learner, counter, j, opts))
    if evaluator:
      with program.group(f'{name}_evaluator'):
        program.add_node(lp.CourierNode(
            guard(program_lib.EvaluatorNode, 'evaluator'), b, learner,
            counter, opts))
  with program.group('coordinator'):
    program.add_node(lp.CourierNode(
        lifecycle.guarded_constructor(SweepCoordinator, 'coordinator',
                                      options[0].status_dir),
        counters, max_actor_steps, options[0].status_dir))
  return program


def sweep_configs(base: config_lib.IMPALAConfig,
                  learning_rates: Sequence[float],
                  entropy_costs: Sequence[float]
                  ) -> List[config_lib.IMPALAConfig]:
  """The grid learning_rate x entropy_cost around `base` (LASER's sweep)."""
  return [dataclasses.replace(base, learning_rate=lr, entropy_cost=ec)
          for lr in learning_rates for ec in entropy_costs]
