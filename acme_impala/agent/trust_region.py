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
"""LASER's off-policy trust region: implied policy, KL and relevance mask.

Schmitt, Hessel & Simonyan (2019), "Off-Policy Actor-Critic with Shared
Experience Replay" (LASER), section 4, builds a trust region for V-trace from
three quantities, all computed here for categorical (softmax) policies:

1. The V-trace implied policy (IMPALA eq. (3); LASER eq. (3) in section 2.3,
   repeated as eq. (9) in Appendix C, Proposition 1):

     pi~_mu(a|x) = min(rho_bar mu(a|x), pi(a|x))
                   / sum_b min(rho_bar mu(b|x), pi(b|x)).

   V-trace with truncation level rho_bar converges to the value of pi~_mu, not
   of pi (IMPALA Theorem 1), so pi~_mu measures V-trace's bias for the
   behaviour mu. `implied_policy_log_probs`.

2. The behaviour relevance function of LASER section 4.3,

     beta_KL(pi, mu, s) = KL(pi(.|s) || pi~_mu(.|s))
                        = sum_a pi(a|s) (log pi(a|s) - log pi~_mu(a|s)),

   i.e. the KL *from the target policy pi to the implied policy* (pi is the
   first argument and the distribution the expectation is taken under).
   `kl_to_implied_policy`.

3. The relevance mask lambda_{pi,mu}(s_t) = 1[beta(pi, mu, s_t) < b] of LASER
   section 4.2 (defined with eqs. (7)-(8); M_{beta,pi}(s) of section 4.1 is
   the set of behaviours with beta < b, a strict inequality). It is the
   `relevance_mask` argument of `vtrace.vtrace_from_logits` (masked V-trace,
   LASER eq. (8)) and of `losses.impala_loss` (Algorithm 1 multiplies every
   loss term by it). `relevance_mask`.

Note on Algorithm 1 (Appendix B): its pseudocode writes the mask as
"KL(pi_k(s_{b,t}|.) || mu_{b,t}) < b", i.e. with the behaviour mu itself in
place of pi~_mu. Section 4.3, which defines beta_KL and motivates it by
Proposition 1 ("pi~_mu_z determines the fixed point of the V-trace estimator
... and thus determines the bias"), uses the implied policy; this module
follows section 4.3. With `clip_rho_threshold=None` (rho_bar -> infinity)
pi~_mu = pi and the KL is identically zero: the trust region only rejects
V-trace's truncation bias, which vanishes without truncation.

All functions are pure TensorFlow, time-major (logits `[T, B, A]`, outputs
`[T, B, A]` or `[T, B]`), work in log space (log-softmax, `minimum` of
log-probabilities and `reduce_logsumexp`, never dividing probabilities) and
compile under `tf.function(jit_compile=True)`.
"""

import math
from typing import Optional, Tuple, Union

import tensorflow as tf

from acme_impala.agent import vtrace

Threshold = Optional[Union[float, tf.Tensor]]


def _check_rank(tensor: tf.Tensor, rank: int, arg_name: str,
                expected_shape: str) -> None:
  """Raises a ValueError naming the argument unless its static rank matches."""
  actual = tensor.shape.rank
  if actual is None:
    raise ValueError(
        f'`{arg_name}` must have a statically known rank {rank} (shape '
        f'{expected_shape}), got a tensor of unknown rank.')
  if actual != rank:
    raise ValueError(
        f'`{arg_name}` must have rank {rank} (shape {expected_shape}), got '
        f'rank {actual} with shape {tensor.shape}.')


_as_float = vtrace.as_float


def _positive_scalar(x, arg_name: str, meaning: str,
                     dtype: tf.DType) -> tf.Tensor:
  """Converts a scalar threshold, rejecting statically known values <= 0."""
  x = _as_float(x, dtype)
  _check_rank(x, 0, arg_name, '[]')
  static = tf.get_static_value(x)
  # `not value > 0` also rejects NaN. Values only known at run time (e.g.
  # `tf.function` arguments) cannot be checked here.
  if static is not None and not float(static) > 0:
    raise ValueError(
        f'`{arg_name}` ({meaning}) must be > 0 or None, got '
        f'{float(static)!r}.')
  return x


def _prepare(target_logits, behaviour_logits, clip_rho_threshold
            ) -> Tuple[tf.Tensor, tf.Tensor, Optional[tf.Tensor]]:
  """Validates and converts the shared inputs.

  Returns:
    `(target_logits, behaviour_logits, log_rho_bar)` with both logits in one
    floating dtype and `log_rho_bar` a scalar, or None for no truncation.
  """
  target_logits = tf.convert_to_tensor(target_logits)
  dtype = (target_logits.dtype if target_logits.dtype.is_floating
           else tf.float32)
  target_logits = _as_float(target_logits, dtype)
  behaviour_logits = _as_float(behaviour_logits, dtype)
  _check_rank(target_logits, 3, 'target_logits', '[T, B, A]')
  _check_rank(behaviour_logits, 3, 'behaviour_logits', '[T, B, A]')
  if not target_logits.shape.is_compatible_with(behaviour_logits.shape):
    raise ValueError(
        '`target_logits` and `behaviour_logits` must have the same shape '
        f'[T, B, A], got {target_logits.shape} and {behaviour_logits.shape}.')

  if clip_rho_threshold is None:
    return target_logits, behaviour_logits, None
  rho_bar = _positive_scalar(clip_rho_threshold, 'clip_rho_threshold',
                             'the V-trace truncation level rho_bar', dtype)
  static = tf.get_static_value(rho_bar)
  if static is not None and math.isinf(float(static)):
    # rho_bar = inf is the untruncated limit; handled exactly like None so
    # that inf * mu(a) with mu(a) = 0 never produces NaN.
    return target_logits, behaviour_logits, None
  return target_logits, behaviour_logits, tf.math.log(rho_bar)


