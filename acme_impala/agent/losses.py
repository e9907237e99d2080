# Copyright 2026 The acme_impala Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#    http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""IMPALA / LASER actor-critic loss and reward pre-processing.

Pure TensorFlow functions, time-major (`[T, B]`, logits `[T, B, A]`,
bootstrap values `[B]`), with no dependency on Sonnet or Reverb so they can be
tested in isolation and compiled with `tf.function(jit_compile=True)`.

The loss follows the V-trace actor-critic algorithm of Espeholt et al. (2018),
section 4.2. Its gradient is the sum of

  policy:    rho_s * grad log pi(a_s|x_s) * (r_s + gamma_s v_{s+1} - V(x_s)),
  baseline:  baseline_cost * (v_s - V(x_s)) * grad V(x_s),
  entropy:   entropy_cost * grad H(pi(.|x_s)),

(as descent directions of the loss, with signs flipped) where v_s are V-trace
targets. Section 5.2.2's alternative off-policy corrections are available
through `off_policy_correction`, and the trust-region mask of Schmitt et al.
(2019) through `relevance_mask`.
"""

from typing import Dict, Optional, Tuple

import tensorflow as tf

from acme_impala.agent import config as config_lib
from acme_impala.agent import vtrace

# The choices, named once (config.py), here under the loss's own names.
REWARD_CLIPPING_MODES = config_lib.REWARD_CLIPPING
OFF_POLICY_CORRECTIONS = config_lib.OFF_POLICY_CORRECTIONS
REDUCTIONS = config_lib.LOSS_REDUCTIONS

# IMPALA section 5.2.2, "epsilon-correction": a small value added during the
# gradient calculation so that log pi(a) cannot become very small.
EPSILON_CORRECTION = 1e-6


def clip_rewards(rewards, mode: str) -> tf.Tensor:
  """Reward pre-processing used by IMPALA (Table D.3, Figure D.1, Table G.1).

  Args:
    rewards: float tensor of any shape, e.g. `[T, B]`.
    mode: one of `REWARD_CLIPPING_MODES`:
      'none': rewards unchanged.
      'abs_one': clipped to [-1, 1] (single-task DMLab and Atari).
      'soft_asymmetric': "optimistic asymmetric clipping" (DMLab-30), as
        computed by the paper's reference code (deepmind/scalable_agent,
        experiment.py), which produced its DMLab results:
          squeezed = tanh(r / 5); clipped = 5 * where(r < 0, 0.3 * squeezed,
                                                      squeezed),
        i.e. 5 tanh(r / 5) for r >= 0 and 1.5 tanh(r / 5) for r < 0: values
        in (-1.5, 5), roughly r for small positive r and 0.3 r for small
        negative r. The caption of Figure D.1 states a different formula,
        0.3 * min(tanh(r), 0) + 5.0 * max(tanh(r), 0) (values in (-0.3, 5),
        saturating at |r| ~ 2); it is not the one used here.

  Returns:
    Float tensor with the shape of `rewards`.

  Raises:
    ValueError: if `mode` is unknown.
  """
  if mode not in REWARD_CLIPPING_MODES:
    raise ValueError(f'Unknown reward clipping mode {mode!r}; valid modes are '
                     f'{REWARD_CLIPPING_MODES}.')
  rewards = tf.convert_to_tensor(rewards)
  if not rewards.dtype.is_floating:
    rewards = tf.cast(rewards, tf.float32)
  if mode == 'none':
    return rewards
  if mode == 'abs_one':
    return tf.clip_by_value(rewards, -1., 1.)
  # deepmind/scalable_agent experiment.py (see the docstring).
  squeezed = tf.tanh(rewards / 5.)
  return tf.where(rewards < 0, 0.3 * squeezed, squeezed) * 5.


_check_rank = vtrace.check_rank
_as_float = vtrace.as_float


def _masked(x: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
  # `where` rather than a product, so non-finite padding in masked steps (and
  # its gradients) cannot turn the sum into NaN.
  return tf.where(weights > 0, weights * x, tf.zeros_like(x))


def impala_loss(
    target_logits,
    behaviour_logits,
    actions,
    rewards,
    discounts,
    values,
    bootstrap_value,
    *,
    mask=None,
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.01,
    clip_rho_threshold: Optional[float] = 1.0,
    clip_c_threshold: Optional[float] = 1.0,
    clip_pg_rho_threshold: Optional[float] = 1.0,
    lambda_: float = 1.0,
    reduction: str = 'mean',
    off_policy_correction: str = 'vtrace',
    relevance_mask=None,
    entropy_mask=None,
    vtrace_fn=None,
) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
  r"""IMPALA actor-critic loss for a categorical policy.

  Per step s, with w_s the combined mask (see below), the loss is

    policy:   -w_s * rho_s * log pi(a_s|x_s) * stop_grad(r_s + gamma_s v_{s+1}
                                                         - V(x_s))
    baseline:  w_s * baseline_cost * 0.5 * (stop_grad(v_s) - V(x_s))^2
    entropy:  -w_s * e_s * entropy_cost * H(pi(.|x_s))

  reduced over time and batch. Conventions:
    * The 0.5 in the baseline term makes its gradient exactly the paper's
      update direction (v_s - V(x_s)) grad V(x_s); `baseline_cost` is then the
      paper's "baseline loss scaling" (0.5 in Table D.3).
    * The entropy term is negative so that minimising the loss maximises the
      entropy (the paper's entropy bonus).
    * Only `target_logits` and `values` receive gradients. V-trace targets and
      advantages, importance weights, and hence `bootstrap_value` (which only
      enters the targets) are constants.

  Off-policy corrections (IMPALA section 5.2.2), selected by
  `off_policy_correction`:
    'vtrace': full V-trace (section 4): v_s from eq. (1), rho_s =
      min(clip_pg_rho_threshold, pi/mu) in the policy gradient.
    'one_step_is': "No off-policy correction when optimising V(x). For the
      policy gradient, multiply the advantage at each time step by the
      corresponding importance weight": v_s are computed with rho = c = 1
      (lambda still applies to c, giving on-policy lambda-returns), and the
      advantage r_s + gamma_s v_{s+1} - V(x_s) is multiplied by that step's
      importance weight clipped at `clip_pg_rho_threshold` (the threshold on
      rho in the policy-gradient term, exactly as in 'vtrace'; both default
      to 1 as in the paper).
    'epsilon': no correction (as 'none'), but the policy-gradient term uses
      log(pi(a_s|x_s) + 1e-6) in place of log pi(a_s|x_s): the paper's "add a
      small value (epsilon = 1e-6) during gradient calculation to prevent
      log pi(a) from becoming very small and leading to numerical
      instabilities" (after Babaeizadeh et al., 2016). The entropy term is
      unchanged, since the paper only names log pi(a).
    'none': no correction at all: rho = c = 1 everywhere, i.e. the data is
      treated as on-policy (n-step / lambda-return targets, unweighted
      advantages).

  Masks (all `[T, B]`, 0/1):
    `mask` marks real steps (0 for padding or dummy steps) and
    `relevance_mask` is LASER's trust-region mask (Algorithm 1: rejected
    transitions are dropped from every loss term). They are multiplied into
    w_s, which removes steps from every term and is also the relevance mask of
    the V-trace targets, so traces are cut at removed steps (LASER eq. 8).
    `entropy_mask` (`[T, B]`, or `[B]` broadcast over time) further restricts
    only the entropy term (e_s above; LASER computes the entropy cost on
    online data only).

  Reduction:
    'sum': every term summed over time and batch (IMPALA Table D.1 note).
    'mean': every term summed as above and divided by N = max(1, sum_s w_s),
      the number of valid steps. The same N is used for the entropy term even
      with `entropy_mask`, so 'mean' is always exactly 'sum' / N and the
      relative weight of the terms does not depend on the reduction.

  Args:
    target_logits: `[T, B, A]` logits of the learner policy pi (differentiable).
    behaviour_logits: `[T, B, A]` logits of the behaviour policy mu (constant).
    actions: `[T, B]` int actions taken by mu.
    rewards: `[T, B]` rewards (apply `clip_rewards` beforehand if wanted).
    discounts: `[T, B]` gamma * d_t; zero at episode ends.
    values: `[T, B]` baseline V(x_t) (differentiable).
    bootstrap_value: `[B]` V(x_T) after the last step.
    mask: optional `[T, B]` 0/1 validity mask.
    baseline_cost: weight of the baseline term.
    entropy_cost: weight of the entropy term.
    clip_rho_threshold: rho_bar of the V-trace targets (None: no clipping).
    clip_c_threshold: c_bar of the V-trace traces (None: no clipping).
    clip_pg_rho_threshold: clipping of the policy-gradient importance weight
      (None: no clipping).
    lambda_: trace decay lambda (IMPALA Remark 2).
    reduction: 'mean' or 'sum'.
    off_policy_correction: one of `OFF_POLICY_CORRECTIONS`.
    relevance_mask: optional `[T, B]` 0/1 LASER trust-region mask.
    entropy_mask: optional `[T, B]` or `[B]` 0/1 mask for the entropy term.
    vtrace_fn: optional replacement for `vtrace.vtrace_from_importance_weights`
      with the same signature, e.g. a `tf.function(jit_compile=True)` of it.

  Returns:
    `(loss, metrics)`: scalar loss and a dict of scalar tensors:
      'loss': the loss.
      'policy_loss', 'baseline_loss', 'entropy_loss': the three reduced terms,
        already scaled by their costs, summing to 'loss'.
      'entropy': mean policy entropy over steps valid for the entropy term.
      'clipped_rho_fraction': fraction of valid steps with pi/mu >
        clip_rho_threshold (0 if it is None), whatever the correction.
      'mean_rho': mean unclipped importance weight pi/mu over valid steps,
        a measure of the policy lag.
      'mean_advantage', 'mean_vs', 'num_valid_steps': further diagnostics.

  Raises:
    ValueError: for an unknown `reduction` or `off_policy_correction`, or
      inconsistent ranks.
  """
  if reduction not in REDUCTIONS:
    raise ValueError(f'Unknown reduction {reduction!r}; valid options are '
                     f'{REDUCTIONS}.')
  if off_policy_correction not in OFF_POLICY_CORRECTIONS:
    raise ValueError(
        f'Unknown off_policy_correction {off_policy_correction!r}; valid '
        f'options are {OFF_POLICY_CORRECTIONS}.')

  with tf.name_scope('impala_loss'):
    values = tf.convert_to_tensor(values)
    dtype = values.dtype if values.dtype.is_floating else tf.float32
    values = _as_float(values, dtype)
    target_logits = _as_float(target_logits, dtype)
    behaviour_logits = tf.stop_gradient(_as_float(behaviour_logits, dtype))
    actions = tf.convert_to_tensor(actions)
    rewards = _as_float(rewards, dtype)
    discounts = _as_float(discounts, dtype)
    bootstrap_value = _as_float(bootstrap_value, dtype)

    _check_rank(target_logits, 3, 'target_logits', '[T, B, A]')
    _check_rank(behaviour_logits, 3, 'behaviour_logits', '[T, B, A]')
    for tensor, arg_name in ((actions, 'actions'), (rewards, 'rewards'),
                             (discounts, 'discounts'), (values, 'values')):
      _check_rank(tensor, 2, arg_name, '[T, B]')
    _check_rank(bootstrap_value, 1, 'bootstrap_value', '[B]')

    weights = tf.ones_like(values)
    for m, arg_name in ((mask, 'mask'), (relevance_mask, 'relevance_mask')):
      if m is not None:
        m = _as_float(m, dtype)
        _check_rank(m, 2, arg_name, '[T, B]')
        weights *= m
    weights = tf.stop_gradient(weights)
    entropy_weights = weights
    if entropy_mask is not None:
      entropy_mask = _as_float(entropy_mask, dtype)
      if entropy_mask.shape.rank not in (None, 1, 2):
        raise ValueError(
            '`entropy_mask` must have shape [T, B] or [B], got shape '
            f'{entropy_mask.shape}.')
      entropy_weights = tf.stop_gradient(weights * entropy_mask)

    target_log_probs = vtrace.log_probs_from_logits_and_actions(
        target_logits, actions)
    behaviour_log_probs = vtrace.log_probs_from_logits_and_actions(
        behaviour_logits, actions)
    log_rhos = tf.stop_gradient(target_log_probs) - behaviour_log_probs

    # V-trace targets are constants of the loss: its inputs are stopped
    # too, so a compiled `vtrace_fn` is never differentiated through.
    vtrace_fn = vtrace_fn or vtrace.vtrace_from_importance_weights
    stopped_values = tf.stop_gradient(values)
    stopped_bootstrap = tf.stop_gradient(bootstrap_value)
    if off_policy_correction == 'vtrace':
      vtrace_returns = vtrace_fn(
          log_rhos=log_rhos,
          discounts=discounts,
          rewards=rewards,
          values=stopped_values,
          bootstrap_value=stopped_bootstrap,
          clip_rho_threshold=clip_rho_threshold,
          clip_c_threshold=clip_c_threshold,
          clip_pg_rho_threshold=clip_pg_rho_threshold,
          lambda_=lambda_,
          relevance_mask=weights)
      vs = vtrace_returns.vs
      pg_advantages = vtrace_returns.pg_advantages
    else:
      # Uncorrected targets: V-trace with all ratios equal to one and no
      # clipping reduces to n-step (lambda-)returns, eq. (2).
      vs = vtrace_fn(
          log_rhos=tf.zeros_like(log_rhos),
          discounts=discounts,
          rewards=rewards,
          values=stopped_values,
          bootstrap_value=stopped_bootstrap,
          clip_rho_threshold=None,
          clip_c_threshold=None,
          clip_pg_rho_threshold=None,
          lambda_=lambda_,
          relevance_mask=weights).vs
      vs_tp1 = tf.concat([vs[1:], bootstrap_value[tf.newaxis]], axis=0)
      pg_advantages = rewards + discounts * vs_tp1 - tf.stop_gradient(values)
      if off_policy_correction == 'one_step_is':
        rhos = tf.exp(log_rhos)
        if clip_pg_rho_threshold is not None:
          rhos = tf.minimum(_as_float(clip_pg_rho_threshold, dtype), rhos)
        pg_advantages *= rhos
      pg_advantages = tf.stop_gradient(pg_advantages)

    if off_policy_correction == 'epsilon':
      pg_log_probs = tf.math.log(
          tf.exp(target_log_probs) + EPSILON_CORRECTION)
    else:
      pg_log_probs = target_log_probs

    # Zero the advantages of removed steps before they meet log pi: padding
    # there may be NaN, and 0 * NaN would poison the gradient of log pi.
    pg_advantages = tf.where(weights > 0, pg_advantages,
                             tf.zeros_like(pg_advantages))
    policy_terms = _masked(-pg_advantages * pg_log_probs, weights)
    baseline_terms = _masked(
        0.5 * tf.square(vs - values), weights)
    log_policy = tf.nn.log_softmax(target_logits)
    entropies = -tf.reduce_sum(tf.exp(log_policy) * log_policy, axis=-1)
    entropy_terms = _masked(entropies, entropy_weights)

    num_valid = tf.reduce_sum(weights)
    if reduction == 'sum':
      normaliser = tf.ones([], dtype)
    else:
      normaliser = tf.maximum(num_valid, 1.)

    policy_loss = tf.reduce_sum(policy_terms) / normaliser
    baseline_loss = baseline_cost * tf.reduce_sum(baseline_terms) / normaliser
    entropy_loss = -entropy_cost * tf.reduce_sum(entropy_terms) / normaliser
    loss = policy_loss + baseline_loss + entropy_loss

    # Diagnostics: none of them should be differentiated.
    safe_num_valid = tf.maximum(num_valid, 1.)
    valid = weights > 0
    rhos = tf.exp(log_rhos)
    if clip_rho_threshold is None:
      clipped = tf.zeros_like(rhos)
    else:
      clipped = tf.cast(rhos > _as_float(clip_rho_threshold, dtype), dtype)
    zeros = tf.zeros_like(rhos)
    metrics = {
        'loss': loss,
        'policy_loss': policy_loss,
        'baseline_loss': baseline_loss,
        'entropy_loss': entropy_loss,
        'entropy': tf.stop_gradient(
            tf.reduce_sum(entropy_terms) /
            tf.maximum(tf.reduce_sum(entropy_weights), 1.)),
        'clipped_rho_fraction': tf.reduce_sum(
            tf.where(valid, clipped, zeros)) / safe_num_valid,
        'mean_rho': tf.stop_gradient(
            tf.reduce_sum(tf.where(valid, rhos, zeros)) / safe_num_valid),
        'mean_advantage': tf.reduce_sum(pg_advantages) / safe_num_valid,
        'mean_vs': tf.reduce_sum(_masked(vs, weights)) / safe_num_valid,
        'num_valid_steps': num_valid,
    }
    return loss, metrics
