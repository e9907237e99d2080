"""IMPALA / LASER hyperparameters as data, validated in one place.

Every hyperparameter of the agent lives in `IMPALAConfig`. `validate()` runs on
construction (and on `dataclasses.replace`), so a bad value fails before any
process, server or network is created, with an error naming the field, the
value and what was expected.
"""

import dataclasses
import math
from typing import Any, List, Optional, Sequence, Tuple

from acme_impala.envs import engines

NETWORKS = ('mlp_lstm', 'minatar', 'shallow', 'deep')
# The compute dtype of the shallow torso's layers (networks.ShallowAtariTorso;
# variables, LSTM, heads, V-trace and loss stay float32). See
# docs/benchmarks.md#learner for what bfloat16 buys and what was checked.
# 'auto' is resolved per process by networks.resolve_torso_dtype: bfloat16
# for the shallow torso where the CPU has bfloat16 units and oneDNN is on,
# float32 otherwise.
TORSO_DTYPES = ('float32', 'bfloat16')
TORSO_DTYPE_CHOICES = TORSO_DTYPES + ('auto',)
REWARD_CLIPPING = ('none', 'abs_one', 'soft_asymmetric')
LOSS_REDUCTIONS = ('mean', 'sum')
OFF_POLICY_CORRECTIONS = ('vtrace', 'one_step_is', 'epsilon', 'none')
# Where XLA is applied in the learner update (see learning.py):
#   'none' (the default): plain tf.function, no XLA; with RMSProp as
#       TensorFlow's fused kernel it was the fastest on CartPole's and the
#       Atari net (docs/benchmarks.md#learner);
#   'vtrace_and_optimizer': graph-mode step whose V-trace and RMSProp update
#       are jit-compiled sub-functions (the paper's recipe);
#   'full': the whole step (unroll, loss, gradients, optimiser) jit-compiled.
COMPILE_MODES = ('vtrace_and_optimizer', 'full', 'none')
# How actors write trajectories (both write the same items, see adders.py):
#   'trajectory': acme_impala.agent.adders.TrajectoryAdder, one Reverb append per
#       item (fast);
#   'acme_sequence': Acme's SequenceAdder(CONTINUE), two appends per step.
ADDERS = ('trajectory', 'acme_sequence')
# Where a replayed row's LSTM state comes from (LASER Appendix A.2):
#   'recompute': the paper's. The replay holds whole episodes, sampled
#       uniformly; each replayed row of the batch walks one episode from its
#       start, one trajectory per learner step, carrying the LSTM state that
#       the learner's network computed on the row's previous trajectory
#       (exact for a shared replay, whose states another agent's network
#       wrote);
#   'burn_in': the stored state run by the learner's current network through
#       the row's first `burn_in_length` steps, which are not learned from
#       and pass no gradient (R2D2's burn-in, LASER's named mitigation);
#   'stored': the state the actor recorded when it wrote the trajectory
#       ("not viable", LASER Figure 4 right; kept for the comparison).
REPLAY_CORE_STATES = ('recompute', 'burn_in', 'stored')
# What steps an actor's environments (batched.make_batched_environment):
#   'gymnasium': K Python gymnasium environments stepped one by one;
#   'envpool': one EnvPool instance of K C++ environments, one call per step,
#       same observations, episode ends and discounts (classic control and
#       Atari; not MinAtar). The evaluator uses the same engine; the
#       single-process agent always uses gymnasium.
ENV_ENGINES = engines.ENGINES


class ConfigError(ValueError):
  """A hyperparameter has a value outside its valid range."""