def _log_truncated(log_pi: tf.Tensor, behaviour_logits: tf.Tensor,
                   log_rho_bar: tf.Tensor) -> tf.Tensor:
  """`[T, B, A]` log min(rho_bar mu(a), pi(a)), computed in log space."""
  log_mu = tf.nn.log_softmax(behaviour_logits, axis=-1)
  return tf.minimum(log_rho_bar + log_mu, log_pi)


def implied_policy_log_probs(target_logits,
                             behaviour_logits,
                             clip_rho_threshold: Threshold = 1.0,
                             name: str = 'implied_policy_log_probs'
                             ) -> tf.Tensor:
  r"""Log-probabilities of the V-trace implied policy pi~_mu.

  Implements IMPALA eq. (3) (the policy pi_rho_bar whose value is V-trace's
  fixed point, Theorem 1), which LASER restates as eq. (3) / eq. (9)
  (Proposition 1):

    pi~_mu(a|x) = min(rho_bar mu(a|x), pi(a|x))
                  / sum_b min(rho_bar mu(b|x), pi(b|x)),

  evaluated in log space as

    log m(a)    = min(log rho_bar + log mu(a), log pi(a)),
    log pi~(a)  = log m(a) - logsumexp_b log m(b),

  with log pi, log mu from `log_softmax` of the logits.

  Special cases: `clip_rho_threshold=None` (or +inf) means no truncation,
  rho_bar -> infinity, and returns log pi exactly. For finite logits the
  result is always finite. If pi and mu have disjoint supports (possible only
  with -inf logits) the normaliser is zero, pi~_mu is undefined and the
  result is NaN.

  The result is differentiable w.r.t. `target_logits` (and
  `behaviour_logits`); `kl_to_implied_policy` stops the gradient itself.

  Args:
    target_logits: `[T, B, A]` logits of the target (learner) policy pi.
    behaviour_logits: `[T, B, A]` logits of the behaviour policy mu.
    clip_rho_threshold: scalar rho_bar > 0, the V-trace truncation level of
      rho_t (the same `clip_rho_threshold` as in `vtrace`), or None.
    name: name scope for the created ops.

  Returns:
    Float tensor `[T, B, A]`: log pi~_mu(a|x_t), in the dtype of
    `target_logits` (float32 if it is not floating).

  Raises:
    ValueError: if a logits argument does not have static rank 3, if the
      shapes differ, or if `clip_rho_threshold` is statically known to be
      <= 0 or is not a scalar.
  """
  with tf.name_scope(name):
    target_logits, behaviour_logits, log_rho_bar = _prepare(
        target_logits, behaviour_logits, clip_rho_threshold)
    log_pi = tf.nn.log_softmax(target_logits, axis=-1)
    if log_rho_bar is None:
      return log_pi
    log_m = _log_truncated(log_pi, behaviour_logits, log_rho_bar)
    return log_m - tf.reduce_logsumexp(log_m, axis=-1, keepdims=True)


