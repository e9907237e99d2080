"""A LASER hyperparameter sweep sharing one replay (LASER section 5.4).

K agents with different hyperparameters run in one Launchpad program, each
with its own counter, learner, queue, actors and evaluator, all logging
under their own label (`agent_<i>/...`) and each with its own seed streams.
With `share_replay=True` every agent's actors also write into, and every
learner samples from, one replay table; with `share_replay=False` each agent
has its own replay, for comparison. Trajectories in a shared replay come from
all agents' behaviour policies, which is what LASER's trust region is for.

The sweep is the several-agents case of `program.prepare_run` and
`program.build_program`: the same config preparation (annealing horizon, the
f = 1 warning), client timeouts and nodes as a single agent.
"""

from typing import Sequence

import launchpad as lp

from acme_impala.agent import config as config_lib
from acme_impala.distributed import program as program_lib


def prepare_sweep(configs: Sequence[config_lib.IMPALAConfig],
                  num_actors: int,
                  max_actor_steps: int,
                  logdir: str,
                  share_replay: bool = True,
                  evaluator: bool = True,
                  run_options=None) -> program_lib.PreparedRun:
  config_lib.validate_sweep(configs, share_replay)
  return program_lib.prepare_run(
      configs, logdir, max_actor_steps, num_actors=num_actors,
      evaluator=evaluator, share_replay=share_replay, name='laser_sweep',
      run_options=run_options)


def make_sweep_program(configs: Sequence[config_lib.IMPALAConfig],
                       num_actors: int,
                       max_actor_steps: int,
                       logdir: str,
                       share_replay: bool = True,
                       evaluator: bool = True) -> lp.Program:
  """K agents (one per config), one shared replay table (or one each)."""
  return program_lib.build_program(prepare_sweep(
      configs, num_actors, max_actor_steps, logdir, share_replay, evaluator))
