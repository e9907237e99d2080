"""The agent's shared vocabulary: table names, variable groups, the batch.

Everything that two roles must agree on without importing each other lives
here: the builder names its Reverb tables with these constants, the learner
serves its variables under these group names and the actors ask for them, and
the learner's data iterator hands the learner a `Batch`.
"""

import re
from typing import Any, NamedTuple, Sequence

from acme.adders import reverb as acme_reverb
import dm_env
import numpy as np
import tree

# Acme's default table name, so that Acme's own IMPALA actor and learner read
# and write the same queue as ours.
QUEUE_TABLE = acme_reverb.DEFAULT_PRIORITY_TABLE
REPLAY_TABLE = 'replay'

# Names under which IMPALALearner.get_variables serves its state.
POLICY_VARIABLES = 'policy'
LEARNER_STEPS = 'learner_steps'

# The roles of a program's nodes: its Launchpad group names, which a sweep
# prefixes with `agent_<i>_`. Restart policies (supervisor) and Kubernetes
# resources (k8s/manifests) are given per role.
ROLES = ('replay', 'counter', 'learner', 'actor', 'evaluator', 'coordinator')


def role_of(group: str) -> str:
  """'agent_1_actor' -> 'actor' (a sweep prefixes its agents' groups)."""
  return re.sub(r'^agent_\d+_', '', group)


# Extras an IMPALAActor writes with each step (Acme's IMPALA layout plus the
# two optional identifiers of the weights that acted).
LOGITS = 'logits'
CORE_STATE = 'core_state'
POLICY_VERSION = 'policy_version'  # Learner step of the acting weights.
AGENT_ID = 'agent_id'  # Which agent of a sweep wrote the step.


class Batch(NamedTuple):
  """What the builder's data iterator hands the learner.

  Attributes:
    data: an Acme `Trajectory` nest of [B, T+1, ...] items.
    online: [B] bool; True for rows taken from the trajectory queue (each
      learned from exactly once), False for rows sampled from the replay.
    walk_start: None, or (replay_core_state='recompute') [B] bool: True for
      a replayed row whose trajectory is the first of an episode walk; the
      other replayed rows continue the walk of the same row in the previous
      batch, and the learner carries their LSTM state over.
  """
  data: Any
  online: Any
  walk_start: Any = None


class ReplayRows(NamedTuple):
  """Replayed rows that walk episodes: data [R, T+1, ...], walk_start [R]."""
  data: Any
  walk_start: Any


def timestep_row(batch: dm_env.TimeStep, index: int) -> dm_env.TimeStep:
  """Row `index` of a batch of K timesteps ([K] step types, rewards and
  discounts, [K, ...] observations: `environments.BatchedEnvironment`'s
  layout), as one dm_env environment returns it: a `StepType`, float32
  scalars and the observation nest's row."""
  return dm_env.TimeStep(
      step_type=dm_env.StepType(int(batch.step_type[index])),
      reward=np.float32(batch.reward[index]),
      discount=np.float32(batch.discount[index]),
      observation=tree.map_structure(lambda x: x[index], batch.observation))


def stack_timesteps(timesteps: Sequence[dm_env.TimeStep]) -> dm_env.TimeStep:
  """K single-environment timesteps as one batch (`timestep_row`'s inverse).
  A FIRST timestep's None reward and discount (dm_env.restart's) become 0
  and 1, what EnvPool gives."""
  first = [ts.first() for ts in timesteps]
  return dm_env.TimeStep(
      step_type=np.array([int(ts.step_type) for ts in timesteps], np.int32),
      reward=np.array([0. if f else ts.reward
                       for f, ts in zip(first, timesteps)], np.float32),
      discount=np.array([1. if f else ts.discount
                         for f, ts in zip(first, timesteps)], np.float32),
      observation=tree.map_structure(lambda *xs: np.stack(xs),
                                     *[ts.observation for ts in timesteps]))