def kl_to_implied_policy(target_logits,
                         behaviour_logits,
                         clip_rho_threshold: Threshold = 1.0,
                         name: str = 'kl_to_implied_policy') -> tf.Tensor:
  r"""LASER's behaviour relevance beta_KL = KL(pi(.|s) || pi~_mu(.|s)).

  Implements the behaviour relevance function of LASER section 4.3,

    beta_KL(pi, mu, s) = KL(pi(.|s) || pi~_mu(.|s))
                       = sum_a pi(a|s) (log pi(a|s) - log pi~_mu(a|s)),

  with pi~_mu the implied policy of IMPALA eq. (3) / LASER eq. (9) (see
  `implied_policy_log_probs`). Direction: the expectation is under the
  target policy pi, as in the paper; KL(pi || pi~_mu) is large when pi puts
  mass on actions that rho_bar mu under-covers (there pi~_mu < pi), which is
  exactly where V-trace's truncation biases its fixed point.

  It is computed without forming pi~_mu explicitly, using
  log pi - log pi~ = max(0, log pi - log rho_bar - log mu) + log Z with
  Z = sum_b min(rho_bar mu(b), pi(b)):

    KL = sum_a pi(a) max(0, log pi(a) - log rho_bar - log mu(a)) + log Z.

  Terms with pi(a) = 0 contribute 0. The result is clipped below at 0 to
  remove rounding noise (KL >= 0 always holds mathematically). It is +inf
  when pi puts mass on an action with mu(a) = 0 (or when pi and mu have
  disjoint supports), and exactly 0 for `clip_rho_threshold=None` (pi~ = pi).

  Gradient: the output is wrapped in `tf.stop_gradient`. In LASER the KL is
  only an input to the mask 1[KL < b] (section 4.2, Algorithm 1), an
  indicator whose derivative is zero almost everywhere; the paper never
  differentiates beta, and Algorithm 1 differentiates only L_V and L_P
  weighted by the constant mask M. Letting gradients flow would silently turn
  a diagnostic into a KL regulariser pulling pi towards pi~_mu, a different
  algorithm.

  Args:
    target_logits: `[T, B, A]` logits of the target (learner) policy pi.
    behaviour_logits: `[T, B, A]` logits of the behaviour policy mu.
    clip_rho_threshold: scalar rho_bar > 0 of V-trace, or None (no
      truncation, KL = 0).
    name: name scope for the created ops.

  Returns:
    Float tensor `[T, B]`, non-negative and gradient-stopped.

  Raises:
    ValueError: as `implied_policy_log_probs`.
  """
  with tf.name_scope(name):
    target_logits, behaviour_logits, log_rho_bar = _prepare(
        target_logits, behaviour_logits, clip_rho_threshold)
    if log_rho_bar is None:
      return tf.stop_gradient(tf.zeros_like(target_logits[..., 0]))
    log_pi = tf.nn.log_softmax(target_logits, axis=-1)
    log_m = _log_truncated(log_pi, behaviour_logits, log_rho_bar)
    log_z = tf.reduce_logsumexp(log_m, axis=-1)
    # log pi - log m is exactly 0 where pi <= rho_bar mu (the minimum picked
    # log pi itself). `where` drops actions with pi(a) = 0, for which the
    # difference is (-inf) - (-inf) = NaN.
    terms = tf.where(log_pi > -math.inf,
                     tf.exp(log_pi) * (log_pi - log_m),
                     tf.zeros_like(log_pi))
    kl = tf.reduce_sum(terms, axis=-1) + log_z
    # Disjoint supports: Z = 0, pi~ undefined, inf + (-inf) above; the KL of
    # pi to any distribution rho_bar mu can represent is infinite.
    kl = tf.where(log_z > -math.inf, kl, tf.fill(tf.shape(kl),
                                                  tf.constant(math.inf,
                                                              kl.dtype)))
    return tf.stop_gradient(tf.maximum(kl, tf.zeros_like(kl)))


def relevance_mask(target_logits,
                   behaviour_logits,
                   kl_threshold: Threshold,
                   clip_rho_threshold: Threshold = 1.0,
                   name: str = 'trust_region_relevance_mask') -> tf.Tensor:
  r"""LASER's trust-region mask lambda_{pi,mu}(s_t) = 1[beta_KL < b].

  Implements lambda_{pi,mu}(s_t) = 1_{beta(pi, mu, s_t) < b} of LASER
  section 4.2 (the relevance indicator inside eqs. (7)-(8); M_{beta,pi}(s) =
  {mu_z : beta(pi, mu_z, s) < b} in section 4.1) with beta = beta_KL of
  section 4.3 (`kl_to_implied_policy`) and b = `kl_threshold`. The
  inequality is strict: a step whose KL equals b is rejected. Pass the
  result as `relevance_mask` to `vtrace.vtrace_from_logits` (masked V-trace,
  eq. (8)) and to `losses.impala_loss` (Algorithm 1's M_{b,t}).

  A NaN KL (from NaN logits, e.g. padding) compares false and gives 0.

  Args:
    target_logits: `[T, B, A]` logits of the target (learner) policy pi.
    behaviour_logits: `[T, B, A]` logits of the behaviour policy mu.
    kl_threshold: scalar b > 0, or None for no trust region (all ones). A
      statically known value (Python number or constant tensor) is checked;
      a value only known at run time is not.
    clip_rho_threshold: scalar rho_bar > 0 of V-trace, or None (then the KL
      is 0 and every step is relevant for any b > 0).
    name: name scope for the created ops.

  Returns:
    Float tensor `[T, B]` of 0.0 / 1.0 in the dtype of `target_logits`
    (float32 if it is not floating), gradient-stopped.

  Raises:
    ValueError: if `kl_threshold` is statically known to be <= 0 (or NaN) or
      is not a scalar, or as `implied_policy_log_probs`.
  """
  with tf.name_scope(name):
    target_logits, behaviour_logits, _ = _prepare(
        target_logits, behaviour_logits, clip_rho_threshold)
    dtype = target_logits.dtype
    if kl_threshold is None:
      return tf.ones_like(target_logits[..., 0])
    kl_threshold = _positive_scalar(kl_threshold, 'kl_threshold',
                                    'the trust-region threshold b', dtype)
    kl = kl_to_implied_policy(target_logits, behaviour_logits,
                              clip_rho_threshold)
    return tf.stop_gradient(tf.cast(kl < kl_threshold, dtype))
