"""IMPALA learner: V-trace actor-critic updates with RMSProp.

The learner reads batches of trajectories from a Reverb dataset in Python
(the read stays outside compiled code, so a slow or empty queue never stalls
inside XLA and the wait is measurable), then runs one update in a
`tf.function`. Where XLA applies is `compile_mode` (see config.py); by default
the V-trace/loss maths and the RMSProp update are jit-compiled sub-functions of
a graph-mode step, which measured fastest on CPU (README, learner benchmark).

Data layout (Acme's SequenceAdder): an item is T+1 steps; step t holds
observation x_t, the action a_t taken there, the reward r_t and discount d_t
that followed, `start_of_episode`, and the extras written by the actor.
The last step only provides the bootstrap observation. When an episode ends
inside a sequence, Acme's adder writes a dummy step (the final observation
with a zero action) just before the first step of the next episode; that step
is masked out of the loss and cuts the V-trace traces, and the LSTM is reset
at `start_of_episode` steps, as the actor did.
"""

import functools
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

from acme_impala import acting
from acme_impala import config as config_lib
from acme_impala import losses
from acme_impala import trust_region
from acme_impala import vtrace


def _learning_rate(base: float, step: tf.Tensor,
                   anneal_steps: Optional[int]) -> tf.Tensor:
  """Linear annealing from `base` to 0 over `anneal_steps` (Table G.1)."""
  if anneal_steps is None:
    return tf.constant(base, tf.float32)
  frac = tf.cast(step, tf.float32) / float(anneal_steps)
  return base * tf.maximum(0., 1. - frac)


