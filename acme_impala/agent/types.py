"""The agent's shared vocabulary: table names, variable groups, the batch.

Everything that two roles must agree on without importing each other lives
here: the builder names its Reverb tables with these constants, the learner
serves its variables under these group names and the actors ask for them, and
the learner's data iterator hands the learner a `Batch`.
"""

from typing import Any, NamedTuple

from acme.adders import reverb as acme_reverb

# Acme's default table name, so that Acme's own IMPALA actor and learner read
# and write the same queue as ours.
QUEUE_TABLE = acme_reverb.DEFAULT_PRIORITY_TABLE
REPLAY_TABLE = 'replay'

# Names under which IMPALALearner.get_variables serves its state.
POLICY_VARIABLES = 'policy'
LEARNER_STEPS = 'learner_steps'
# One int64 array of 2: changes whenever the served policy weights may have
# (a step, a copy by PBT or a replica group, a new learner process), so that
# an actor asks for the weights only when they are new
# (acting.VersionedVariableClient).
WEIGHTS_VERSION = 'weights_version'

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
