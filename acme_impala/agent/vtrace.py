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
"""V-trace off-policy targets (IMPALA) with LASER's trust-region mask.

Implements the n-step V-trace target of Espeholt et al. (2018), eq. (1),

  v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) rho_t delta_t,
  delta_t = r_t + gamma_t V(x_{t+1}) - V(x_t),
  rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),
  c_i = lambda * min(c_bar, pi(a_i|x_i) / mu(a_i|x_i))        (Remark 2),

with V(x_T) given by `bootstrap_value`, per-step discounts gamma_t (so a zero
discount ends an episode), and optionally the masked ("trust region") V-trace
of Schmitt et al. (2019), eq. (8), where a relevance mask m_t multiplies both
c_t and rho_t:

  v_s = V(x_s) + sum_t (prod_{i=s}^{t-1} gamma_i m_i c_i) m_t rho_t delta_t.

The targets are computed with the backward recursion of Remark 1,

  v_s - V(x_s) = m_s rho_s delta_s + gamma_s m_s c_s (v_{s+1} - V(x_{s+1})),

as a reversed `tf.scan`, which XLA compiles into a single while loop.

All tensors are time-major: `[T, B]` (or `[T, B, ...]`), `bootstrap_value` is
`[B]` (or `[B, ...]`). The API mirrors `trfl.vtrace_ops` (same argument names
and return namedtuples) so that the two are interchangeable; the extra
arguments (`clip_c_threshold`, `lambda_`, `relevance_mask`) default to values
that reproduce trfl exactly.
"""

import collections
from typing import Optional, Union

import tensorflow as tf

VTraceReturns = collections.namedtuple('VTraceReturns',
                                       ['vs', 'pg_advantages'])

VTraceFromLogitsReturns = collections.namedtuple(
    'VTraceFromLogitsReturns',
    ['vs', 'pg_advantages', 'log_rhos', 'behaviour_action_log_probs',
     'target_action_log_probs'])

Threshold = Optional[Union[float, tf.Tensor]]


def _check_rank(tensor: tf.Tensor, rank: int, arg_name: str,
                expected_shape: str) -> None:
  """Raises a ValueError naming the argument when its static rank is wrong."""
  actual = tensor.shape.rank
  if actual is not None and actual != rank:
    raise ValueError(
        f'`{arg_name}` must have rank {rank} (shape {expected_shape}), got '
        f'rank {actual} with shape {tensor.shape}.')


def _as_float(x, dtype: tf.DType) -> tf.Tensor:
  # The hint makes Python scalars exact in `dtype` (0.8 must not round through
  # float32 when computing in float64); tensors keep theirs and are cast.
  x = tf.convert_to_tensor(x, dtype_hint=dtype)
  return x if x.dtype == dtype else tf.cast(x, dtype)


# Shared with losses.py and trust_region.py.
check_rank = _check_rank
as_float = _as_float


def _scalar_or_none(x, arg_name: str, dtype: tf.DType) -> Optional[tf.Tensor]:
  if x is None:
    return None
  x = _as_float(x, dtype)
  _check_rank(x, 0, arg_name, '[]')
  return x


def log_probs_from_logits_and_actions(logits, actions) -> tf.Tensor:
  """Log-probabilities of `actions` under softmax policies given by `logits`.

  Args:
    logits: float tensor `[T, B, A]` (any leading shape `[..., A]`) of
      unnormalised log-probabilities.
    actions: int tensor `[T, B]` (leading shape of `logits`) with values in
      `[0, A)`.

  Returns:
    Float tensor `[T, B]`: log pi(actions | logits).
  """
  logits = tf.convert_to_tensor(logits)
  if not logits.dtype.is_floating:
    logits = tf.cast(logits, tf.float32)
  actions = tf.convert_to_tensor(actions)
  if actions.dtype not in (tf.int32, tf.int64):
    actions = tf.cast(actions, tf.int32)
  if logits.shape.rank is not None and actions.shape.rank is not None:
    if logits.shape.rank != actions.shape.rank + 1:
      raise ValueError(
          '`logits` must have exactly one more dimension than `actions` '
          f'(e.g. [T, B, A] and [T, B]); got logits shape {logits.shape} and '
          f'actions shape {actions.shape}.')
  # The cross entropy with a one-hot label is exactly -log softmax(logits)[a],
  # computed in a numerically stable fused kernel that XLA also supports.
  return -tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=actions, logits=logits)