class IMPALALearner(acme.Learner, tf2_savers.TFSaveable):
  """Learner for the importance-weighted actor-critic (IMPALA)."""

  def __init__(
      self,
      network: snt.RNNCore,
      iterator,
      config: config_lib.IMPALAConfig,
      counter: Optional[counting.Counter] = None,
      logger: Optional[loggers.Logger] = None,
  ):
    """Creates the learner.

    Args:
      network: RNNCore with `unroll(inputs, state, start_of_episode)` (see
        networks.IMPALANetwork), its variables already created.
      iterator: yields `reverb.ReplaySample`s (or bare Trajectories) of
        [B, T+1, ...] sequences, e.g. iter(acme.datasets.make_reverb_dataset).
      config: the agent's IMPALAConfig.
      counter: Acme counter; the learner increments `steps`.
      logger: Acme logger for the metrics.
    """
    self._network = network
    self._iterator = iterator
    self._config = config
    self._counter = counter or counting.Counter(prefix='learner')
    self._logger = logger or loggers.TerminalLogger('learner', time_delta=1.)

    self._num_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                  name='num_steps')
    self._lr = tf.Variable(config.learning_rate, dtype=tf.float32,
                           trainable=False, name='learning_rate')
    self._optimizer = snt.optimizers.RMSProp(
        learning_rate=self._lr,
        decay=config.rmsprop_decay,
        momentum=config.rmsprop_momentum,
        epsilon=config.rmsprop_epsilon)
    self._variables = network.trainable_variables
    # Create the optimiser's slots now rather than in the first traced step,
    # so that a checkpoint restored before that step restores them as well.
    self._optimizer._initialize(self._variables)  # pylint: disable=protected-access
    self._max_grad_norm = (config.max_gradient_norm
                           if config.max_gradient_norm is not None else 1e10)

    loss_fn = functools.partial(
        losses.impala_loss,
        baseline_cost=config.baseline_cost,
        entropy_cost=config.entropy_cost,
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
          vtrace.vtrace_from_importance_weights, jit_compile=True))
      apply_fn = tf.function(apply_fn, jit_compile=True)
    self._loss_fn = loss_fn
    self._apply_fn = apply_fn
    self._step_fn = tf.function(self._step, jit_compile=(mode == 'full'))

    self._compile_time = None
    self._trace_time = 0.
    self._last_time = None
    self._wait_time = 0.
    self._busy_time = 0.

  # -- The update (TensorFlow). --------------------------------------------

  def _apply_gradients(self, gradients: List[tf.Tensor]) -> tf.Tensor:
    gradients, grad_norm = tf.clip_by_global_norm(gradients,
                                                  self._max_grad_norm)
    self._optimizer.apply(gradients, self._variables)
    return grad_norm

  def _step(self, data) -> Dict[str, tf.Tensor]:
    """One update on a batch-major Trajectory [B, T+1, ...]."""
    cfg = self._config
    data = tf2_utils.batch_to_sequence(data)  # [T+1, B, ...]
    extras = data.extras
    core_state = tree.map_structure(lambda s: s[0], extras['core_state'])
    start = tf.cast(data.start_of_episode, tf.bool)
    # A step followed by the start of a new episode is the adder's dummy
    # step (the final observation, no action was taken there).
    mask = 1. - tf.cast(start[1:], tf.float32)  # [T, B]
    actions = tf.cast(data.action[:-1], tf.int32)
    rewards = losses.clip_rewards(
        tf.cast(data.reward[:-1], tf.float32), cfg.reward_clipping)
    discounts = cfg.discount * tf.cast(data.discount[:-1], tf.float32)
    behaviour_logits = tf.cast(extras['logits'][:-1], tf.float32)

    lr = _learning_rate(cfg.learning_rate, self._num_steps,
                        cfg.lr_anneal_steps)
    self._lr.assign(lr)

    # Rows [0, num_online) are online trajectories, the rest replayed
    # (builder.MixedIterator); a plain dataset is all online when f = 0.
    batch_size = tf.shape(actions)[1]
    online = tf.cast(tf.range(batch_size) < cfg.num_online, tf.float32)  # [B]
    entropy_mask = None
    if cfg.entropy_on_online_only and cfg.num_online > 0:
      entropy_mask = online

    with tf.GradientTape() as tape:
      (logits, values), _ = self._network.unroll(
          data.observation, core_state, start)
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
    grad_norm = self._apply_fn(gradients)
    self._num_steps.assign_add(1)

    metrics = dict(metrics)
    metrics['grad_norm'] = grad_norm
    metrics['learning_rate'] = lr
    nan = tf.constant(float('nan'))

    def masked_mean(x, weights):
      total = tf.reduce_sum(weights)
      return tf.where(total > 0, tf.reduce_sum(x * weights) /
                      tf.maximum(total, 1.), nan)

    replayed = 1. - online
    rejected = (1. - trust_mask) if trust_mask is not None else tf.zeros_like(
        mask)
    metrics['rejected_fraction_online'] = masked_mean(rejected,
                                                      mask * online)
    metrics['rejected_fraction_replay'] = masked_mean(rejected,
                                                      mask * replayed)
    metrics['policy_lag_mean'] = nan
    metrics['policy_lag_max'] = nan
    metrics['replay_staleness_mean'] = nan
    if 'policy_version' in extras:
      # Learner steps between the weights that acted and these weights.
      # Dummy steps carry version 0: take the oldest real step's version.
      version = tf.cast(extras['policy_version'][:-1], tf.float32)
      version = tf.where(mask > 0, version, tf.float32.max)
      lag = tf.cast(self._num_steps - 1, tf.float32) - tf.reduce_min(
          version, axis=0)  # [B]
      valid = tf.cast(tf.reduce_any(mask > 0, axis=0), tf.float32)
      lag = tf.where(valid > 0, lag, 0.)
      if cfg.num_online > 0:
        metrics['policy_lag_mean'] = masked_mean(lag, valid * online)
        metrics['policy_lag_max'] = tf.reduce_max(lag * valid * online)
      if cfg.num_replayed > 0:
        # How stale replayed data is: learner steps since it was written.
        metrics['replay_staleness_mean'] = masked_mean(lag, valid * replayed)
    return metrics

  # -- acme.Learner. --------------------------------------------------------

  def step(self):
    start = time.time()
    sample = next(self._iterator)
    got_data = time.time()
    data = sample.data if isinstance(sample, reverb.ReplaySample) else sample
    metrics = self._step_fn(data)
    metrics = tf2_utils.to_numpy(metrics)
    end = time.time()

    if self._compile_time is None:
      # The first call traces and compiles; report it apart from throughput.
      self._compile_time = self._trace_time + end - got_data
    else:
      self._wait_time += got_data - start
      self._busy_time += end - got_data
    elapsed = end - self._last_time if self._last_time else 0.
    self._last_time = end

    counts = self._counter.increment(steps=1, walltime=elapsed)
    metrics = {k: float(v) for k, v in metrics.items()}
    total = self._wait_time + self._busy_time
    # Only the counts this learner's rows are about: a fixed set of columns.
    metrics['actor_steps'] = counts.get('actor_steps', 0)
    # The learner's own (checkpointed) step is authoritative: the shared
    # counter is only eventually consistent across restarts.
    metrics['learner_steps'] = int(self._num_steps.numpy())
    metrics['compile_time_s'] = self._compile_time
    metrics['timestamp'] = end
    metrics['steps_per_second'] = 1. / elapsed if elapsed > 0 else 0.
    metrics['samples_per_second'] = metrics['steps_per_second'] * (
        self._config.batch_size)
    metrics['queue_wait_fraction'] = self._wait_time / total if total else 0.
    self._logger.write(metrics)

  def get_variables(self, names: List[str]) -> List[List[np.ndarray]]:
    """Serves the groups named in `names` ('policy', 'learner_steps')."""
    groups = {
        acting.POLICY_VARIABLES: lambda: tf2_utils.to_numpy(
            self._network.variables),
        acting.LEARNER_STEPS: lambda: [self._num_steps.numpy()],
    }
    unknown = [n for n in names if n not in groups]
    if unknown:
      raise ValueError(f'Unknown variable group(s) {unknown}; this learner '
                       f'serves {sorted(groups)}.')
    return [groups[n]() for n in names]

  @property
  def num_steps(self) -> int:
    return int(self._num_steps.numpy())

  @property
  def state(self) -> Mapping[str, tf2_savers.Checkpointable]:
    return {
        'network': self._network,
        'optimizer': self._optimizer,
        'num_steps': self._num_steps,
    }
