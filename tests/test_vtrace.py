"""Tests for acme_impala.agent.vtrace.

The implementation is checked against
  * trfl's V-trace (where trfl applies: c_bar = 1, lambda = 1, no mask),
  * a brute-force numpy evaluation of IMPALA eq. (1) / LASER eq. (8) written
    as the explicit double sum (not the recursion of Remark 1),
  * hand-worked numbers and the on-policy n-step Bellman target, eq. (2).
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf
import trfl

from acme_impala.agent import vtrace

SHAPES = [(1, 1), (5, 3), (20, 32), (100, 4)]


def _random_inputs(shape, seed, with_mask=False, terminal_prob=0.1):
  rng = np.random.RandomState(seed)
  t, b = shape
  inputs = dict(
      # Wide enough that ratios fall on both sides of every threshold used.
      log_rhos=rng.uniform(-2.0, 2.0, size=shape),
      discounts=0.97 * (rng.uniform(size=shape) > terminal_prob),
      rewards=rng.normal(size=shape),
      values=rng.normal(size=shape),
      bootstrap_value=rng.normal(size=(b,)),
  )
  if with_mask:
    inputs['relevance_mask'] = (rng.uniform(size=shape) > 0.25).astype(
        np.float64)
  del t
  return inputs


def _as_float32(inputs):
  return {k: np.asarray(v, np.float32) for k, v in inputs.items()}


def _clip(x, threshold):
  return x if threshold is None else np.minimum(threshold, x)


def _bruteforce_vtrace(log_rhos, discounts, rewards, values, bootstrap_value,
                       clip_rho_threshold=1.0, clip_c_threshold=1.0,
                       clip_pg_rho_threshold=1.0, lambda_=1.0,
                       relevance_mask=None):
  """IMPALA eq. (1) with per-step discounts and LASER's mask, eq. (8).

  v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i)
                                 (prod_{i=s}^{t-1} m_i c_i) m_t rho_t delta_t.
  """
  t_len, _ = log_rhos.shape
  ratios = np.exp(log_rhos)
  rhos = _clip(ratios, clip_rho_threshold)
  cs = lambda_ * _clip(ratios, clip_c_threshold)
  pg_rhos = _clip(ratios, clip_pg_rho_threshold)
  mask = (np.ones_like(log_rhos) if relevance_mask is None
          else relevance_mask)
  values_ext = np.concatenate([values, bootstrap_value[None]], axis=0)
  deltas = rewards + discounts * values_ext[1:] - values

  vs = np.array(values, dtype=np.float64)
  for s in range(t_len):
    for t in range(s, t_len):
      discount_product = np.prod(discounts[s:t], axis=0)
      trace_product = np.prod(mask[s:t] * cs[s:t], axis=0)
      vs[s] += (discount_product * trace_product *
                mask[t] * rhos[t] * deltas[t])
  vs_ext = np.concatenate([vs, bootstrap_value[None]], axis=0)
  pg_advantages = mask * pg_rhos * (
      rewards + discounts * vs_ext[1:] - values)
  return vs, pg_advantages


# Comparison with trfl.


@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('clip_rho_threshold,clip_pg_rho_threshold',
                         [(1.0, 1.0), (None, None), (3.7, 2.2), (1.0, None),
                          (None, 0.5)])
def test_matches_trfl(shape, clip_rho_threshold, clip_pg_rho_threshold):
  inputs = _as_float32(_random_inputs(shape, seed=sum(shape)))
  expected = trfl.vtrace_from_importance_weights(
      clip_rho_threshold=clip_rho_threshold,
      clip_pg_rho_threshold=clip_pg_rho_threshold, **inputs)
  actual = vtrace.vtrace_from_importance_weights(
      clip_rho_threshold=clip_rho_threshold,
      clip_c_threshold=1.0,
      clip_pg_rho_threshold=clip_pg_rho_threshold,
      lambda_=1.0, **inputs)
  assert actual.vs.dtype == tf.float32
  np.testing.assert_allclose(actual.vs, expected.vs, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(actual.pg_advantages, expected.pg_advantages,
                             rtol=1e-5, atol=1e-5)


def test_vtrace_from_logits_matches_trfl():
  rng = np.random.RandomState(7)
  t, b, a = 12, 5, 4
  behaviour_logits = rng.normal(size=(t, b, a)).astype(np.float32)
  target_logits = rng.normal(size=(t, b, a)).astype(np.float32)
  actions = rng.randint(0, a, size=(t, b)).astype(np.int32)
  others = _as_float32(_random_inputs((t, b), seed=3))
  del others['log_rhos']
  expected = trfl.vtrace_from_logits(
      behaviour_policy_logits=behaviour_logits,
      target_policy_logits=target_logits, actions=actions,
      clip_rho_threshold=2.0, clip_pg_rho_threshold=1.5, **others)
  actual = vtrace.vtrace_from_logits(
      behaviour_policy_logits=behaviour_logits,
      target_policy_logits=target_logits, actions=actions,
      clip_rho_threshold=2.0, clip_c_threshold=1.0,
      clip_pg_rho_threshold=1.5, **others)
  assert actual._fields == expected._fields
  for field in expected._fields:
    np.testing.assert_allclose(getattr(actual, field),
                               getattr(expected, field),
                               rtol=1e-5, atol=1e-5, err_msg=field)


def test_log_probs_from_logits_and_actions():
  logits = np.log(np.array([[[0.2, 0.3, 0.5]], [[0.6, 0.3, 0.1]]]))
  actions = np.array([[2], [0]])
  log_probs = vtrace.log_probs_from_logits_and_actions(logits, actions)
  np.testing.assert_allclose(log_probs, np.log([[0.5], [0.6]]), rtol=1e-6)


# Brute force evaluation of eq. (1) / eq. (8).

_THRESHOLDS = [
    # (rho_bar, c_bar, pg_rho_bar)
    (1.0, 1.0, 1.0),
    (1.0, 0.5, 1.0),
    (2.0, 2.0, 1.0),
    (4.0, 2.0, None),
    (None, None, None),
    (0.8, 0.5, 2.0),
]


@pytest.mark.parametrize(
    'shape,thresholds,lambda_,with_mask',
    [(shape, thresholds, lambda_, with_mask)
     for shape, thresholds, lambda_, with_mask in itertools.product(
         SHAPES, _THRESHOLDS, [0.0, 0.5, 1.0], [False, True])
     # The long unroll is the slow part of the brute force: sample it.
     if shape != (100, 4) or (thresholds[1] in (0.5, 2.0) and with_mask)])
def test_matches_bruteforce_equation_1(shape, thresholds, lambda_, with_mask):
  clip_rho_threshold, clip_c_threshold, clip_pg_rho_threshold = thresholds
  inputs = _random_inputs(shape, seed=11 * shape[0] + shape[1],
                          with_mask=with_mask)
  kwargs = dict(clip_rho_threshold=clip_rho_threshold,
                clip_c_threshold=clip_c_threshold,
                clip_pg_rho_threshold=clip_pg_rho_threshold,
                lambda_=lambda_)
  expected_vs, expected_pg = _bruteforce_vtrace(**inputs, **kwargs)
  # float64 inputs run the implementation in float64: tight tolerances.
  actual = vtrace.vtrace_from_importance_weights(**inputs, **kwargs)
  assert actual.vs.dtype == tf.float64
  np.testing.assert_allclose(actual.vs, expected_vs, rtol=1e-10, atol=1e-10)
  np.testing.assert_allclose(actual.pg_advantages, expected_pg, rtol=1e-10,
                             atol=1e-10)


def test_relevance_mask_semantics():
  inputs = _random_inputs((6, 3), seed=5, with_mask=False, terminal_prob=0.)
  mask = np.ones((6, 3))
  mask[2, 0] = 0.
  mask[5, 1] = 0.
  out = vtrace.vtrace_from_importance_weights(relevance_mask=mask, **inputs)
  vs, pg = out.vs.numpy(), out.pg_advantages.numpy()
  # A masked step's own target is its value and it has no advantage.
  np.testing.assert_allclose(vs[2, 0], inputs['values'][2, 0])
  np.testing.assert_allclose(vs[5, 1], inputs['values'][5, 1])
  assert pg[2, 0] == 0. and pg[5, 1] == 0.
  # Traces are cut: steps before a masked step do not see anything after it.
  changed = dict(inputs)
  changed['rewards'] = inputs['rewards'].copy()
  changed['rewards'][2:, 0] += 100.
  changed['values'] = inputs['values'].copy()
  changed['values'][3:, 0] -= 50.
  out2 = vtrace.vtrace_from_importance_weights(relevance_mask=mask, **changed)
  np.testing.assert_allclose(out2.vs[:2, 0], vs[:2, 0], rtol=1e-12)
  np.testing.assert_allclose(out2.pg_advantages[:2, 0], pg[:2, 0],
                             rtol=1e-12)
  # Padding at masked steps (inf ratios, NaN rewards) does not leak.
  padded = dict(inputs)
  padded['log_rhos'] = inputs['log_rhos'].copy()
  padded['log_rhos'][2, 0] = 1e4
  padded['rewards'] = inputs['rewards'].copy()
  padded['rewards'][2, 0] = np.nan
  out3 = vtrace.vtrace_from_importance_weights(relevance_mask=mask, **padded)
  np.testing.assert_allclose(out3.vs, vs, rtol=1e-12)
  np.testing.assert_allclose(out3.pg_advantages, pg, rtol=1e-12)


# On-policy and hand-worked cases.


def test_on_policy_is_n_step_bellman_target():
  t_len, b = 7, 3
  gamma = 0.9
  inputs = _random_inputs((t_len, b), seed=2)
  inputs['log_rhos'] = np.zeros((t_len, b))
  inputs['discounts'] = np.full((t_len, b), gamma)
  rewards, bootstrap = inputs['rewards'], inputs['bootstrap_value']
  # Eq. (2): v_s = sum_{t=s}^{T-1} gamma^{t-s} r_t + gamma^{T-s} V(x_T).
  expected = np.stack([
      sum(gamma**(t - s) * rewards[t] for t in range(s, t_len)) +
      gamma**(t_len - s) * bootstrap for s in range(t_len)])
  out = vtrace.vtrace_from_importance_weights(**inputs)
  np.testing.assert_allclose(out.vs, expected, rtol=1e-12)
  # And the advantage is the one-step-ahead n-step return minus V(x_s).
  vs_tp1 = np.concatenate([expected[1:], bootstrap[None]])
  np.testing.assert_allclose(
      out.pg_advantages, rewards + gamma * vs_tp1 - inputs['values'],
      rtol=1e-12)


def test_hand_worked_on_policy():
  # T=2, B=1, gamma=0.9, r=(1, 2), V=(0.5, 1.5), V(x_2)=3.
  #   v_1 = 2 + 0.9 * 3                 = 4.7
  #   v_0 = 1 + 0.9 * 2 + 0.81 * 3      = 5.23
  #   A_0 = 1 + 0.9 * 4.7 - 0.5         = 4.73
  #   A_1 = 2 + 0.9 * 3 - 1.5           = 3.2
  out = vtrace.vtrace_from_importance_weights(
      log_rhos=[[0.], [0.]], discounts=[[0.9], [0.9]], rewards=[[1.], [2.]],
      values=[[0.5], [1.5]], bootstrap_value=[3.])
  np.testing.assert_allclose(out.vs, [[5.23], [4.7]], rtol=1e-6)
  np.testing.assert_allclose(out.pg_advantages, [[4.73], [3.2]], rtol=1e-6)


def test_hand_worked_off_policy():
  # Same trajectory with pi/mu = (2, 0.5), rho_bar = c_bar = 1:
  #   rho = c = (1, 0.5); delta_0 = 1 + 0.9*1.5 - 0.5 = 1.85,
  #   delta_1 = 2 + 0.9*3 - 1.5 = 3.2
  #   v_1 = 1.5 + 0.5 * 3.2                    = 3.1
  #   v_0 = 0.5 + 1.85 + 0.9 * 1 * (0.5 * 3.2) = 3.79
  #   A_0 = 1 * (1 + 0.9 * 3.1 - 0.5)          = 3.29
  #   A_1 = 0.5 * (2 + 0.9 * 3 - 1.5)          = 1.6
  out = vtrace.vtrace_from_importance_weights(
      log_rhos=np.log([[2.], [0.5]]), discounts=[[0.9], [0.9]],
      rewards=[[1.], [2.]], values=[[0.5], [1.5]], bootstrap_value=[3.])
  np.testing.assert_allclose(out.vs, [[3.79], [3.1]], rtol=1e-6)
  np.testing.assert_allclose(out.pg_advantages, [[3.29], [1.6]], rtol=1e-6)
  # lambda = 0 gives one-step targets: v_0 = 0.5 + 1.85, v_1 = 3.1.
  out = vtrace.vtrace_from_importance_weights(
      log_rhos=np.log([[2.], [0.5]]), discounts=[[0.9], [0.9]],
      rewards=[[1.], [2.]], values=[[0.5], [1.5]], bootstrap_value=[3.],
      lambda_=0.)
  np.testing.assert_allclose(out.vs, [[2.35], [3.1]], rtol=1e-6)


def test_zero_discount_stops_bootstrapping():
  gamma = 0.9
  inputs = _random_inputs((5, 2), seed=9)
  inputs['log_rhos'] = np.zeros((5, 2))
  inputs['discounts'] = np.full((5, 2), gamma)
  inputs['discounts'][1, :] = 0.  # The episode ends after step 1.
  out = vtrace.vtrace_from_importance_weights(**inputs)
  r = inputs['rewards']
  np.testing.assert_allclose(out.vs[1], r[1], rtol=1e-12)
  np.testing.assert_allclose(out.vs[0], r[0] + gamma * r[1], rtol=1e-12)
  # Nothing from the next episode reaches back across the boundary.
  changed = dict(inputs)
  changed['rewards'] = r.copy()
  changed['rewards'][2:] += 10.
  changed['values'] = inputs['values'] + 10.
  changed['values'][:2] = inputs['values'][:2]
  changed['bootstrap_value'] = inputs['bootstrap_value'] - 7.
  out2 = vtrace.vtrace_from_importance_weights(**changed)
  np.testing.assert_allclose(out2.vs[:2], out.vs[:2], rtol=1e-12)
  np.testing.assert_allclose(out2.pg_advantages[:2], out.pg_advantages[:2],
                             rtol=1e-12)


# Compilation, gradients and errors.


def test_jit_compile_matches_eager():
  inputs = _as_float32(_random_inputs((20, 8), seed=4, with_mask=True))
  kwargs = dict(clip_rho_threshold=2.0, clip_c_threshold=0.5,
                clip_pg_rho_threshold=1.5, lambda_=0.9)

  @tf.function(jit_compile=True)
  def compiled(inputs):
    return vtrace.vtrace_from_importance_weights(**inputs, **kwargs)

  expected = vtrace.vtrace_from_importance_weights(**inputs, **kwargs)
  actual = compiled({k: tf.constant(v) for k, v in inputs.items()})
  np.testing.assert_allclose(actual.vs, expected.vs, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(actual.pg_advantages, expected.pg_advantages,
                             rtol=1e-5, atol=1e-6)


def test_jit_compile_from_logits():
  rng = np.random.RandomState(0)
  t, b, a = 10, 4, 3
  args = dict(
      behaviour_policy_logits=rng.normal(size=(t, b, a)).astype(np.float32),
      target_policy_logits=rng.normal(size=(t, b, a)).astype(np.float32),
      actions=rng.randint(0, a, size=(t, b)).astype(np.int32),
      discounts=np.full((t, b), 0.99, np.float32),
      rewards=rng.normal(size=(t, b)).astype(np.float32),
      values=rng.normal(size=(t, b)).astype(np.float32),
      bootstrap_value=rng.normal(size=(b,)).astype(np.float32))
  compiled = tf.function(vtrace.vtrace_from_logits, jit_compile=True)
  actual = compiled(**{k: tf.constant(v) for k, v in args.items()})
  expected = vtrace.vtrace_from_logits(**args)
  for field in expected._fields:
    np.testing.assert_allclose(getattr(actual, field),
                               getattr(expected, field), rtol=1e-5,
                               atol=1e-6, err_msg=field)


def test_outputs_are_gradient_stopped():
  inputs = _as_float32(_random_inputs((4, 2), seed=1))
  values = tf.Variable(inputs.pop('values'))
  with tf.GradientTape(persistent=True) as tape:
    out = vtrace.vtrace_from_importance_weights(values=values, **inputs)
    vs_sum = tf.reduce_sum(out.vs)
    pg_sum = tf.reduce_sum(out.pg_advantages)
  assert tape.gradient(vs_sum, values) is None
  assert tape.gradient(pg_sum, values) is None


@pytest.mark.parametrize('arg,bad_value,message', [
    ('values', np.zeros(5), 'values'),
    ('rewards', np.zeros((5, 3, 1, 1)), 'rewards'),
    ('discounts', np.zeros(5), 'discounts'),
    ('bootstrap_value', np.zeros((5, 3)), 'bootstrap_value'),
    ('relevance_mask', np.ones(3), 'relevance_mask'),
    ('log_rhos', np.zeros(5), 'log_rhos'),
    ('clip_rho_threshold', np.ones(2), 'clip_rho_threshold'),
    ('clip_c_threshold', np.ones(2), 'clip_c_threshold'),
    ('lambda_', np.ones(2), 'lambda_'),
])
def test_bad_ranks_raise(arg, bad_value, message):
  inputs = _random_inputs((5, 3), seed=0)
  inputs[arg] = bad_value
  with pytest.raises(ValueError, match=message):
    vtrace.vtrace_from_importance_weights(**inputs)


def test_bad_logits_ranks_raise():
  logits = np.zeros((5, 3, 4), np.float32)
  kwargs = dict(discounts=np.ones((5, 3)), rewards=np.ones((5, 3)),
                values=np.ones((5, 3)), bootstrap_value=np.ones(3))
  with pytest.raises(ValueError, match='target_policy_logits'):
    vtrace.vtrace_from_logits(logits, logits[..., 0],
                              np.zeros((5, 3), np.int32), **kwargs)
  with pytest.raises(ValueError, match='actions'):
    vtrace.vtrace_from_logits(logits, logits, np.zeros((5, 3, 1), np.int32),
                              **kwargs)
  with pytest.raises(ValueError, match='one more dimension'):
    vtrace.log_probs_from_logits_and_actions(logits, np.zeros(5, np.int32))
