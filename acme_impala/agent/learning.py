"""IMPALA learner: V-trace actor-critic updates with RMSProp.

The learner reads batches of trajectories from a Reverb dataset in Python
(the read stays outside compiled code, so a slow or empty queue never stalls
inside XLA and the wait is measurable), then runs one update in a
`tf.function`. Where XLA applies is `compile_mode` (see config.py): by default
nowhere, the fastest on these CPUs; 'vtrace_and_optimizer' makes the V-trace
maths and the RMSProp update jit-compiled sub-functions of the graph-mode
step, the paper's recipe (docs/benchmarks.md#learner).

Data layout (Acme's SequenceAdder): an item is T+1 steps; step t holds
observation x_t, the action a_t taken there, the reward r_t and discount d_t
that followed, `start_of_episode`, and the extras written by the actor.
The last step only provides the bootstrap observation. When an episode ends
inside a sequence, Acme's adder writes a dummy step (the final observation
with a zero action) just before the first step of the next episode; that step
is masked out of the loss and cuts the V-trace traces (`valid_transitions`,
which also masks the zero padding of Acme's default `EndBehavior.ZERO_PAD`),
and the LSTM is reset at `start_of_episode` steps, as the actor did.

Which rows of a batch are online (from the queue) and which replayed is said
by the batch itself (`types.Batch.online`); plain Acme samples are all
online.
"""

import functools
import hashlib
import secrets
import time
from typing import Dict, List, Mapping, Optional

import acme
from acme.tf import savers as tf2_savers
from acme.tf import utils as tf2_utils
from acme.utils import counting
from acme.utils import loggers
import numpy as np
import reverb
import sonnet as snt
import tensorflow as tf
import tree

from acme_impala.agent import compat
from acme_impala.agent import config as config_lib
from acme_impala.agent import losses
from acme_impala.agent import networks
from acme_impala.agent import replicas
from acme_impala.agent import tf_calls
from acme_impala.agent import trust_region
from acme_impala.agent import types
from acme_impala.agent import vtrace


# Hyperparameters a running learner can change (`set_hyperparameters`):
# those IMPALA Appendix F's population-based training adapts.
MUTABLE_HYPERPARAMETERS = ('learning_rate', 'entropy_cost', 'rmsprop_epsilon')


def intra_op_threads(config: config_lib.IMPALAConfig) -> int:
  """Threads one op of the learner's update may use (0: TensorFlow's
  intra-op pool): `config.learner_intra_op_threads`, or where it is None,
  1 for the MLP torso and 0 for the convolutional ones.

  The update of a small network is a chain of ops on [B, 4H] tensors (the
  LSTM, step after step); split across threads each costs more in hand-off
  than it saves, while the convolutions of an Atari torso need every core.
  """
  if config.learner_intra_op_threads is not None:
    return config.learner_intra_op_threads
  return 1 if config.network == 'mlp_lstm' else 0


def _learning_rate(base, step: tf.Tensor,
                   anneal_steps: Optional[int]) -> tf.Tensor:
  """Linear annealing from `base` (a float or a scalar variable) to 0 over
  `anneal_steps` (Table G.1)."""
  base = tf.convert_to_tensor(base, tf.float32)
  if anneal_steps is None:
    return base
  frac = tf.cast(step, tf.float32) / float(anneal_steps)
  return base * tf.maximum(0., 1. - frac)


def valid_transitions(start_of_episode: tf.Tensor, discounts: tf.Tensor,
                      behaviour_logits: tf.Tensor) -> tf.Tensor:
  """Which transitions of a batch of items are real: a [T, B] 0/1 mask.

  Items are Acme `SequenceAdder` windows of T+1 steps; transition t goes from
  step t to step t+1. Adders write steps the actor never acted in, whose
  extras (behaviour logits included) are zeros:
    - the episode's final observation, one "dummy" step after its last
      transition (with `EndBehavior.CONTINUE` the next episode's first step
      follows it);
    - with `EndBehavior.ZERO_PAD` (Acme's default, used by Acme's own IMPALA
      actor), zero steps after that dummy up to the end of the item.
  A transition is real unless (a) the next step starts an episode (t is the
  dummy before it), (b) step t was written by the adder (all behaviour logits
  exactly 0: no categorical policy network outputs that for a real state),
  or (c) an earlier step of the same episode segment ended the episode
  (discount 0) or was written by the adder: everything after a terminal
  inside an item is padding. (b) is what catches the dummy after a
  truncation (discount 1) when no episode start follows it.

  Args:
    start_of_episode: [T+1, B] bool.
    discounts: [T, B] the environment's discounts (before gamma).
    behaviour_logits: [T, B, A].

  Returns:
    [T, B] float32, 1 for transitions to learn from.
  """
  start = tf.cast(start_of_episode, tf.bool)
  filler = tf.reduce_all(tf.equal(behaviour_logits, 0.), axis=-1)  # [T, B]
  ends = tf.logical_or(tf.equal(discounts, 0.), filler)  # [T, B]
  # after[t]: a step s < t since the last episode start ended the episode.
  after = [tf.zeros_like(filler[0])]
  for t in range(1, filler.shape[0]):
    after.append(tf.logical_and(tf.logical_or(after[-1], ends[t - 1]),
                                tf.logical_not(start[t])))
  after = tf.stack(after)
  invalid = tf.logical_or(tf.logical_or(start[1:], filler), after)
  return 1. - tf.cast(invalid, tf.float32)


