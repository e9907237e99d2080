"""Tests for acme_impala.agent.trust_region (LASER's V-trace trust region).

The implementation is checked against
  * a direct numpy evaluation of IMPALA eq. (3) / LASER eq. (9) and of
    KL(pi || pi~_mu) (LASER section 4.3) in probability space, float64,
  * hand-worked examples: on-policy data, LASER's two-action "mirror image"
    example (section 2.3), the counter-example of Proposition 2 (Appendix C),
    rho_bar -> infinity, and a behaviour that almost never takes the action
    the target policy prefers,
  * the mask semantics of LASER section 4.2 (1[KL < b], strict).
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from acme_impala.agent import trust_region
from acme_impala.agent import vtrace

RHO_BARS = [0.5, 1.0, 2.0, None]
SHAPES = [(1, 1, 2), (5, 3, 4), (7, 2, 9)]


# ----------------------------------------------------------------------------
# numpy reference
# ----------------------------------------------------------------------------


def _softmax(logits):
  z = logits - logits.max(axis=-1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=-1, keepdims=True)


def _reference(target_logits, behaviour_logits, rho_bar):
  """(pi~_mu [T, B, A], KL(pi || pi~_mu) [T, B]) straight from the formulas."""
  pi = _softmax(np.asarray(target_logits, np.float64))
  mu = _softmax(np.asarray(behaviour_logits, np.float64))
  if rho_bar is None:
    implied = pi
  else:
    truncated = np.minimum(rho_bar * mu, pi)
    implied = truncated / truncated.sum(axis=-1, keepdims=True)
  kl = np.sum(pi * (np.log(pi) - np.log(implied)), axis=-1)
  return implied, kl


def _logits(*probs):
  """`[1, len(probs), A]` float64 logits log p for the given distributions."""
  return np.log(np.array(probs, np.float64))[np.newaxis]


def _np(x):
  return np.asarray(x.numpy() if hasattr(x, 'numpy') else x)


# ----------------------------------------------------------------------------
# Against the reference on random logits
# ----------------------------------------------------------------------------


@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('rho_bar', RHO_BARS)
def test_matches_numpy_reference(shape, rho_bar):
  rng = np.random.RandomState(
      10 * SHAPES.index(shape) + RHO_BARS.index(rho_bar))
  target = rng.normal(scale=2.0, size=shape)
  behaviour = rng.normal(scale=2.0, size=shape)
  implied_ref, kl_ref = _reference(target, behaviour, rho_bar)

  log_implied = _np(trust_region.implied_policy_log_probs(
      target, behaviour, clip_rho_threshold=rho_bar))
  kl = _np(trust_region.kl_to_implied_policy(
      target, behaviour, clip_rho_threshold=rho_bar))

  assert log_implied.shape == shape and log_implied.dtype == np.float64
  assert kl.shape == shape[:2] and kl.dtype == np.float64
  np.testing.assert_allclose(np.exp(log_implied), implied_ref,
                             rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(np.log(implied_ref), log_implied,
                             rtol=1e-10, atol=1e-10)
  np.testing.assert_allclose(kl, kl_ref, rtol=1e-9, atol=1e-12)
  assert np.all(kl >= 0)

  for b in (1e-3, 0.1, 0.5, 2.0):
    mask = _np(trust_region.relevance_mask(
        target, behaviour, kl_threshold=b, clip_rho_threshold=rho_bar))
    assert mask.shape == shape[:2] and mask.dtype == np.float64
    expected = (kl_ref < b).astype(np.float64)
    away_from_b = np.abs(kl_ref - b) > 1e-9
    np.testing.assert_array_equal(mask[away_from_b], expected[away_from_b])
    assert set(np.unique(mask)) <= {0.0, 1.0}


def test_float32_large_logits_stable():
  # Logit gaps of ~100 make some probabilities ~1e-40, below float32's normal
  # range: in probability space min(mu, pi) / sum would underflow, the log-
  # space computation must stay finite and match the float64 reference.
  rng = np.random.RandomState(0)
  target = rng.normal(scale=15.0, size=(6, 4, 5)).astype(np.float32)
  behaviour = rng.normal(scale=15.0, size=(6, 4, 5)).astype(np.float32)
  for rho_bar in (0.5, 1.0, 2.0):
    implied_ref, kl_ref = _reference(target, behaviour, rho_bar)
    log_implied = _np(trust_region.implied_policy_log_probs(
        target, behaviour, rho_bar))
    kl = _np(trust_region.kl_to_implied_policy(target, behaviour, rho_bar))
    assert log_implied.dtype == np.float32 and kl.dtype == np.float32
    assert np.all(np.isfinite(log_implied)) and np.all(np.isfinite(kl))
    np.testing.assert_allclose(log_implied, np.log(implied_ref),
                               rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(kl, kl_ref, rtol=1e-4, atol=1e-4)
    assert np.all(kl >= 0)


# ----------------------------------------------------------------------------
# Hand-worked cases
# ----------------------------------------------------------------------------


@pytest.mark.parametrize('rho_bar', RHO_BARS)
def test_on_policy_kl_zero_and_relevant(rho_bar):
  # pi = mu: min(rho_bar pi, pi) = min(rho_bar, 1) * pi, which normalises back
  # to pi for every rho_bar (also rho_bar = 0.5 < 1). So pi~ = pi, KL = 0 and
  # the step is kept for any b > 0.
  logits = np.random.RandomState(1).normal(size=(4, 3, 6))
  log_implied = _np(trust_region.implied_policy_log_probs(
      logits, logits, rho_bar))
  np.testing.assert_allclose(log_implied, _np(tf.nn.log_softmax(logits)),
                             atol=1e-12)
  kl = _np(trust_region.kl_to_implied_policy(logits, logits, rho_bar))
  np.testing.assert_allclose(kl, 0.0, atol=1e-12)
  mask = _np(trust_region.relevance_mask(logits, logits, 1e-8, rho_bar))
  np.testing.assert_array_equal(mask, np.ones((4, 3)))


@pytest.mark.parametrize(
    'rho_bar, implied, kl',
    [
        # pi = (0.8, 0.2), mu = (0.2, 0.8) (LASER section 2.3 with phi = 0.2).
        # rho_bar = 1: min(mu, pi) = (0.2, 0.2) -> pi~ = (1/2, 1/2), "uniform
        #   rather than resembling pi". KL = 0.8 ln(0.8/0.5) + 0.2 ln(0.2/0.5)
        #   = 0.8 * 0.4700036 - 0.2 * 0.9162907 = 0.1927448 (= ln 2 - H(pi)).
        (1.0, (0.5, 0.5), 0.8 * math.log(1.6) + 0.2 * math.log(0.4)),
        # rho_bar = 2: min((0.4, 1.6), (0.8, 0.2)) = (0.4, 0.2) -> pi~ =
        #   (2/3, 1/3). KL = 0.8 ln 1.2 + 0.2 ln 0.6 = 0.1458575 - 0.1021651
        #   = 0.0436921: less truncation, less bias.
        (2.0, (2 / 3, 1 / 3), 0.8 * math.log(1.2) + 0.2 * math.log(0.6)),
        # rho_bar = 0.5: min((0.1, 0.4), (0.8, 0.2)) = (0.1, 0.2) -> pi~ =
        #   (1/3, 2/3), the preference is even reversed.
        #   KL = 0.8 ln 2.4 + 0.2 ln 0.3 = 0.7003754 - 0.2407946 = 0.4595808.
        (0.5, (1 / 3, 2 / 3), 0.8 * math.log(2.4) + 0.2 * math.log(0.3)),
        # rho_bar -> inf: pi~ = pi, KL = 0 (naive importance sampling).
        (None, (0.8, 0.2), 0.0),
    ])
def test_mirror_image_two_actions(rho_bar, implied, kl):
  target = _logits((0.8, 0.2))
  behaviour = _logits((0.2, 0.8))
  np.testing.assert_allclose(
      np.exp(_np(trust_region.implied_policy_log_probs(
          target, behaviour, rho_bar)))[0, 0], implied, rtol=1e-12)
  np.testing.assert_allclose(
      _np(trust_region.kl_to_implied_policy(target, behaviour, rho_bar)),
      [[kl]], rtol=1e-12, atol=1e-15)


def test_mirror_image_numbers_spelled_out():
  kls = _np(trust_region.kl_to_implied_policy(
      _logits((0.8, 0.2)), _logits((0.2, 0.8)), 1.0))
  np.testing.assert_allclose(kls, [[0.1927448]], atol=1e-7)
  kls = _np(trust_region.kl_to_implied_policy(
      _logits((0.8, 0.2)), _logits((0.2, 0.8)), 2.0))
  np.testing.assert_allclose(kls, [[0.0436921]], atol=1e-7)


def test_mirror_image_paper_limit():
  # LASER section 2.3: mu = (phi, 1 - phi), pi = (1 - phi, phi). With
  # rho_bar = 1, min(mu, pi) = (phi, phi) for both actions (phi < 1/2), so pi~
  # is uniform for every phi, and KL(pi || uniform) = ln 2 - H(pi), which
  # tends to ln 2 as phi -> 0: the more focused (and more different) the two
  # policies, the larger the bias V-trace incurs.
  phis = np.array([0.4, 0.2, 0.01, 1e-4, 1e-8])
  target = _logits(*[(1 - p, p) for p in phis])
  behaviour = _logits(*[(p, 1 - p) for p in phis])
  implied = np.exp(_np(trust_region.implied_policy_log_probs(
      target, behaviour)))
  np.testing.assert_allclose(implied, 0.5, rtol=1e-12)
  entropy = -(phis * np.log(phis) + (1 - phis) * np.log1p(-phis))
  kl = _np(trust_region.kl_to_implied_policy(target, behaviour))[0]
  np.testing.assert_allclose(kl, math.log(2) - entropy, rtol=1e-10)
  assert np.all(np.diff(kl) > 0)
  assert kl[-1] == pytest.approx(math.log(2), abs=1e-6)


def test_proposition_2_counter_example():
  # LASER Appendix C, proof of Proposition 2: two actions, Q* = (2, 5),
  # mu = (0.9, 0.1), pi = (0.5, 0.5), rho_bar = 1. "Abusing notation
  # mu/pi = (1.8, 0.2)", so omega = min(1, rho_bar mu/pi) = (1, 0.2) and the
  # implied state-action values are Q^omega = (2 * 1, 5 * 0.2) = (2, 1):
  # "pi~* = (1, 0) wrongly selects the first action" although the second
  # (return 5) is optimal.
  #
  # The implied policy encodes the same distortion: min(mu, pi) = (0.5, 0.1),
  # Z = 0.6, pi~ = (5/6, 1/6), and omega(a) = min(pi, rho_bar mu) / pi
  # = Z pi~(a) / pi(a) = (0.6 * (5/6) / 0.5, 0.6 * (1/6) / 0.5) = (1, 0.2).
  # KL(pi || pi~) = 0.5 ln(0.5 / (5/6)) + 0.5 ln(0.5 / (1/6))
  #              = 0.5 ln 0.6 + 0.5 ln 3 = 0.5 ln 1.8 = 0.2938933.
  q_star = np.array([2.0, 5.0])
  pi = np.array([0.5, 0.5])
  target, behaviour = _logits((0.5, 0.5)), _logits((0.9, 0.1))

  implied = np.exp(_np(trust_region.implied_policy_log_probs(
      target, behaviour, 1.0)))[0, 0]
  np.testing.assert_allclose(implied, [5 / 6, 1 / 6], rtol=1e-12)
  omega = 0.6 * implied / pi
  np.testing.assert_allclose(omega, [1.0, 0.2], rtol=1e-12)
  q_omega = q_star * omega
  np.testing.assert_allclose(q_omega, [2.0, 1.0], rtol=1e-12)
  # The property the paper states: the distorted values pick the wrong action.
  assert np.argmax(q_star) == 1 and np.argmax(q_omega) == 0

  kl = _np(trust_region.kl_to_implied_policy(target, behaviour, 1.0))
  np.testing.assert_allclose(kl, [[0.5 * math.log(1.8)]], rtol=1e-12)
  np.testing.assert_allclose(kl, [[0.2938933]], atol=1e-7)
  # The trust region rejects this behaviour for b below 0.2939 and keeps it
  # above.
  assert _np(trust_region.relevance_mask(target, behaviour, 0.25))[0, 0] == 0
  assert _np(trust_region.relevance_mask(target, behaviour, 0.30))[0, 0] == 1

  # rho_bar -> infinity (naive importance sampling): omega = 1, pi~ = pi, so
  # the argmax is preserved and the KL vanishes.
  implied_is = np.exp(_np(trust_region.implied_policy_log_probs(
      target, behaviour, None)))[0, 0]
  np.testing.assert_allclose(implied_is, pi, rtol=1e-12)
  assert np.argmax(q_star * 1.0 * implied_is / pi) == 1
  assert _np(trust_region.kl_to_implied_policy(target, behaviour, None)) == 0


@pytest.mark.parametrize('untruncated', [None, float('inf')])
def test_no_truncation_gives_target_policy(untruncated):
  # rho_bar -> infinity: min(rho_bar mu, pi) = pi wherever mu > 0, so pi~ = pi
  # and KL = 0 for any behaviour, however far from pi (here logits of scale
  # 10 and a behaviour that never takes action 0).
  rng = np.random.RandomState(2)
  target = rng.normal(scale=10.0, size=(3, 4, 5))
  behaviour = rng.normal(scale=10.0, size=(3, 4, 5))
  behaviour[..., 0] = -np.inf
  log_implied = _np(trust_region.implied_policy_log_probs(
      target, behaviour, untruncated))
  np.testing.assert_array_equal(log_implied, _np(tf.nn.log_softmax(target)))
  kl = _np(trust_region.kl_to_implied_policy(target, behaviour, untruncated))
  np.testing.assert_array_equal(kl, np.zeros((3, 4)))
  mask = _np(trust_region.relevance_mask(target, behaviour, 1e-12,
                                         untruncated))
  np.testing.assert_array_equal(mask, np.ones((3, 4)))


def test_rare_behaviour_action_gives_large_kl_and_is_masked():
  # pi = (0.9, 0.1) prefers action 0, which mu = (1e-6, 1 - 1e-6) almost never
  # takes. rho_bar = 1: min(mu, pi) = (1e-6, 0.1), Z = 0.100001,
  # pi~ = (1e-6 / Z, 0.1 / Z) ~= (1e-5, 0.99999).
  # KL = 0.9 ln(0.9 Z / 1e-6) + 0.1 ln(0.1 Z / 0.1)
  #    = 0.9 ln(90000.9) + 0.1 ln(0.100001)
  #    = 0.9 * 11.4075838 - 0.1 * 2.3025751 = 10.0365600.
  # Second batch entry: on-policy, KL = 0.
  z = 0.100001
  target = _logits((0.9, 0.1), (0.9, 0.1))
  behaviour = _logits((1e-6, 1 - 1e-6), (0.9, 0.1))
  implied = np.exp(_np(trust_region.implied_policy_log_probs(
      target, behaviour)))
  np.testing.assert_allclose(implied[0, 0], [1e-6 / z, 0.1 / z], rtol=1e-10)
  kl = _np(trust_region.kl_to_implied_policy(target, behaviour))
  np.testing.assert_allclose(
      kl[0, 0], 0.9 * math.log(0.9 * z / 1e-6) + 0.1 * math.log(z),
      rtol=1e-10)
  np.testing.assert_allclose(kl[0], [10.0365600, 0.0], atol=1e-6)
  np.testing.assert_array_equal(
      _np(trust_region.relevance_mask(target, behaviour, 1.0)), [[0.0, 1.0]])
  np.testing.assert_array_equal(
      _np(trust_region.relevance_mask(target, behaviour, 10.1)), [[1.0, 1.0]])


def test_zero_behaviour_probability_gives_infinite_kl():
  # mu(0) = 0 exactly while pi(0) = 0.5: pi~(0) = 0, so KL(pi || pi~) = +inf
  # and the step is rejected for every finite b. Actions with pi(a) = 0 add
  # nothing (0 * log 0 = 0), and disjoint supports (pi~ undefined) are +inf.
  target = np.array([[[0.0, 0.0], [0.0, -np.inf], [0.0, -np.inf]]])
  behaviour = np.array([[[-np.inf, 0.0], [0.0, 0.0], [-np.inf, 0.0]]])
  kl = _np(trust_region.kl_to_implied_policy(target, behaviour))
  # Middle entry: pi = (1, 0), mu = (1/2, 1/2), min = (1/2, 0), pi~ = (1, 0).
  np.testing.assert_array_equal(kl, [[np.inf, 0.0, np.inf]])
  np.testing.assert_array_equal(
      _np(trust_region.relevance_mask(target, behaviour, 1e30)),
      [[0.0, 1.0, 0.0]])


# ----------------------------------------------------------------------------
# Mask semantics and argument validation
# ----------------------------------------------------------------------------


def test_mask_threshold_is_strict():
  # Mirror example, float32: KL = 0.1927448 (see above). b equal to the
  # computed KL rejects (KL < b is false); the next float32 above accepts.
  target = _logits((0.8, 0.2)).astype(np.float32)
  behaviour = _logits((0.2, 0.8)).astype(np.float32)
  kl = _np(trust_region.kl_to_implied_policy(target, behaviour))[0, 0]
  assert kl.dtype == np.float32 and kl == pytest.approx(0.1927448, abs=1e-6)
  at = _np(trust_region.relevance_mask(target, behaviour, kl))
  above = _np(trust_region.relevance_mask(
      target, behaviour, np.nextafter(kl, np.float32(np.inf))))
  below = _np(trust_region.relevance_mask(
      target, behaviour, np.nextafter(kl, np.float32(0))))
  assert at.dtype == np.float32
  np.testing.assert_array_equal(at, [[0.0]])
  np.testing.assert_array_equal(above, [[1.0]])
  np.testing.assert_array_equal(below, [[0.0]])
  # A tensor threshold works the same way.
  np.testing.assert_array_equal(
      _np(trust_region.relevance_mask(target, behaviour,
                                      tf.constant(0.2, tf.float32))), [[1.0]])


def test_none_threshold_gives_ones():
  # No trust region: every step is relevant, even an infinite-KL one.
  target = np.array([[[0.0, 0.0]], [[1.0, 2.0]]], np.float32)
  behaviour = np.array([[[-np.inf, 0.0]], [[2.0, 1.0]]], np.float32)
  mask = trust_region.relevance_mask(target, behaviour, None)
  assert mask.shape == (2, 1) and mask.dtype == tf.float32
  np.testing.assert_array_equal(_np(mask), np.ones((2, 1)))


@pytest.mark.parametrize('bad', [0.0, -1.0, float('nan'), -0.5])
def test_invalid_threshold_raises(bad):
  logits = np.zeros((2, 3, 4))
  with pytest.raises(ValueError, match=r'kl_threshold.*> 0.*got'):
    trust_region.relevance_mask(logits, logits, bad)
  with pytest.raises(ValueError, match='kl_threshold') as info:
    trust_region.relevance_mask(logits, logits, tf.constant(bad))
  assert str(bad) in str(info.value)


def test_invalid_threshold_shape_and_rho_bar_raise():
  logits = np.zeros((2, 3, 4))
  with pytest.raises(ValueError, match='kl_threshold.*rank 0'):
    trust_region.relevance_mask(logits, logits, [0.1, 0.2])
  for fn in (trust_region.implied_policy_log_probs,
             trust_region.kl_to_implied_policy):
    for bad in (0.0, -2.0):
      with pytest.raises(ValueError, match=r'clip_rho_threshold.*> 0.*got'):
        fn(logits, logits, bad)
  with pytest.raises(ValueError, match='clip_rho_threshold'):
    trust_region.relevance_mask(logits, logits, 0.1, clip_rho_threshold=0.0)


@pytest.mark.parametrize('fn_name', ['implied_policy_log_probs',
                                     'kl_to_implied_policy',
                                     'relevance_mask'])
def test_rank_errors_name_the_argument(fn_name):
  fn = getattr(trust_region, fn_name)
  args = (0.1,) if fn_name == 'relevance_mask' else ()
  good = np.zeros((2, 3, 4))
  with pytest.raises(ValueError, match='`target_logits` must have rank 3'):
    fn(np.zeros((2, 3)), good, *args)
  with pytest.raises(ValueError, match='`behaviour_logits` must have rank 3'):
    fn(good, np.zeros((2, 3, 4, 1)), *args)
  with pytest.raises(ValueError, match='same shape'):
    fn(good, np.zeros((2, 3, 5)), *args)
  # Unknown rank (no static shape information) is rejected too.
  unknown = tf.function(
      lambda x: fn(x, x, *args),
      input_signature=[tf.TensorSpec(None, tf.float32)])
  with pytest.raises(ValueError, match='`target_logits`.*unknown rank'):
    unknown.get_concrete_function()


# ----------------------------------------------------------------------------
# Compilation, gradients, integration
# ----------------------------------------------------------------------------


@pytest.mark.parametrize('rho_bar', [1.0, None])
def test_jit_compile_matches_eager(rho_bar):
  rng = np.random.RandomState(3)
  target = rng.normal(scale=2.0, size=(6, 5, 7)).astype(np.float32)
  behaviour = rng.normal(scale=2.0, size=(6, 5, 7)).astype(np.float32)

  def all_three(t, b):
    return (trust_region.implied_policy_log_probs(t, b, rho_bar),
            trust_region.kl_to_implied_policy(t, b, rho_bar),
            trust_region.relevance_mask(t, b, 0.3, rho_bar))

  eager = [_np(x) for x in all_three(target, behaviour)]
  jitted = [_np(x) for x in tf.function(all_three, jit_compile=True)(
      tf.constant(target), tf.constant(behaviour))]
  np.testing.assert_allclose(jitted[0], eager[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(jitted[1], eager[1], rtol=1e-5, atol=1e-6)
  if rho_bar is not None:
    # Some steps on each side of b, none at a rounding distance from it.
    assert 0 < eager[2].sum() < eager[2].size
    assert np.min(np.abs(eager[1] - 0.3)) > 1e-4
  np.testing.assert_array_equal(jitted[2], eager[2])


def test_jit_compile_with_tensor_thresholds():
  # Thresholds passed as (run-time) tensors compile too.
  rng = np.random.RandomState(4)
  target = tf.constant(rng.normal(size=(3, 2, 4)), tf.float32)
  behaviour = tf.constant(rng.normal(size=(3, 2, 4)), tf.float32)
  fn = tf.function(trust_region.relevance_mask, jit_compile=True)
  mask = fn(target, behaviour, tf.constant(0.05), tf.constant(1.0))
  np.testing.assert_array_equal(
      _np(mask), _np(trust_region.relevance_mask(target, behaviour, 0.05)))


def test_no_gradient_through_kl_or_mask():
  rng = np.random.RandomState(5)
  target = tf.Variable(rng.normal(size=(3, 2, 4)))
  behaviour = tf.Variable(rng.normal(size=(3, 2, 4)))
  with tf.GradientTape(persistent=True) as tape:
    kl = trust_region.kl_to_implied_policy(target, behaviour)
    mask = trust_region.relevance_mask(target, behaviour, 0.1)
    log_implied = trust_region.implied_policy_log_probs(target, behaviour)
    kl_loss = tf.reduce_sum(kl)
    mask_loss = tf.reduce_sum(mask)
    implied_loss = tf.reduce_sum(log_implied * tf.exp(log_implied))
  assert tape.gradient(kl_loss, [target, behaviour]) == [None, None]
  assert tape.gradient(mask_loss, [target, behaviour]) == [None, None]
  # The implied policy itself stays differentiable (documented).
  assert tape.gradient(implied_loss, target) is not None
  del tape


def test_mask_feeds_masked_vtrace():
  # Step t = 1 has a behaviour that almost never takes pi's preferred action
  # (KL ~ 10, rejected with b = 1); the others are on-policy (kept). In the
  # masked V-trace (LASER eq. 8) the rejected step's target is its own value
  # and no trace passes through it.
  t_len = 3
  pi = np.array([0.9, 0.1])
  target = np.log(np.tile(pi, (t_len, 1, 1)))
  behaviour = target.copy()
  behaviour[1, 0] = np.log([1e-6, 1 - 1e-6])
  mask = trust_region.relevance_mask(target, behaviour, 1.0)
  np.testing.assert_array_equal(_np(mask), [[1.0], [0.0], [1.0]])
  values = np.array([[1.0], [2.0], [3.0]])
  out = vtrace.vtrace_from_logits(
      behaviour_policy_logits=behaviour, target_policy_logits=target,
      actions=np.zeros((t_len, 1), np.int32),
      discounts=np.full((t_len, 1), 0.9), rewards=np.ones((t_len, 1)),
      values=values, bootstrap_value=np.array([4.0]), relevance_mask=mask)
  vs = _np(out.vs)
  # t = 2: on-policy one-step target 1 + 0.9 * 4 = 4.6.
  # t = 1: rejected, v_1 = V(x_1) = 2.
  # t = 0: on-policy, trace cut at t = 1: 1 + 0.9 * V(x_1) = 2.8.
  np.testing.assert_allclose(vs[:, 0], [2.8, 2.0, 4.6], rtol=1e-12)
