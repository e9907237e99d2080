"""Tests for acme_impala.agent.losses.

Expected values are computed by hand or with the small numpy reference below,
which shares no code with the implementation.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from acme_impala.agent import losses

CORRECTIONS = losses.OFF_POLICY_CORRECTIONS
LOG2 = np.log(2.)

# clip_rewards.


def test_clip_rewards_values():
  rewards = np.array([-5., -1., -0.5, 0., 0.5, 2.], np.float32)
  np.testing.assert_allclose(losses.clip_rewards(rewards, 'none'), rewards)
  np.testing.assert_allclose(losses.clip_rewards(rewards, 'abs_one'),
                             [-1., -1., -0.5, 0., 0.5, 1.])


def test_clip_rewards_soft_asymmetric_follows_reference_code():
  """deepmind/scalable_agent experiment.py, the code behind the paper's DMLab
  results: squeezed = tanh(r / 5); clipped = where(r < 0, 0.3 * squeezed,
  squeezed) * 5, i.e. 5 tanh(r/5) for r >= 0 and 1.5 tanh(r/5) for r < 0."""
  rewards = [-10., -5., -1., -0.5, 0., 0.5, 1., 10., 100.]
  expected = [
      1.5 * math.tanh(-2.),   # -1.4460414
      1.5 * math.tanh(-1.),   # -1.1423912
      1.5 * math.tanh(-0.2),  # -0.2960630
      1.5 * math.tanh(-0.1),  # -0.1495020
      0.,
      5. * math.tanh(0.1),    # 0.4983400
      5. * math.tanh(0.2),    # 0.9868766
      5. * math.tanh(2.),     # 4.8201379
      5.,                     # 5 tanh(20) == 5 in float32.
  ]
  got = losses.clip_rewards(np.array(rewards, np.float32), 'soft_asymmetric')
  np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
  # A few of the same values written out, in case of a slip above.
  np.testing.assert_allclose(got.numpy()[[0, 2, 6, 7]],
                             [-1.4460414, -0.2960630, 0.9868766, 4.8201379],
                             rtol=1e-6)
  # Not the formula in the caption of Figure D.1, which would give
  # 0.3 tanh(-1) = -0.2284783 at r = -1 and 5 tanh(1) = 3.8079708 at r = 1.
  assert abs(got.numpy()[2] - 0.3 * math.tanh(-1.)) > 0.05
  assert abs(got.numpy()[6] - 5. * math.tanh(1.)) > 2.


def test_clip_rewards_soft_asymmetric_keeps_shape_and_float64():
  rewards = tf.constant([[-1., 2.], [0., -3.]], tf.float64)
  got = losses.clip_rewards(rewards, 'soft_asymmetric')
  assert got.shape == (2, 2) and got.dtype == tf.float64
  np.testing.assert_allclose(
      got, [[1.5 * math.tanh(-0.2), 5. * math.tanh(0.4)],
            [0., 1.5 * math.tanh(-0.6)]], rtol=1e-12)


def test_clip_rewards_bad_mode():
  with pytest.raises(ValueError, match=r"'bogus'.*abs_one"):
    losses.clip_rewards([1.], 'bogus')


# Numpy reference.


def _log_softmax(logits):
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _np_impala_loss(target_logits, behaviour_logits, actions, rewards,
                    discounts, values, bootstrap_value, correction,
                    weights=None, entropy_weights=None, baseline_cost=0.5,
                    entropy_cost=0.01, rho_bar=1.0, c_bar=1.0,
                    pg_rho_bar=1.0, lambda_=1.0, reduction='mean'):
  """Per-term losses written out step by step."""
  t_len, batch = actions.shape
  w = np.ones((t_len, batch)) if weights is None else weights
  w_ent = w if entropy_weights is None else w * entropy_weights
  log_pi = _log_softmax(target_logits)
  log_mu = _log_softmax(behaviour_logits)
  logp_a = np.take_along_axis(log_pi, actions[..., None], -1)[..., 0]
  logmu_a = np.take_along_axis(log_mu, actions[..., None], -1)[..., 0]
  ratio = np.exp(logp_a - logmu_a)
  if correction == 'vtrace':
    rho = np.minimum(rho_bar, ratio)
    c = lambda_ * np.minimum(c_bar, ratio)
    pg_rho = np.minimum(pg_rho_bar, ratio)
  else:
    rho = np.ones_like(ratio)
    c = lambda_ * np.ones_like(ratio)
    pg_rho = (np.minimum(pg_rho_bar, ratio) if correction == 'one_step_is'
              else np.ones_like(ratio))
  vs = np.zeros((t_len, batch))
  for b in range(batch):
    next_v, next_vs = bootstrap_value[b], bootstrap_value[b]
    for t in reversed(range(t_len)):
      if w[t, b] == 0:  # Removed step: target = value, trace cut.
        vs[t, b] = values[t, b]
      else:
        delta = rewards[t, b] + discounts[t, b] * next_v - values[t, b]
        vs[t, b] = (values[t, b] + rho[t, b] * delta +
                    discounts[t, b] * c[t, b] * (next_vs - next_v))
      next_v, next_vs = values[t, b], vs[t, b]
  vs_tp1 = np.concatenate([vs[1:], bootstrap_value[None]])
  adv = pg_rho * (rewards + discounts * vs_tp1 - values)
  pg_logp = np.log(np.exp(logp_a) + 1e-6) if correction == 'epsilon' else logp_a
  entropy = -(np.exp(log_pi) * log_pi).sum(-1)
  n = max(w.sum(), 1.) if reduction == 'mean' else 1.
  policy = np.sum(w * -adv * pg_logp) / n
  baseline = baseline_cost * np.sum(w * 0.5 * (vs - values)**2) / n
  entropy_loss = -entropy_cost * np.sum(w_ent * entropy) / n
  return dict(loss=policy + baseline + entropy_loss, policy_loss=policy,
              baseline_loss=baseline, entropy_loss=entropy_loss, vs=vs)


def _random_batch(t_len=6, batch=3, num_actions=4, seed=0):
  rng = np.random.RandomState(seed)
  return dict(
      target_logits=rng.normal(size=(t_len, batch, num_actions)),
      behaviour_logits=rng.normal(size=(t_len, batch, num_actions)),
      actions=rng.randint(0, num_actions, size=(t_len, batch)),
      rewards=rng.normal(size=(t_len, batch)),
      discounts=0.9 * (rng.uniform(size=(t_len, batch)) > 0.15),
      values=rng.normal(size=(t_len, batch)),
      bootstrap_value=rng.normal(size=(batch,)),
  )


# Hand-worked case: T=2, B=1, A=2, gamma=0.9, r=(1, 2), V=(0.5, 1.5),
# V(x_2)=3. The target policy is uniform (log pi(a) = -log 2, H = log 2 at
# both steps); the behaviour gave the taken actions probability 0.25 and 0.8,
# so pi/mu = (2, 0.625).
_HAND = dict(
    target_logits=np.zeros((2, 1, 2)),
    behaviour_logits=np.log([[[0.25, 0.75]], [[0.2, 0.8]]]),
    actions=np.array([[0], [1]]),
    rewards=np.array([[1.], [2.]]),
    discounts=np.array([[0.9], [0.9]]),
    values=np.array([[0.5], [1.5]]),
    bootstrap_value=np.array([3.]),
)
# delta = (1 + 0.9*1.5 - 0.5, 2 + 0.9*3 - 1.5) = (1.85, 3.2).
# V-trace: rho = c = (1, 0.625): v_1 = 1.5 + 0.625*3.2 = 3.5,
#   v_0 = 0.5 + 1.85 + 0.9 * c_0 * (v_1 - V_1) = 0.5 + 1.85 + 1.8 = 4.15,
#   A = (1 + 0.9*3.5 - 0.5, 0.625*3.2) = (3.65, 2.0).
# Uncorrected (none / epsilon / one_step_is targets): v_1 = 2 + 2.7 = 4.7,
#   v_0 = 1 + 0.9*4.7 = 5.23, A = (1 + 0.9*4.7 - 0.5, 3.2) = (4.73, 3.2);
#   one_step_is weights them by min(1, pi/mu): A = (4.73, 2.0).
# policy = -sum_s A_s log pi(a_s) (log(pi + 1e-6) for epsilon),
# baseline = 0.5 * 0.5 * sum_s (v_s - V_s)^2, entropy = -0.01 * 2 log 2.
_HAND_EXPECTED_SUM = {
    'vtrace': dict(policy=(3.65 + 2.0) * LOG2,
                   baseline=0.25 * ((4.15 - 0.5)**2 + (3.5 - 1.5)**2)),
    'one_step_is': dict(policy=(4.73 + 2.0) * LOG2,
                        baseline=0.25 * ((5.23 - 0.5)**2 + (4.7 - 1.5)**2)),
    'epsilon': dict(policy=-(4.73 + 3.2) * np.log(0.5 + 1e-6),
                    baseline=0.25 * ((5.23 - 0.5)**2 + (4.7 - 1.5)**2)),
    'none': dict(policy=(4.73 + 3.2) * LOG2,
                 baseline=0.25 * ((5.23 - 0.5)**2 + (4.7 - 1.5)**2)),
}


@pytest.mark.parametrize('correction', CORRECTIONS)
@pytest.mark.parametrize('reduction', ['sum', 'mean'])
def test_hand_worked_case(correction, reduction):
  loss, metrics = losses.impala_loss(
      **_HAND, off_policy_correction=correction, reduction=reduction)
  n = 2. if reduction == 'mean' else 1.
  expected = _HAND_EXPECTED_SUM[correction]
  expected_entropy = -0.01 * 2 * LOG2
  np.testing.assert_allclose(metrics['policy_loss'], expected['policy'] / n,
                             rtol=1e-9)
  np.testing.assert_allclose(metrics['baseline_loss'],
                             expected['baseline'] / n, rtol=1e-9)
  np.testing.assert_allclose(metrics['entropy_loss'], expected_entropy / n,
                             rtol=1e-9)
  np.testing.assert_allclose(
      loss, (expected['policy'] + expected['baseline'] + expected_entropy) / n,
      rtol=1e-9)
  np.testing.assert_allclose(metrics['loss'], loss)
  np.testing.assert_allclose(metrics['entropy'], LOG2, rtol=1e-9)
  np.testing.assert_allclose(metrics['mean_rho'], (2. + 0.625) / 2,
                             rtol=1e-9)
  np.testing.assert_allclose(metrics['clipped_rho_fraction'], 0.5)


@pytest.mark.parametrize('correction', CORRECTIONS)
def test_matches_numpy_reference(correction):
  batch = _random_batch(seed=3)
  rng = np.random.RandomState(1)
  mask = (rng.uniform(size=(6, 3)) > 0.2).astype(np.float64)
  relevance = (rng.uniform(size=(6, 3)) > 0.2).astype(np.float64)
  entropy_mask = np.array([1., 0., 1.])
  kwargs = dict(baseline_cost=0.7, entropy_cost=0.05, rho_bar=1.5, c_bar=0.8,
                pg_rho_bar=1.2, lambda_=0.9)
  expected = _np_impala_loss(
      **batch, correction=correction, weights=mask * relevance,
      entropy_weights=entropy_mask[None], **kwargs)
  loss, metrics = losses.impala_loss(
      **batch, mask=mask, relevance_mask=relevance, entropy_mask=entropy_mask,
      off_policy_correction=correction, baseline_cost=0.7, entropy_cost=0.05,
      clip_rho_threshold=1.5, clip_c_threshold=0.8,
      clip_pg_rho_threshold=1.2, lambda_=0.9)
  for key in ('policy_loss', 'baseline_loss', 'entropy_loss'):
    np.testing.assert_allclose(metrics[key], expected[key], rtol=1e-9,
                               err_msg=key)
  np.testing.assert_allclose(loss, expected['loss'], rtol=1e-9)


def test_corrections_differ_off_policy():
  batch = _random_batch(seed=4)
  results = {c: float(losses.impala_loss(**batch, off_policy_correction=c)[0])
             for c in CORRECTIONS}
  assert len(set(np.round(list(results.values()), 8))) == len(CORRECTIONS)


# Gradients.


def test_gradients():
  batch = _random_batch(seed=5)
  target_logits = tf.Variable(batch.pop('target_logits'))
  values = tf.Variable(batch.pop('values'))
  bootstrap_value = tf.Variable(batch.pop('bootstrap_value'))
  behaviour_logits = tf.Variable(batch.pop('behaviour_logits'))
  with tf.GradientTape() as tape:
    loss, _ = losses.impala_loss(
        target_logits=target_logits, values=values,
        bootstrap_value=bootstrap_value, behaviour_logits=behaviour_logits,
        entropy_cost=0., **batch)
  grads = tape.gradient(
      loss, [target_logits, values, bootstrap_value, behaviour_logits])
  grad_logits, grad_values, grad_bootstrap, grad_behaviour = grads
  assert grad_bootstrap is None  # Only a target.
  assert grad_behaviour is None  # Constants.

  expected = _np_impala_loss(
      target_logits=target_logits.numpy(),
      behaviour_logits=behaviour_logits.numpy(), values=values.numpy(),
      bootstrap_value=bootstrap_value.numpy(), correction='vtrace',
      entropy_cost=0., **batch)
  n = values.shape[0] * values.shape[1]
  # d/dV 0.5 * c * (v_s - V)^2 / N = -c * (v_s - V) / N: the paper's
  # (v_s - V) grad V direction, scaled by baseline_cost.
  np.testing.assert_allclose(grad_values,
                             -0.5 * (expected['vs'] - values.numpy()) / n,
                             rtol=1e-9, atol=1e-12)
  # d/dlogits of -A log pi(a) = -A (onehot(a) - pi).
  vtrace_adv = losses.vtrace.vtrace_from_logits(
      behaviour_logits, target_logits, batch['actions'], batch['discounts'],
      batch['rewards'], values, bootstrap_value).pg_advantages.numpy()
  pi = np.exp(_log_softmax(target_logits.numpy()))
  onehot = np.eye(4)[batch['actions']]
  np.testing.assert_allclose(grad_logits,
                             -vtrace_adv[..., None] * (onehot - pi) / n,
                             rtol=1e-9, atol=1e-12)


def test_entropy_term_sign():
  batch = _random_batch(seed=6)
  logits = tf.Variable(batch.pop('target_logits'))

  def entropy_loss():
    return losses.impala_loss(target_logits=logits, entropy_cost=0.1,
                              **batch)[1]

  with tf.GradientTape() as tape:
    metrics = entropy_loss()
  entropy_before = float(metrics['entropy'])
  assert float(metrics['entropy_loss']) < 0.
  np.testing.assert_allclose(metrics['entropy_loss'], -0.1 * entropy_before,
                             rtol=1e-9)
  # A descent step on the entropy term alone increases the entropy.
  logits.assign_sub(1.0 * tape.gradient(metrics['entropy_loss'], logits))
  assert float(entropy_loss()['entropy']) > entropy_before


# Masks and reductions.


def test_masked_padding_column_is_ignored():
  batch = _random_batch(t_len=5, batch=2, seed=7)
  single = {k: v[:, :1] if k != 'bootstrap_value' else v[:1]
            for k, v in batch.items()}
  garbage = dict(batch)
  garbage['rewards'] = batch['rewards'].copy()
  garbage['rewards'][:, 1] = np.nan
  garbage['behaviour_logits'] = batch['behaviour_logits'].copy()
  garbage['behaviour_logits'][:, 1] = 1e4 * np.arange(4)
  garbage['target_logits'] = batch['target_logits'].copy()
  garbage['target_logits'][:, 1] = -1e3 * np.arange(4)
  mask = np.array([[1., 0.]] * 5)
  for correction in CORRECTIONS:
    expected, _ = losses.impala_loss(**single, reduction='sum',
                                     off_policy_correction=correction)
    logits = tf.Variable(garbage['target_logits'])
    values = tf.Variable(garbage['values'])
    with tf.GradientTape() as tape:
      loss, metrics = losses.impala_loss(
          **{**garbage, 'target_logits': logits, 'values': values},
          mask=mask, reduction='sum', off_policy_correction=correction)
    np.testing.assert_allclose(loss, expected, rtol=1e-10)
    assert float(metrics['num_valid_steps']) == 5.
    for grad in tape.gradient(loss, [logits, values]):
      assert np.all(np.isfinite(grad))
      np.testing.assert_array_equal(grad.numpy()[:, 1], 0.)


def test_masked_trailing_step_equals_shorter_sequence():
  batch = _random_batch(t_len=5, batch=2, seed=8)
  # Without the last step, the sequence bootstraps from V(x_4).
  short = {k: v[:4] for k, v in batch.items() if k != 'bootstrap_value'}
  short['bootstrap_value'] = batch['values'][4]
  padded = dict(batch)
  padded['rewards'] = batch['rewards'].copy()
  padded['rewards'][4] = 1e6
  padded['target_logits'] = batch['target_logits'].copy()
  padded['target_logits'][4] = 50. * np.arange(4)
  padded['bootstrap_value'] = np.array([1e5, -1e5])
  mask = np.ones((5, 2))
  mask[4] = 0.
  for correction in CORRECTIONS:
    expected, _ = losses.impala_loss(**short, reduction='sum', lambda_=0.8,
                                     off_policy_correction=correction)
    actual, _ = losses.impala_loss(**padded, mask=mask, reduction='sum',
                                   lambda_=0.8,
                                   off_policy_correction=correction)
    np.testing.assert_allclose(actual, expected, rtol=1e-10)


def test_mask_and_relevance_mask_combine():
  batch = _random_batch(seed=9)
  rng = np.random.RandomState(0)
  mask = (rng.uniform(size=(6, 3)) > 0.3).astype(np.float64)
  relevance = (rng.uniform(size=(6, 3)) > 0.3).astype(np.float64)
  combined, _ = losses.impala_loss(**batch, mask=mask * relevance)
  separate, _ = losses.impala_loss(**batch, mask=mask,
                                   relevance_mask=relevance)
  np.testing.assert_allclose(separate, combined, rtol=1e-12)


def test_entropy_mask_restricts_entropy_only():
  batch = _random_batch(seed=10)
  entropy_mask = np.array([0., 1., 0.])
  _, full = losses.impala_loss(**batch)
  _, masked = losses.impala_loss(**batch, entropy_mask=entropy_mask)
  for key in ('policy_loss', 'baseline_loss'):
    np.testing.assert_allclose(masked[key], full[key], rtol=1e-12)
  pi = np.exp(_log_softmax(batch['target_logits']))
  entropy = -(pi * np.log(pi)).sum(-1)
  np.testing.assert_allclose(masked['entropy'], entropy[:, 1].mean(),
                             rtol=1e-9)
  # 'mean' divides every term by the number of valid steps (18).
  np.testing.assert_allclose(masked['entropy_loss'],
                             -0.01 * entropy[:, 1].sum() / 18., rtol=1e-9)


def test_sum_is_mean_times_valid_steps():
  batch = _random_batch(seed=11)
  mask = np.ones((6, 3))
  mask[3:, 2] = 0.
  _, sum_metrics = losses.impala_loss(**batch, mask=mask, reduction='sum')
  _, mean_metrics = losses.impala_loss(**batch, mask=mask, reduction='mean')
  for key in ('loss', 'policy_loss', 'baseline_loss', 'entropy_loss'):
    np.testing.assert_allclose(sum_metrics[key], 15. * mean_metrics[key],
                               rtol=1e-10, err_msg=key)
  # With nothing valid the mean is still finite (divides by at least 1).
  loss, _ = losses.impala_loss(**batch, mask=np.zeros((6, 3)))
  assert float(loss) == 0.


def test_jit_compile_matches_eager():
  batch = {k: v.astype(np.int32 if k == 'actions' else np.float32)
           for k, v in _random_batch(seed=12).items()}
  mask = np.ones((6, 3), np.float32)
  mask[5, 0] = 0.

  for correction in ('vtrace', 'one_step_is'):
    @tf.function(jit_compile=True)
    def compiled(inputs, mask, correction=correction):
      return losses.impala_loss(**inputs, mask=mask, lambda_=0.9,
                                off_policy_correction=correction)

    loss, metrics = compiled(
        {k: tf.constant(v) for k, v in batch.items()}, tf.constant(mask))
    expected_loss, expected_metrics = losses.impala_loss(
        **batch, mask=mask, lambda_=0.9, off_policy_correction=correction)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
    for key, value in expected_metrics.items():
      np.testing.assert_allclose(metrics[key], value, rtol=1e-5, atol=1e-6,
                                 err_msg=key)


def test_bad_options_raise():
  batch = _random_batch(seed=13)
  with pytest.raises(ValueError, match=r"'median'.*'mean'.*'sum'"):
    losses.impala_loss(**batch, reduction='median')
  with pytest.raises(ValueError, match=r"'retrace'.*'vtrace'"):
    losses.impala_loss(**batch, off_policy_correction='retrace')
  with pytest.raises(ValueError, match='values'):
    losses.impala_loss(**{**batch, 'values': np.zeros(6)})
  with pytest.raises(ValueError, match='target_logits'):
    losses.impala_loss(**{**batch, 'target_logits': np.zeros((6, 3))})