def data_metrics(mask, online, trust_mask, extras, learner_step,
                 agent_id: int) -> Dict[str, tf.Tensor]:
  """What the learner logs about its batch (NaN where a metric is undefined).

  Args:
    mask: [T, B] real transitions (`valid_transitions`).
    online: [B] float, 1 for rows from the queue.
    trust_mask: [T, B] LASER's trust-region mask, or None.
    extras: the items' extras, [T+1, B, ...]; `policy_version` (and
      `agent_id`) when the actors recorded them.
    learner_step: the learner step the batch is learned at.
    agent_id: this learner's agent; replay rows of other agents of a sweep
      (a shared replay) have no policy lag with respect to this learner.

  Returns:
    rejected_fraction_{online,replay}: trust-region rejections per real
      transition; policy_lag_{mean,max}: learner steps between the acting
      weights and these, over online rows; replay_staleness_mean: the same
      over this agent's replayed rows.
  """
  nan = tf.constant(float('nan'))

  def masked_mean(x, weights):
    total = tf.reduce_sum(weights)
    return tf.where(total > 0, tf.reduce_sum(x * weights) /
                    tf.maximum(total, 1.), nan)

  replayed = 1. - online
  rejected = (1. - trust_mask) if trust_mask is not None else tf.zeros_like(
      mask)
  metrics = {
      'rejected_fraction_online': masked_mean(rejected, mask * online),
      'rejected_fraction_replay': masked_mean(rejected, mask * replayed),
      'policy_lag_mean': nan,
      'policy_lag_max': nan,
      'replay_staleness_mean': nan,
  }
  if types.POLICY_VERSION not in extras:
    return metrics
  # Adder-written steps carry version 0: take the oldest real step's version.
  version = tf.cast(extras[types.POLICY_VERSION][:-1], tf.float32)
  version = tf.where(mask > 0, version, tf.float32.max)
  lag = tf.cast(learner_step, tf.float32) - tf.reduce_min(version, axis=0)
  real = tf.cast(tf.reduce_any(mask > 0, axis=0), tf.float32)  # [B]
  lag = tf.where(real > 0, lag, 0.)
  own = real
  if types.AGENT_ID in extras:
    # Adder-written steps carry agent id 0: read the id of the real steps.
    writer = tf.reduce_max(tf.where(
        mask > 0, tf.cast(extras[types.AGENT_ID][:-1], tf.int32), -1), axis=0)
    own = real * tf.cast(tf.equal(writer, agent_id), tf.float32)
  metrics['policy_lag_mean'] = masked_mean(lag, own * online)
  metrics['policy_lag_max'] = tf.where(
      tf.reduce_sum(own * online) > 0, tf.reduce_max(lag * own * online), nan)
  metrics['replay_staleness_mean'] = masked_mean(lag, own * replayed)
  return metrics


def replay_burn_in_mask(online: tf.Tensor, num_transitions: int,
                        burn_in: int) -> tf.Tensor:
  """[T, B] 1 where a transition is in a replayed row's burn-in.

  Args:
    online: [B] bool or 0/1, which rows came from the queue.
    num_transitions: T.
    burn_in: the first `burn_in` transitions of every replayed row.
  """
  replayed = 1. - tf.cast(online, tf.float32)  # [B]
  early = tf.cast(tf.range(num_transitions) < burn_in, tf.float32)  # [T]
  return early[:, None] * replayed[None, :]


def walk_start_mask(start_of_episode: tf.Tensor,
                    walk_start: tf.Tensor) -> tf.Tensor:
  """[T, B] 0 for transitions before the first episode start of rows that
  begin an episode walk (replay_core_state='recompute'), 1 elsewhere.

  A walk's first trajectory is the window holding its episode's first
  transition; the steps before that start belong to the episode before,
  whose state the walk does not have. From the start on the LSTM runs from
  its initial state, as the actor's did.

  Args:
    start_of_episode: [T+1, B] bool.
    walk_start: [B] bool.
  """
  started = tf.cumsum(tf.cast(start_of_episode[:-1], tf.int32), axis=0) > 0
  keep = tf.logical_or(started, tf.logical_not(walk_start)[None, :])
  return tf.cast(keep, tf.float32)