def vtrace_from_importance_weights(
    log_rhos,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold: Threshold = 1.0,
    clip_c_threshold: Threshold = 1.0,
    clip_pg_rho_threshold: Threshold = 1.0,
    lambda_: Union[float, tf.Tensor] = 1.0,
    relevance_mask=None,
    name: str = 'vtrace_from_importance_weights') -> VTraceReturns:
  r"""V-trace targets and policy-gradient advantages from log importance weights.

  Time-major shapes; `T` is the unroll length and `B` the batch size. Extra
  trailing dimensions are allowed as long as all `[T, B]` arguments share them
  and `bootstrap_value` has them after `B` (e.g. `[T, B, C]` and `[B, C]`).

  Args:
    log_rhos: `[T, B]` log importance weights log(pi(a_t|x_t) / mu(a_t|x_t)).
      Kept in log space so that ratios are formed by a single `exp`.
    discounts: `[T, B]` per-step discounts gamma * d_t, where d_t is the
      environment's continuation flag; zero ends the episode at step t.
    rewards: `[T, B]` rewards r_t.
    values: `[T, B]` value estimates V(x_t) of the target policy.
    bootstrap_value: `[B]` value estimate V(x_T) after the last step.
    clip_rho_threshold: scalar rho_bar clipping rho_t in the value targets.
      `None` disables clipping.
    clip_c_threshold: scalar c_bar clipping the trace coefficients c_t (trfl
      hard-codes 1). `None` disables clipping. The paper assumes
      rho_bar >= c_bar.
    clip_pg_rho_threshold: scalar clipping the importance weight of the
      policy-gradient advantage. `None` disables clipping.
    lambda_: scalar lambda of Remark 2; c_t = lambda * min(c_bar, ratio_t).
      lambda = 0 gives one-step TD targets; lambda = 1 the paper's V-trace.
    relevance_mask: optional `[T, B]` 0/1 mask (LASER eq. 8). A masked step's
      rho and c are multiplied by zero: its TD error contributes nothing and
      no trace passes through it, so earlier targets bootstrap from V(x_t)
      there and its own target is V(x_t). Masked steps also get a zero
      policy-gradient advantage. Values at masked steps are never read, except
      V(x_t) as a bootstrap for step t - 1, so they may hold padding.
    name: name scope for the created ops.

  Returns:
    `VTraceReturns(vs, pg_advantages)`, both `[T, B]` and wrapped in
    `tf.stop_gradient`:
      vs: the V-trace targets v_s, to regress V(x_s) on.
      pg_advantages: clipped_pg_rho_s * (r_s + gamma_s v_{s+1} - V(x_s)),
        times the relevance mask, with v_T = bootstrap_value.

  Raises:
    ValueError: if ranks are inconsistent.
  """
  with tf.name_scope(name):
    values = tf.convert_to_tensor(values)
    dtype = values.dtype if values.dtype.is_floating else tf.float32
    # Everything is an input to a target: none of it should be differentiated,
    # and stopping gradients here keeps the scan out of any gradient graph.
    values = tf.stop_gradient(_as_float(values, dtype))
    log_rhos = tf.stop_gradient(_as_float(log_rhos, dtype))
    discounts = tf.stop_gradient(_as_float(discounts, dtype))
    rewards = tf.stop_gradient(_as_float(rewards, dtype))
    bootstrap_value = tf.stop_gradient(_as_float(bootstrap_value, dtype))

    rank = log_rhos.shape.rank
    if rank is None:
      raise ValueError('`log_rhos` must have a statically known rank.')
    if rank < 2:
      raise ValueError(
          f'`log_rhos` must have rank >= 2 (time-major [T, B]), got rank '
          f'{rank} with shape {log_rhos.shape}.')
    _check_rank(discounts, rank, 'discounts', '[T, B]')
    _check_rank(rewards, rank, 'rewards', '[T, B]')
    _check_rank(values, rank, 'values', '[T, B]')
    _check_rank(bootstrap_value, rank - 1, 'bootstrap_value', '[B]')
    if relevance_mask is not None:
      relevance_mask = tf.stop_gradient(_as_float(relevance_mask, dtype))
      _check_rank(relevance_mask, rank, 'relevance_mask', '[T, B]')

    clip_rho_threshold = _scalar_or_none(
        clip_rho_threshold, 'clip_rho_threshold', dtype)
    clip_c_threshold = _scalar_or_none(
        clip_c_threshold, 'clip_c_threshold', dtype)
    clip_pg_rho_threshold = _scalar_or_none(
        clip_pg_rho_threshold, 'clip_pg_rho_threshold', dtype)
    lambda_ = _as_float(lambda_, dtype)
    _check_rank(lambda_, 0, 'lambda_', '[]')

    rhos = tf.exp(log_rhos)
    clipped_rhos = (rhos if clip_rho_threshold is None
                    else tf.minimum(clip_rho_threshold, rhos))
    cs = rhos if clip_c_threshold is None else tf.minimum(clip_c_threshold,
                                                          rhos)
    cs = lambda_ * cs
    clipped_pg_rhos = (rhos if clip_pg_rho_threshold is None
                       else tf.minimum(clip_pg_rho_threshold, rhos))

    values_tp1 = tf.concat([values[1:], bootstrap_value[tf.newaxis]], axis=0)
    weighted_deltas = clipped_rhos * (
        rewards + discounts * values_tp1 - values)
    decays = discounts * cs

    if relevance_mask is not None:
      # `where` rather than a product, so that padding at masked steps (inf
      # ratios from garbage logits, NaN rewards) cannot leak in as 0 * inf.
      relevant = relevance_mask > 0
      zeros = tf.zeros_like(weighted_deltas)
      weighted_deltas = tf.where(relevant, relevance_mask * weighted_deltas,
                                 zeros)
      decays = tf.where(relevant, relevance_mask * decays, zeros)

    # Remark 1 from the back: acc_t = rho_t delta_t + gamma_t c_t acc_{t+1},
    # with acc_T = 0. The element-wise products are hoisted out of the loop so
    # the sequential part is one multiply-add per step.
    def _step(acc, elems):
      decay_t, weighted_delta_t = elems
      return weighted_delta_t + decay_t * acc

    vs_minus_values = tf.scan(
        _step,
        elems=(decays, weighted_deltas),
        initializer=tf.zeros_like(bootstrap_value),
        reverse=True,
        # Every step depends on the previous one: extra parallel iterations
        # only add while-loop bookkeeping.
        parallel_iterations=1,
        name='vtrace_scan')
    vs = values + vs_minus_values

    vs_tp1 = tf.concat([vs[1:], bootstrap_value[tf.newaxis]], axis=0)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_tp1 - values)
    if relevance_mask is not None:
      pg_advantages = tf.where(relevant, relevance_mask * pg_advantages,
                               tf.zeros_like(pg_advantages))

    return VTraceReturns(vs=tf.stop_gradient(vs),
                         pg_advantages=tf.stop_gradient(pg_advantages))