@dataclasses.dataclass(frozen=True)
class IMPALAConfig:
  """Hyperparameters of the IMPALA (and LASER) agent.

  Bare defaults are one consistent, measured setting: the learning values of
  the `cartpole` preset (configs/cartpole.py says why each), tuned together
  with the mean-reduced loss. Table G.1's learning rate, epsilon and initial
  mean square belong to the summed loss (configs/atari.py), and give updates
  hundreds of times smaller with the mean, so they are not mixed here.
  Acting mechanics (environments per actor, engine, queue) stay those of a
  plain library component; the presets set them for their programs.
  """
  # Environment.
  env_id: str = 'CartPole-v1'
  # Multi-task (IMPALA section 5.3): one agent, one set of weights, these
  # tasks: MinAtar ids and suite names ('minatar5'; envs/multitask.py).
  # Actor i plays task i mod n for the whole run; one evaluator per task.
  # env_id is not used then. Empty: the single task env_id.
  env_ids: Tuple[str, ...] = ()
  seed: int = 0

  # Network.
  network: str = 'mlp_lstm'
  mlp_hidden_sizes: Tuple[int, ...] = (64, 64)
  lstm_size: int = 64
  # False: the paper's feed-forward agent (its Atari agents; Figure 3), the
  # heads on the embedding, no LSTM (lstm_size unused).
  use_lstm: bool = True
  # Feed the previous action and clipped reward to the LSTM (paper Figure 3).
  use_prev_action_reward: bool = True
  # One of TORSO_DTYPE_CHOICES; bfloat16: shallow only.
  torso_dtype: str = 'float32'

  # Trajectories.
  unroll_length: int = 10  # n: transitions per trajectory.
  batch_size: int = 32
  discount: float = 0.99

  # Loss.
  baseline_cost: float = 0.1
  entropy_cost: float = 0.003
  reward_clipping: str = 'abs_one'
  clip_rho_threshold: Optional[float] = 1.0
  clip_c_threshold: Optional[float] = 1.0
  clip_pg_rho_threshold: Optional[float] = 1.0
  lambda_: float = 1.0
  loss_reduction: str = 'mean'
  off_policy_correction: str = 'vtrace'

  # Optimiser: RMSProp (the paper's optimiser; its Table G.1 values are the
  # atari preset's), learning rate annealed linearly to 0 over
  # `lr_anneal_steps` learner steps (None: constant).
  learning_rate: float = 4e-3
  rmsprop_decay: float = 0.99
  rmsprop_epsilon: float = 1e-5
  rmsprop_momentum: float = 0.0
  max_gradient_norm: Optional[float] = 40.0
  # RMSProp's initial mean square. The paper's optimiser (TF1's
  # RMSPropOptimizer) starts it at 1; Sonnet's at 0. With epsilon inside the
  # square root the first few hundred updates differ by orders of magnitude
  # when gradients are small (lr * g / ~1 instead of lr * g / ~|g|).
  rmsprop_initial_mean_square: float = 0.0
  lr_anneal_steps: Optional[int] = None
  # Distributed runs: set lr_anneal_steps from the actor-step budget
  # (Table G.1: "anneal linearly to 0 from beginning to end of training"),
  # see learner_steps_for.
  anneal_learning_rate: bool = False
  # With anneal_learning_rate: anneal over at least this many actor steps,
  # whatever the budget. A run shorter than the paper's then follows the
  # first part of the paper's schedule instead of squeezing all of it into
  # its budget (None: over the budget).
  lr_anneal_min_actor_steps: Optional[int] = None

  # Learner mechanics.
  compile_mode: str = 'none'
  prefetch_size: int = 2
  # A distributed learner traces and compiles its update on a batch of
  # zeros (then puts every variable back) while the actors start, instead of
  # after the first batch arrives: the first update of a process took 5-14 s
  # on CartPole's net, the longest wait of a program's start-up.
  warm_up_update: bool = True
  # Threads one TensorFlow op of the learner's update may use: 0 for
  # TensorFlow's intra-op pool (every core), 1 for the thread running it.
  # None: 1 for the MLP torso, whose ops on [B, 4H] tensors are too small
  # to pay for splitting across threads (CartPole's update 2-5 % faster with
  # 1), 0 for the convolutional torsos (Pong's update 1.1-1.4x slower with
  # 1); see learning.intra_op_threads and docs/benchmarks.md#learner.
  learner_intra_op_threads: Optional[int] = None

  # Acting.
  # Environments per actor process, stepped in lockstep with one batched
  # policy call (the TF per-call cost is amortised over them).
  envs_per_actor: int = 1
  env_engine: str = 'gymnasium'
  # EnvPool's worker threads per actor; 0: the cores the actor process may
  # run on, at most envs_per_actor (set 1 with several actors per core).
  env_threads: int = 0
  # Actor steps between asks for new weights; an actor fetches them only
  # when the learner's have changed, and its background asks are paced
  # by the learner's steps (acting.VersionedVariableClient).
  variable_update_period: int = 1
  record_policy_version: bool = True  # Adds extras['policy_version'].
  adder: str = 'trajectory'

  # Trajectory queue (a Reverb FIFO table).
  max_queue_size: int = 1000

  # LASER (Schmitt et al. 2019). replay_fraction f: each learner batch holds
  # B*(1-f) online trajectories from the queue and B*f sampled uniformly
  # from a replay table (FIFO removal, `replay_capacity` items, no sampling
  # before `min_replay_size` items). 0 is plain IMPALA; 0.5 is IMPALA's
  # replay experiment (section 5.2.2); 0.875 is LASER's 7 replayed per online.
  # The replay's items are whole episodes under replay_core_state='recompute'
  # (the paper's: "we store the entire episodes", removed first in first
  # out), trajectories of `unroll_length` steps otherwise; the two capacities
  # count those items.
  replay_fraction: float = 0.0
  replay_capacity: int = 10_000
  min_replay_size: int = 100
  # Trust region (LASER section 4.3): transitions whose KL(pi || implied
  # policy) >= kl_threshold are masked out of every loss term. None: off.
  kl_threshold: Optional[float] = None
  # LASER computes the entropy bonus on online data only.
  entropy_on_online_only: bool = False
  # A replayed row's initial LSTM state: one of REPLAY_CORE_STATES. Only
  # replayed rows use it (nothing changes at replay_fraction=0).
  replay_core_state: str = 'recompute'
  burn_in_length: int = 0
  # 'recompute': an actor keeps an episode's trajectories referenceable until
  # the episode ends, to write it as one replay item; an episode longer than
  # this many steps is replayed from its start up to this length (the
  # default is Atari's 30-minute cap, Table G.1).
  replay_max_episode_steps: int = 27_000

  # Checkpoints of the learner and counter (distributed program).
  checkpoint_period_minutes: float = 5.0
  # Learner steps between the training-state digests that synchronous
  # learner replicas (--num_learners > 1) log, which show them in step.
  replica_check_steps: int = 50

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    """Raises ConfigError naming the first field with an invalid value."""
    _check_str(self, 'env_id')
    if not (isinstance(self.env_ids, tuple) and
            all(isinstance(i, str) and i for i in self.env_ids)):
      _fail(self, 'env_ids', 'a tuple of environment ids or suite names')
    _check_int(self, 'seed', 0, None)
    _check_choice(self, 'network', NETWORKS)
    _check_int_tuple(self, 'mlp_hidden_sizes')
    _check_int(self, 'lstm_size', 1, None)
    _check_bool(self, 'use_lstm')
    _check_bool(self, 'use_prev_action_reward')
    _check_choice(self, 'torso_dtype', TORSO_DTYPE_CHOICES)
    if self.torso_dtype == 'bfloat16' and self.network != 'shallow':
      raise ConfigError(
          f'IMPALAConfig.torso_dtype={self.torso_dtype!r} is only '
          f"implemented for network='shallow' (got network="
          f"{self.network!r}); expected torso_dtype='float32'.")
    _check_int(self, 'unroll_length', 1, None)
    _check_int(self, 'batch_size', 1, None)
    _check_float(self, 'discount', 0.0, 1.0)
    _check_float(self, 'baseline_cost', 0.0, None)
    _check_float(self, 'entropy_cost', 0.0, None)
    _check_choice(self, 'reward_clipping', REWARD_CLIPPING)
    for name in ('clip_rho_threshold', 'clip_c_threshold',
                 'clip_pg_rho_threshold'):
      _check_float(self, name, 0.0, None, allow_none=True, open_low=True)
    if (self.clip_rho_threshold is not None and
        self.clip_c_threshold is not None and
        self.clip_c_threshold > self.clip_rho_threshold):
      # The paper assumes rho_bar >= c_bar (section 4.1).
      raise ConfigError(
          f'IMPALAConfig.clip_c_threshold={self.clip_c_threshold!r} must be '
          f'<= clip_rho_threshold={self.clip_rho_threshold!r} (the V-trace '
          'analysis assumes rho_bar >= c_bar).')
    _check_float(self, 'lambda_', 0.0, 1.0)
    _check_choice(self, 'loss_reduction', LOSS_REDUCTIONS)
    _check_choice(self, 'off_policy_correction', OFF_POLICY_CORRECTIONS)
    _check_float(self, 'learning_rate', 0.0, None, open_low=True)
    _check_float(self, 'rmsprop_decay', 0.0, 1.0)
    _check_float(self, 'rmsprop_epsilon', 0.0, None, open_low=True)
    _check_float(self, 'rmsprop_momentum', 0.0, 1.0)
    _check_float(self, 'rmsprop_initial_mean_square', 0.0, None)
    _check_float(self, 'max_gradient_norm', 0.0, None, allow_none=True,
                 open_low=True)
    _check_int(self, 'lr_anneal_steps', 1, None, allow_none=True)
    _check_bool(self, 'anneal_learning_rate')
    _check_int(self, 'lr_anneal_min_actor_steps', 1, None, allow_none=True)
    _check_int(self, 'envs_per_actor', 1, 1024)
    _check_choice(self, 'env_engine', ENV_ENGINES)
    _check_int(self, 'env_threads', 0, 1024)
    _check_float(self, 'checkpoint_period_minutes', 0.0, None, open_low=True)
    _check_int(self, 'replica_check_steps', 1, None)
    _check_float(self, 'replay_fraction', 0.0, 1.0)
    replayed = self.batch_size * self.replay_fraction
    if abs(replayed - round(replayed)) > 1e-9:
      raise ConfigError(
          f'IMPALAConfig.replay_fraction={self.replay_fraction!r} is invalid '
          f'with batch_size={self.batch_size!r}: batch_size * replay_fraction '
          f'= {replayed:g} must be a whole number of trajectories.')
    _check_int(self, 'replay_capacity', 1, None)
    _check_int(self, 'min_replay_size', 1, None)
    if self.min_replay_size > self.replay_capacity:
      raise ConfigError(
          f'IMPALAConfig.min_replay_size={self.min_replay_size!r} must be <= '
          f'replay_capacity={self.replay_capacity!r}.')
    _check_float(self, 'kl_threshold', 0.0, None, allow_none=True,
                 open_low=True)
    _check_bool(self, 'entropy_on_online_only')
    _check_choice(self, 'replay_core_state', REPLAY_CORE_STATES)
    _check_int(self, 'replay_max_episode_steps', 1, None)
    _check_int(self, 'burn_in_length', 0, None)
    if self.replay_core_state == 'burn_in':
      if not 1 <= self.burn_in_length < self.unroll_length:
        raise ConfigError(
            f'IMPALAConfig.burn_in_length={self.burn_in_length!r} is invalid '
            f"with replay_core_state='burn_in': expected 1 <= burn_in_length "
            f'< unroll_length={self.unroll_length!r}.')
      if self.replay_fraction == 0.0:
        raise ConfigError(
            "IMPALAConfig.replay_core_state='burn_in' applies to replayed "
            'rows, but replay_fraction=0.0 replays none; set replay_fraction '
            "> 0 or replay_core_state='stored'.")
    elif self.burn_in_length:
      raise ConfigError(
          f'IMPALAConfig.burn_in_length={self.burn_in_length!r} needs '
          f"replay_core_state='burn_in' (it is {self.replay_core_state!r}).")
    if self.replay_fraction == 1.0:
      if self.entropy_on_online_only:
        raise ConfigError(
            'IMPALAConfig.entropy_on_online_only=True needs online data, but '
            'replay_fraction=1.0 takes every row from the replay; use '
            'replay_fraction < 1 or entropy_on_online_only=False.')
      if self.anneal_learning_rate and self.lr_anneal_steps is None:
        raise ConfigError(
            'IMPALAConfig.anneal_learning_rate=True with replay_fraction=1.0 '
            'needs lr_anneal_steps: with no online rows, an actor-step budget '
            'does not imply a number of learner steps.')
    _check_choice(self, 'compile_mode', COMPILE_MODES)
    _check_int(self, 'prefetch_size', 0, None)
    _check_int(self, 'learner_intra_op_threads', 0, None, allow_none=True)
    _check_int(self, 'variable_update_period', 1, None)
    _check_bool(self, 'record_policy_version')
    _check_bool(self, 'warm_up_update')
    _check_choice(self, 'adder', ADDERS)
    if self.replays_episodes and self.adder != 'trajectory':
      raise ConfigError(
          f"IMPALAConfig.adder={self.adder!r} cannot write episode items; "
          "replay_core_state='recompute' with replay_fraction > 0 needs "
          "adder='trajectory' (or replay_core_state='stored').")
    _check_int(self, 'max_queue_size', 1, None)
    if self.max_queue_size < self.batch_size:
      raise ConfigError(
          f'IMPALAConfig.max_queue_size={self.max_queue_size!r} must be >= '
          f'batch_size={self.batch_size!r}, or the learner can never fill a '
          'batch.')

  @property
  def replays_episodes(self) -> bool:
    """Whether the replay holds whole episodes (LASER's recompute)."""
    return self.replay_fraction > 0 and self.replay_core_state == 'recompute'

  @property
  def max_episode_trajectories(self) -> int:
    """The most trajectories one replayed episode item spans."""
    return -(-self.replay_max_episode_steps // self.unroll_length)

  @property
  def num_replayed(self) -> int:
    """Trajectories per learner batch sampled from replay: B * f."""
    return int(round(self.batch_size * self.replay_fraction))

  @property
  def num_online(self) -> int:
    """Trajectories per learner batch taken from the queue: B * (1 - f)."""
    return self.batch_size - self.num_replayed

  def learner_steps_for(self, actor_steps: int) -> int:
    """Learner steps that consume `actor_steps` environment steps.

    Each learner step takes `num_online` new trajectories of `unroll_length`
    transitions from the queue; replayed rows are not new data. This is the
    horizon of learning-rate annealing for an actor-step budget (Table G.1:
    "anneal linearly to 0 from beginning to end of training").
    """
    if self.num_online == 0:
      raise ConfigError(
          f'IMPALAConfig.replay_fraction={self.replay_fraction!r} takes no '
          'online rows, so an actor-step budget implies no number of learner '
          'steps; set lr_anneal_steps.')
    per_step = self.num_online * self.unroll_length
    return max(1, -(-int(actor_steps) // per_step))

  def with_annealing_horizon(self, actor_steps: int) -> 'IMPALAConfig':
    """This config with `lr_anneal_steps` set from an actor-step budget
    (or `lr_anneal_min_actor_steps`, if larger) when `anneal_learning_rate`
    asks for it and none is given."""
    if not self.anneal_learning_rate or self.lr_anneal_steps is not None:
      return self
    horizon = max(int(actor_steps), self.lr_anneal_min_actor_steps or 0)
    return self.replace(lr_anneal_steps=self.learner_steps_for(horizon))

  @property
  def sequence_length(self) -> int:
    """Steps per Reverb item: n transitions plus the bootstrap observation."""
    return self.unroll_length + 1

  def replace(self, **overrides: Any) -> 'IMPALAConfig':
    """Returns a validated copy with `overrides` applied.

    Unknown field names raise ConfigError listing the known ones.
    """
    known = {f.name for f in dataclasses.fields(self)}
    unknown = sorted(set(overrides) - known)
    if unknown:
      raise ConfigError(
          f'Unknown IMPALAConfig field(s) {unknown}; known fields: '
          f'{sorted(known)}.')
    return dataclasses.replace(self, **overrides)


def _fail(config, name: str, expected: str) -> None:
  value = getattr(config, name)
  raise ConfigError(
      f'IMPALAConfig.{name}={value!r} is invalid: expected {expected}.')


def _range_text(low, high, open_low=False) -> str:
  lo = '(' if open_low else '['
  hi = 'inf)' if high is None else f'{high}]'
  return f'{lo}{low}, {hi}'


def _check_int(config, name, low, high, allow_none=False):
  value = getattr(config, name)
  if value is None and allow_none:
    return
  expected = 'an integer in ' + _range_text(low, high) + (
      ' or None' if allow_none else '')
  if isinstance(value, bool) or not isinstance(value, int):
    _fail(config, name, expected)
  if value < low or (high is not None and value > high):
    _fail(config, name, expected)


def _check_float(config, name, low, high, allow_none=False, open_low=False):
  value = getattr(config, name)
  if value is None and allow_none:
    return
  expected = 'a number in ' + _range_text(low, high, open_low) + (
      ' or None' if allow_none else '')
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    _fail(config, name, expected)
  if not math.isfinite(value):
    _fail(config, name, expected)
  if value < low or (open_low and value == low):
    _fail(config, name, expected)
  if high is not None and value > high:
    _fail(config, name, expected)


def _check_bool(config, name):
  if not isinstance(getattr(config, name), bool):
    _fail(config, name, 'True or False')


def _check_str(config, name):
  value = getattr(config, name)
  if not isinstance(value, str) or not value:
    _fail(config, name, 'a non-empty string')


def _check_choice(config, name, choices: Sequence[str]):
  if getattr(config, name) not in choices:
    _fail(config, name, f'one of {list(choices)}')


def _check_int_tuple(config, name):
  value = getattr(config, name)
  ok = (isinstance(value, (tuple, list)) and len(value) > 0 and
        all(isinstance(v, int) and not isinstance(v, bool) and v > 0
            for v in value))
  if not ok:
    _fail(config, name, 'a non-empty tuple of positive integers')


# A LASER sweep's configs (distributed/sweep.py runs them): plain data, so
# that a launcher checks them before Launchpad and TensorFlow load.
def sweep_configs(base: IMPALAConfig,
                  learning_rates: Sequence[float],
                  entropy_costs: Sequence[float]
                  ) -> List[IMPALAConfig]:
  """The grid learning_rate x entropy_cost around `base` (LASER's sweep)."""
  return [dataclasses.replace(base, learning_rate=lr, entropy_cost=ec)
          for lr in learning_rates for ec in entropy_costs]


def validate_sweep(configs: Sequence[IMPALAConfig],
                   share_replay: bool = True) -> None:
  """A sweep sharing one replay needs replay in every agent (see also
  prepare_run); agents that do not share may go without (IMPALA agents,
  e.g. a PBT population as IMPALA's Appendix F runs it)."""
  if len(configs) < 1:
    raise ValueError('A sweep needs at least one agent config.')
  for i, config in enumerate(configs):
    if share_replay and config.replay_fraction == 0:
      raise ValueError(
          f'agent_{i}: replay_fraction=0 uses no replay; a sweep sharing '
          'one replay needs replay_fraction in (0, 1] (--noshare_replay '
          'runs agents without replay).')


def validate_num_learners(config: IMPALAConfig, num_learners: int,
                          num_agents: int = 1) -> None:
  """K synchronous learner replicas (agent/replicas.py) each learn from an
  equal share of every batch: B / K rows, B(1-f) / K online and Bf / K
  replayed. ValueError naming the bad value otherwise."""
  if (isinstance(num_learners, bool) or not isinstance(num_learners, int)
      or num_learners < 1):
    raise ValueError(f'num_learners={num_learners!r} is invalid: expected '
                     'an integer >= 1.')
  if num_learners == 1:
    return
  if num_agents > 1:
    raise ValueError(
        f'num_learners={num_learners} with a sweep of {num_agents} agents: '
        'synchronous learner replicas run for a single agent (each agent '
        'of a sweep has one learner).')
  replayed = config.num_replayed
  if config.batch_size % num_learners or replayed % num_learners:
    raise ValueError(
        f'num_learners={num_learners} does not split a learner batch of '
        f'batch_size={config.batch_size} rows ({config.num_online} online, '
        f'{replayed} replayed) into equal shares; expected a divisor of '
        'both counts.')
  if config.compile_mode == 'full':
    raise ValueError(
        f"num_learners={num_learners} with compile_mode='full': XLA on CPU "
        'has no collective ops; use the default '
        "compile_mode='vtrace_and_optimizer'.")