def _rows_where(condition: tf.Tensor, x: tf.Tensor, y: tf.Tensor):
  """tf.where over the leading (batch) axis of [B, ...] tensors."""
  condition = tf.reshape(condition, [-1] + [1] * (len(x.shape) - 1))
  return tf.where(condition, x, y)


class IMPALALearner(acme.Learner, tf2_savers.TFSaveable):
  """Learner for the importance-weighted actor-critic (IMPALA)."""

  def __init__(
      self,
      network: snt.RNNCore,
      iterator,
      config: config_lib.IMPALAConfig,
      counter: Optional[counting.Counter] = None,
      logger: Optional[loggers.Logger] = None,
      agent_id: int = 0,
      replica_group: Optional[replicas.Group] = None,
  ):
    """Creates the learner.

    Args:
      network: RNNCore with `unroll(inputs, state, start_of_episode)` (see
        networks.IMPALANetwork), its variables already created. If it also
        has `embed_sequence` and `unroll_embedded` (IMPALANetwork does),
        its torso runs on the batch-major observations.
      iterator: yields `types.Batch`es (the builder's iterator: which rows
        are online is said by the batch), or `reverb.ReplaySample`s / bare
        Trajectories of [B, T+1, ...] items, all taken as online, e.g.
        iter(acme.datasets.make_reverb_dataset(...)).
      config: the agent's IMPALAConfig.
      counter: Acme counter; the learner increments `steps`.
      logger: Acme logger for the metrics.
      agent_id: this learner's agent within a sweep; replay staleness is
        measured on the rows its own actors wrote (extras['agent_id']).
      replica_group: this learner as one of K synchronous replicas (see
        replicas.py): `config` is then the replica's share (batch_size
        B / K), every step's gradient is the whole batch's, summed over
        the group, and `sync_replicas` gives each replica replica 0's
        training state. None: one learner.
    """
    self._network = network
    # IMPALANetwork splits its torso from its recurrence: the learner then
    # embeds the batch-major observations (see `_unroll_inputs`).
    self._embeds_batch_major = hasattr(network, 'unroll_embedded')
    self._iterator = iterator
    self._config = config
    self._agent_id = agent_id
    self._replicas = replica_group
    if replica_group is not None and config.compile_mode == 'full':
      raise ValueError(
          "compile_mode='full' cannot run a replica of synchronous learners: "
          'XLA on CPU has no collective ops; use '
          "compile_mode='vtrace_and_optimizer' or 'none'.")
    self._counter = counter or counting.Counter(prefix='learner')
    self._logger = logger or loggers.TerminalLogger('learner', time_delta=1.)

    self._num_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                  name='num_steps')
    self._lr = tf.Variable(config.learning_rate, dtype=tf.float32,
                           trainable=False, name='learning_rate')
    # Variables, not constants of the traced step: population-based
    # training changes them between steps (`set_hyperparameters`).
    self._hyperparameters = {
        name: tf.Variable(getattr(config, name), dtype=tf.float32,
                          trainable=False, name=name)
        for name in MUTABLE_HYPERPARAMETERS}
    self._optimizer = snt.optimizers.RMSProp(
        learning_rate=self._lr,
        decay=config.rmsprop_decay,
        momentum=config.rmsprop_momentum,
        epsilon=self._hyperparameters['rmsprop_epsilon'])
    self._variables = network.trainable_variables
    compat.create_rmsprop_slots(self._optimizer, self._variables,
                                config.rmsprop_initial_mean_square)
    self._max_grad_norm = (config.max_gradient_norm
                           if config.max_gradient_norm is not None else 1e10)

    loss_fn = functools.partial(
        losses.impala_loss,
        baseline_cost=config.baseline_cost,
        entropy_cost=self._hyperparameters['entropy_cost'],
        clip_rho_threshold=config.clip_rho_threshold,
        clip_c_threshold=config.clip_c_threshold,
        clip_pg_rho_threshold=config.clip_pg_rho_threshold,
        lambda_=config.lambda_,
        reduction=config.loss_reduction,
        off_policy_correction=config.off_policy_correction)
    apply_fn = self._apply_gradients
    mode = config.compile_mode
    if mode == 'vtrace_and_optimizer':
      # V-trace gets no gradient (its targets are constants of the loss), so
      # its compiled function is called, never differentiated through; the
      # optimiser update runs outside the tape.
      loss_fn = functools.partial(loss_fn, vtrace_fn=tf.function(
          vtrace.vtrace_from_importance_weights, jit_compile=True,
          autograph=False))
      apply_fn = tf.function(apply_fn, jit_compile=True, autograph=False)
    self._loss_fn = loss_fn
    self._apply_fn = apply_fn
    # AutoGraph off: the step has no Python control flow on tensors, and
    # converting it (Sonnet's and Acme's code with it) took ~6 of the ~7 s of
    # the first step, the longest wait of a program's start-up.
    self._metric_names = None  # Set when the update is traced.
    self._step_fn = tf.function(self._packed_step,
                                jit_compile=(mode == 'full'),
                                autograph=False)
    # Run through tf.data, not called eagerly: TF 2.8 leaks native memory on
    # every eager call of a function that is not XLA-compiled (at one call
    # per update, a learner growing ~1.5 MB/min on CartPole; see tf_calls).
    self._update = tf_calls.DataPipelineFunction(
        self._step_fn, max_intra_op_parallelism=intra_op_threads(config))

    # LASER's recomputed states: the LSTM state each replayed row carries
    # into its next trajectory, as this network computed it on the row's
    # previous one. Not checkpointed: a restarted learner's rows start new
    # walks.
    self._walk_states = None
    if config.replays_episodes:
      self._walk_states = tree.map_structure(
          lambda s: tf.Variable(tf.zeros_like(s), trainable=False),
          network.initial_state(config.num_replayed))

    self._compile_time = None
    self._stepped = False
    # While `warm_up` runs: what get_variables serves.
    self._before_warm_up = None
    self._new_weights_epoch()
    self._last_time = None
    self._wait_time = 0.
    self._busy_time = 0.

  # -- The update (TensorFlow). --------------------------------------------

  def _apply_gradients(self, gradients: List[tf.Tensor]) -> tf.Tensor:
    """Clips and applies `gradients`; returns the global norm before
    clipping, once every variable holds its new value."""
    gradients, grad_norm = tf.clip_by_global_norm(gradients,
                                                  self._max_grad_norm)
    applied = compat.rmsprop_apply(self._optimizer, gradients,
                                   self._variables)
    with tf.control_dependencies(applied):
      grad_norm = tf.identity(grad_norm)
    return grad_norm

  def _step(self, data, online, walk_start) -> Dict[str, tf.Tensor]:
    """One update on a batch-major Trajectory [B, T+1, ...], online [B],
    walk_start [B] (see types.Batch)."""
    cfg = self._config
    # Neither the frames nor the LSTM states are made time-major: the torso
    # embeds the frames batch-major (`_unroll_inputs`), and of the states
    # only the first step's [B, H] is used (the others were copied for
    # nothing: [B, T+1, 256] twice on Atari).
    observation = data.observation  # [B, T+1, ...]
    extras = dict(data.extras)
    core_state = tree.map_structure(lambda s: s[:, 0],
                                    extras.pop(types.CORE_STATE))
    data = tf2_utils.batch_to_sequence(
        data._replace(observation=(), extras=extras))  # [T+1, B, ...]
    extras = data.extras
    start = tf.cast(data.start_of_episode, tf.bool)
    actions = tf.cast(data.action[:-1], tf.int32)
    behaviour_logits = tf.cast(extras[types.LOGITS][:-1], tf.float32)
    raw_discounts = tf.cast(data.discount[:-1], tf.float32)
    mask = valid_transitions(start, raw_discounts, behaviour_logits)  # [T, B]
    rewards = losses.clip_rewards(
        tf.cast(data.reward[:-1], tf.float32), cfg.reward_clipping)
    discounts = cfg.discount * raw_discounts

    lr = _learning_rate(self._hyperparameters['learning_rate'],
                        self._num_steps, cfg.lr_anneal_steps)
    self._lr.assign(lr)

    online = tf.cast(online, tf.float32)  # [B]
    entropy_mask = online if cfg.entropy_on_online_only else None

    burn_in = (cfg.burn_in_length if cfg.replay_core_state == 'burn_in'
               else 0)
    if burn_in:
      # Replayed rows learn only after their burn-in (online rows from
      # their first step, as always).
      mask = mask * (1. - replay_burn_in_mask(online, mask.shape[0], burn_in))
    walking = self._walk_states is not None
    if walking:
      core_state = self._walk_start_states(core_state, online, walk_start)
      mask = mask * walk_start_mask(start, walk_start)

    with tf.GradientTape() as tape:
      inputs = self._unroll_inputs(observation)  # [T+1, B, ...]
      if burn_in:
        (logits, values) = self._unroll_with_burn_in(
            inputs, core_state, start, online, burn_in)
      elif walking:
        (logits, values), state_t = self._unroll_keeping_state(
            inputs, core_state, start)
      else:
        (logits, values), _ = self._unroll(inputs, core_state, start)
      trust_mask = None
      if cfg.kl_threshold is not None:
        # LASER's trust region: drop transitions whose behaviour is too far
        # from pi (KL to the V-trace implied policy >= b) from every term.
        trust_mask = trust_region.relevance_mask(
            logits[:-1], behaviour_logits, cfg.kl_threshold,
            cfg.clip_rho_threshold)
      loss, metrics = self._loss_fn(
          logits[:-1], behaviour_logits, actions, rewards, discounts,
          values[:-1], values[-1], mask=mask, relevance_mask=trust_mask,
          entropy_mask=entropy_mask)
    gradients = tape.gradient(loss, self._variables)
    if self._replicas is not None:
      gradients = replicas.combine_gradients(
          gradients, metrics['num_valid_steps'], cfg.loss_reduction,
          self._replicas.gradient_sum)
    grad_norm = self._apply_fn(gradients)
    # Ordered after the new weights are in place (graph functions order
    # stateful ops per variable only): the step count, which the weights'
    # version served to actors carries, is never ahead of the weights.
    with tf.control_dependencies([grad_norm]):
      self._num_steps.assign_add(1)
    if walking:
      # The state entering step T of this window is the state entering
      # step 0 of the row's next window (windows overlap by one step).
      num_online = cfg.num_online
      for variable, state in zip(tree.flatten(self._walk_states),
                                 tree.flatten(state_t)):
        variable.assign(tf.stop_gradient(state[num_online:]))

    metrics = dict(metrics)
    # Read here, in the graph: an eager read after the call is one more
    # op dispatched per step (see `step`).
    metrics['learner_steps'] = self._num_steps.read_value()
    metrics['grad_norm'] = grad_norm
    metrics['learning_rate'] = lr
    metrics.update(data_metrics(
        mask, online, trust_mask, extras, self._num_steps - 1,
        self._agent_id))
    # 'recompute': the share of replayed rows that began a new episode this
    # step (1 / the mean walk length in trajectories); NaN otherwise.
    replayed = 1. - online
    metrics['walk_start_fraction'] = (
        tf.reduce_sum(tf.cast(walk_start, tf.float32) * replayed) /
        tf.maximum(tf.reduce_sum(replayed), 1.) if walking
        else tf.constant(float('nan')))
    return metrics

  def _packed_step(self, data, online, walk_start) -> tf.Tensor:
    """`_step`, its metrics returned as one float64 vector [M] in the order
    of `self._metric_names`: one tensor handed back to Python per update
    instead of M (each conversion ~5 us, about 2 % of CartPole's update)."""
    metrics = self._step(data, online, walk_start)
    self._metric_names = sorted(metrics)
    return tf.stack([tf.cast(metrics[name], tf.float64)
                     for name in self._metric_names])

  def _walk_start_states(self, stored, online, walk_start):
    """Each row's initial LSTM state under 'recompute': online rows the
    actor's stored state; replayed rows starting a walk the initial state
    (the episode's start step resets it anyway); the others the state this
    network carried out of the row's previous window."""
    num_online, num_replayed = self._config.num_online, self._config.num_replayed
    rows = tree.flatten(stored)[0].shape[0]
    if rows is not None and rows != num_online + num_replayed:
      raise ValueError(
          f'A batch of {rows} rows reached a learner that walks '
          f'episodes in its last {num_replayed} of {num_online + num_replayed}'
          ' rows (config.batch_size).')
    initial = self._network.initial_state(num_replayed)
    online_tail = tf.cast(online, tf.bool)[num_online:]
    fresh = tf.cast(walk_start, tf.bool)[num_online:]

    def row_states(stored_s, initial_s, carried_v):
      replayed = _rows_where(fresh, initial_s, carried_v.read_value())
      # Rows an iterator calls online keep their stored state.
      tail = _rows_where(online_tail, stored_s[num_online:], replayed)
      return tf.concat([stored_s[:num_online], tail], axis=0)

    return tree.map_structure(row_states, stored, initial, self._walk_states)

  def _unroll_inputs(self, observation):
    """What `_unroll` takes, time-major [T+1, B, ...], from the batch's
    observations [B, T+1, ...]: a network that splits its torso from its
    recurrence (IMPALANetwork) embeds them batch-major, without
    transposing the frames; any other network gets them transposed."""
    if self._embeds_batch_major:
      return self._network.embed_sequence(observation, batch_major=True)
    return tf2_utils.batch_to_sequence(observation)

  def _unroll(self, inputs, core_state, start):
    """The network over `_unroll_inputs`'s [T, B, ...] (or a time slice)."""
    if self._embeds_batch_major:
      return self._network.unroll_embedded(inputs, core_state, start)
    return self._network.unroll(inputs, core_state, start)

  def _unroll_keeping_state(self, inputs, core_state, start):
    """The network over [T+1, B] steps, and its state entering step T."""
    steps = start.shape[0] - 1
    head = tree.map_structure(lambda x: x[:steps], inputs)
    last = tree.map_structure(lambda x: x[steps:], inputs)
    (logits_a, values_a), state_t = self._unroll(
        head, core_state, start[:steps])
    (logits_b, values_b), _ = self._unroll(last, state_t, start[steps:])
    return ((tf.concat([logits_a, logits_b], 0),
             tf.concat([values_a, values_b], 0)), state_t)

  def _unroll_with_burn_in(self, inputs, core_state, start, online,
                           burn_in: int):
    """The network over [T+1, B] steps, the state after the first
    `burn_in` steps cut from the gradient on replayed rows (R2D2)."""
    prefix = tree.map_structure(lambda x: x[:burn_in], inputs)
    rest = tree.map_structure(lambda x: x[burn_in:], inputs)
    (logits_a, values_a), state = self._unroll(
        prefix, core_state, start[:burn_in])
    replayed = tf.expand_dims(tf.logical_not(tf.cast(online, tf.bool)), -1)
    state = tree.map_structure(
        lambda s: tf.where(replayed, tf.stop_gradient(s), s), state)
    (logits_b, values_b), _ = self._unroll(rest, state, start[burn_in:])
    return (tf.concat([logits_a, logits_b], 0),
            tf.concat([values_a, values_b], 0))

  # -- acme.Learner. --------------------------------------------------------

  def _update_arguments(self, sample):
    """(data, online [B], walk_start [B]) of the update, from a
    `types.Batch`, a `reverb.ReplaySample` or a bare Trajectory nest (all
    rows online)."""
    walk_start = None
    if isinstance(sample, types.Batch):
      data, online, walk_start = sample.data, sample.online, sample.walk_start
    else:
      data = sample.data if isinstance(sample, reverb.ReplaySample) else sample
      online = self._row_flags(data, True)
    if walk_start is None:
      if self._walk_states is not None and not np.all(online):
        raise ValueError(
            "replay_core_state='recompute' needs batches that say where "
            'each replayed row starts an episode walk (types.Batch.'
            'walk_start, given by IMPALABuilder.make_dataset_iterator); got '
            'replayed rows without it.')
      walk_start = self._row_flags(data, False)
    return data, online, walk_start

  def _row_flags(self, data, value: bool) -> np.ndarray:
    """[B] bools all `value`, B the rows of `data`.

    NumPy, not TensorFlow: an eager op dispatched right after an update
    took 0.1-0.3 ms on CartPole's learner under load (3x the same op
    alone), a few percent of its step."""
    return np.full([int(tree.flatten(data)[0].shape[0])], value, bool)

  def _state_variables(self) -> List[tf.Variable]:
    """Every variable an update may change: the network's, the
    optimiser's (slots, learning rate, epsilon), the step count, the
    hyperparameters and LASER's walk states; each once."""
    candidates = (list(self._network.variables) +
                  list(self._optimizer.variables) +
                  [self._num_steps, self._lr] +
                  list(self._hyperparameters.values()) +
                  tree.flatten(self._walk_states or []))
    unique = {v.ref(): v for v in candidates}
    return list(unique.values())

  def warm_up(self, sample) -> float:
    """Traces and compiles the update on `sample` (a batch shaped as the
    iterator's, e.g. `IMPALABuilder.warm_up_batch()`), then puts back every
    variable the update changed: the first real batch then meets a ready
    update. Meanwhile `get_variables` and `num_steps` serve the values from
    before. Returns seconds taken.

    Not for a replica of a group: its update is a collective that every
    replica must enter with the same batch.
    """
    if self._replicas is not None:
      raise ValueError('warm_up: a replica of a learner group cannot update '
                       'alone (its update is a collective).')
    start = time.time()
    self._before_warm_up = {
        types.WEIGHTS_VERSION: self._weights_version(),
        types.POLICY_VARIABLES: tf2_utils.to_numpy(self._network.variables),
        types.LEARNER_STEPS: [self._num_steps.numpy()]}
    variables = self._state_variables()
    saved = [v.numpy() for v in variables]
    try:
      self._update(*self._update_arguments(sample)).numpy()
    finally:
      for variable, value in zip(variables, saved):
        variable.assign(value)
      self._before_warm_up = None
    seconds = time.time() - start
    if self._compile_time is None:
      # The compilation it reports is this one: the first real step is an
      # ordinary step.
      self._compile_time = seconds
    return seconds

  def step(self):
    start = time.time()
    sample = next(self._iterator)
    got_data = time.time()
    data, online, walk_start = self._update_arguments(sample)
    try:
      values = self._update(data, online, walk_start).numpy()
    except replicas.collective_errors() as error:
      if self._replicas is None:
        raise
      # The update is where the group's collective runs; its data was
      # read above, so this is the group, not the data.
      raise replicas.GroupBroken(
          f'replica {self._replicas.index} of {self._replicas.size}: '
          f'{type(error).__name__}: {error}') from error
    metrics = dict(zip(self._metric_names, values.tolist()))
    end = time.time()

    if not self._stepped:
      # The first call traces and compiles (unless `warm_up` did); report
      # it apart from throughput.
      self._stepped = True
      if self._compile_time is None:
        self._compile_time = end - got_data
    else:
      self._wait_time += got_data - start
      self._busy_time += end - got_data
    elapsed = end - self._last_time if self._last_time else 0.
    self._last_time = end

    # Where this step's rows came from: all online while LASER's replay
    # warms up (datasets.MixedBatches), then B(1-f) and Bf; the counter keeps
    # the totals (with the prefix 'learner_' of the learner's counter).
    rows = np.asarray(online, bool)
    num_online = int(rows.sum())
    num_replayed = int(rows.size) - num_online
    # A group of replicas takes one step: replica 0 counts it; every
    # replica counts its rows.
    first = self._replicas is None or self._replicas.index == 0
    counts = self._counter.increment(
        steps=int(first), walltime=elapsed if first else 0.,
        online_rows=num_online, replayed_rows=num_replayed)
    graph_steps = metrics.pop('learner_steps')
    total = self._wait_time + self._busy_time
    # Only the counts this learner's rows are about: a fixed set of columns.
    metrics['actor_steps'] = counts.get('actor_steps', 0)
    # The learner's own (checkpointed) step is authoritative: the shared
    # counter is only eventually consistent across restarts.
    metrics['learner_steps'] = int(graph_steps)
    metrics['compile_time_s'] = self._compile_time
    metrics['timestamp'] = end
    metrics['steps_per_second'] = 1. / elapsed if elapsed > 0 else 0.
    # The group's batch: each of K replicas learns from B / K rows.
    metrics['samples_per_second'] = metrics['steps_per_second'] * (
        self._config.batch_size * (self._replicas.size if self._replicas
                                   else 1))
    metrics['queue_wait_fraction'] = self._wait_time / total if total else 0.
    metrics['online_rows'] = num_online
    metrics['replayed_rows'] = num_replayed
    for key in ('online_rows', 'replayed_rows'):
      metrics[key + '_total'] = next(
          (v for k, v in counts.items() if k.endswith(key)), 0)
    self._logger.write(metrics)

  def _new_weights_epoch(self) -> None:
    """With the step count, the epoch is the version of the served weights:
    drawn anew by this process and whenever weights change outside a step,
    so that a (epoch, step) pair an actor has seen never names other
    weights."""
    self._weights_epoch = secrets.randbits(62)

  def _weights_version(self) -> List[np.ndarray]:
    return [np.array([self._weights_epoch, self._num_steps.numpy()],
                     np.int64)]

  def get_variables(self, names: List[str]) -> List[List[np.ndarray]]:
    """Serves the groups named in `names` ('policy', 'learner_steps',
    'weights_version'), read in that order of `names`: a version read before
    the weights is never newer than they are."""
    groups = {
        types.WEIGHTS_VERSION: self._weights_version,
        types.POLICY_VARIABLES: lambda: tf2_utils.to_numpy(
            self._network.variables),
        types.LEARNER_STEPS: lambda: [self._num_steps.numpy()],
    }
    unknown = [n for n in names if n not in groups]
    if unknown:
      raise ValueError(f'Unknown variable group(s) {unknown}; this learner '
                       f'serves {sorted(groups)}.')
    before = self._before_warm_up
    if before is not None:
      return [before[n] for n in names]
    return [groups[n]() for n in names]

  @property
  def hyperparameters(self) -> Dict[str, float]:
    """The current values of MUTABLE_HYPERPARAMETERS (the learning rate
    before annealing)."""
    return {name: float(v.numpy())
            for name, v in self._hyperparameters.items()}

  def set_hyperparameters(self, values: Mapping[str, float]) -> None:
    """Sets some of MUTABLE_HYPERPARAMETERS from the next step on (the
    learning rate's annealing schedule scales the new value); ValueError
    naming any other name or a value that is not positive."""
    unknown = sorted(set(values) - set(self._hyperparameters))
    if unknown:
      raise ValueError(f'set_hyperparameters: {unknown} cannot change; '
                       f'expected some of {list(MUTABLE_HYPERPARAMETERS)}.')
    bad = {k: v for k, v in values.items()
           if not (isinstance(v, (int, float)) and v > 0 and
                   np.isfinite(v))}
    if bad:
      raise ValueError(f'set_hyperparameters: {bad}: expected positive '
                       'finite numbers.')
    for name, value in values.items():
      self._hyperparameters[name].assign(value)

  def _copied_variables(self):
    """What PBT's exploit copies, in a fixed order: the network's variables
    and RMSProp's slots (mean square, momentum; the mean gradient when
    centred). Not the step count (each learner keeps its own budget) nor
    LASER's walk states (they follow this learner's replay rows)."""
    optimizer = self._optimizer
    return (list(self._network.variables),
            list(optimizer.ms) + list(optimizer.mom) + list(optimizer.mg))

  def get_training_state(self) -> Dict[str, object]:
    """What another learner needs to continue as this one (PBT's exploit):
    {'network': [arrays], 'optimizer': [arrays], 'hyperparameters':
    {name: value}, 'digest': fingerprint of both lists}."""
    network, slots = self._copied_variables()
    return {'network': tf2_utils.to_numpy(network),
            'optimizer': tf2_utils.to_numpy(slots),
            'hyperparameters': self.hyperparameters,
            'digest': self.training_state_digest()}

  def set_training_state(self, state: Mapping[str, object]) -> str:
    """Takes another learner's `get_training_state()` (weights, optimiser
    slots, hyperparameters) from the next step on; returns this learner's
    digest read back after the copy, equal to `state['digest']` when the
    copy is exact. ValueError naming what does not fit."""
    network, slots = self._copied_variables()
    for key, variables in (('network', network), ('optimizer', slots)):
      values = state[key]
      if len(values) != len(variables):
        raise ValueError(f'set_training_state: {len(values)} {key} arrays '
                         f'for this learner\'s {len(variables)}.')
      for variable, value in zip(variables, values):
        if tuple(np.shape(value)) != tuple(variable.shape):
          raise ValueError(
              f'set_training_state: {key} array of shape {np.shape(value)} '
              f'for {variable.name} of shape {tuple(variable.shape)}.')
    for variable, value in zip(network + slots,
                               list(state['network']) +
                               list(state['optimizer'])):
      variable.assign(value)
    self._new_weights_epoch()
    self.set_hyperparameters(state['hyperparameters'])
    return self.training_state_digest()

  def training_state_digest(self) -> str:
    """Fingerprint of the weights and optimiser slots PBT copies."""
    network, slots = self._copied_variables()
    return hashlib.sha256(
        (networks.weights_digest(network) +
         networks.weights_digest(slots)).encode()
    ).hexdigest()[:16]

  def sync_replicas(self) -> str:
    """Every replica of the group takes replica 0's weights, RMSProp slots,
    step count and hyperparameters (a restored or freshly made replica 0
    decides where the group starts); returns the training-state digest,
    equal on every replica. Called by every replica at once."""
    if self._replicas is None:
      raise ValueError('sync_replicas: this learner is not a replica '
                       '(replica_group=None).')
    network, slots = self._copied_variables()
    variables = (network + slots + [self._num_steps] +
                 list(self._hyperparameters.values()))
    group = self._replicas

    @tf.function(autograph=False)
    def sync():
      values = replicas.from_first([v.read_value() for v in variables],
                                   tf.constant(group.index == 0),
                                   group.state_sum)
      for variable, value in zip(variables, values):
        variable.assign(value)
    try:
      sync()
    except replicas.collective_errors() as error:
      raise replicas.GroupBroken(
          f'replica {group.index} of {group.size} at start-up: '
          f'{type(error).__name__}: {error}') from error
    self._new_weights_epoch()
    return self.training_state_digest()

  @property
  def walk_states(self):
    """'recompute': the LSTM state each replayed row carries into its next
    trajectory, a nest of [R, ...] arrays (None otherwise)."""
    if self._walk_states is None:
      return None
    return tf2_utils.to_numpy(self._walk_states)

  @property
  def num_steps(self) -> int:
    before = self._before_warm_up
    if before is not None:
      return int(before[types.LEARNER_STEPS][0])
    return int(self._num_steps.numpy())

  @property
  def policy_version(self) -> tf.Variable:
    """The learner's step counter: the version of its current weights (an
    actor sharing this learner's network records it)."""
    return self._num_steps

  @property
  def state(self) -> Mapping[str, tf2_savers.Checkpointable]:
    return {
        'network': self._network,
        'optimizer': self._optimizer,
        'num_steps': self._num_steps,
        # Checkpointed so that a restarted learner keeps values PBT set.
        # A checkpoint written before they existed restores without them
        # (the config's values).
        'hyperparameters': self._hyperparameters,
    }