def vtrace_from_logits(
    behaviour_policy_logits,
    target_policy_logits,
    actions,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold: Threshold = 1.0,
    clip_c_threshold: Threshold = 1.0,
    clip_pg_rho_threshold: Threshold = 1.0,
    lambda_: Union[float, tf.Tensor] = 1.0,
    relevance_mask=None,
    name: str = 'vtrace_from_logits') -> VTraceFromLogitsReturns:
  """V-trace for categorical (softmax) policies.

  Args:
    behaviour_policy_logits: `[T, B, A]` logits of the behaviour policy mu.
    target_policy_logits: `[T, B, A]` logits of the target policy pi.
    actions: `[T, B]` int actions sampled from mu.
    discounts: `[T, B]` per-step discounts gamma * d_t.
    rewards: `[T, B]` rewards.
    values: `[T, B]` value estimates V(x_t).
    bootstrap_value: `[B]` value estimate V(x_T).
    clip_rho_threshold: see `vtrace_from_importance_weights`.
    clip_c_threshold: see `vtrace_from_importance_weights`.
    clip_pg_rho_threshold: see `vtrace_from_importance_weights`.
    lambda_: see `vtrace_from_importance_weights`.
    relevance_mask: optional `[T, B]` 0/1 mask, see
      `vtrace_from_importance_weights`.
    name: name scope for the created ops.

  Returns:
    `VTraceFromLogitsReturns` with `vs`, `pg_advantages` (both `[T, B]`,
    gradient-stopped), and `[T, B]` tensors `log_rhos`,
    `behaviour_action_log_probs` and `target_action_log_probs` (the latter
    two still differentiable, so callers can reuse them in a loss).

  Raises:
    ValueError: if ranks are inconsistent.
  """
  with tf.name_scope(name):
    behaviour_policy_logits = tf.convert_to_tensor(behaviour_policy_logits)
    target_policy_logits = tf.convert_to_tensor(target_policy_logits)
    actions = tf.convert_to_tensor(actions)
    _check_rank(behaviour_policy_logits, 3, 'behaviour_policy_logits',
                '[T, B, A]')
    _check_rank(target_policy_logits, 3, 'target_policy_logits', '[T, B, A]')
    _check_rank(actions, 2, 'actions', '[T, B]')

    target_action_log_probs = log_probs_from_logits_and_actions(
        target_policy_logits, actions)
    behaviour_action_log_probs = log_probs_from_logits_and_actions(
        behaviour_policy_logits, actions)
    log_rhos = target_action_log_probs - behaviour_action_log_probs
    vtrace_returns = vtrace_from_importance_weights(
        log_rhos=log_rhos,
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
        clip_rho_threshold=clip_rho_threshold,
        clip_c_threshold=clip_c_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        lambda_=lambda_,
        relevance_mask=relevance_mask)
    return VTraceFromLogitsReturns(
        vs=vtrace_returns.vs,
        pg_advantages=vtrace_returns.pg_advantages,
        log_rhos=log_rhos,
        behaviour_action_log_probs=behaviour_action_log_probs,
        target_action_log_probs=target_action_log_probs)
