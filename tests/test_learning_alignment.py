"""End-to-end alignment of IMPALALearner with an independent reference.

One learner step on a hand-built batch that holds every item layout Acme's
SequenceAdder produces (terminal and truncated episode ends, the dummy step,
mid-item episode starts, ZERO_PAD tails, an item starting at a dummy step),
compared with tests/learner_reference.py: the network stepped one step at a
time, and V-trace eq. (1) with the relevance mask written from the paper.
"""

from acme import specs
from acme.adders import reverb as acme_reverb
from acme.tf import utils as tf2_utils
from acme.utils import loggers
import numpy as np
import pytest
import tensorflow as tf
import tree

from acme_impala.agent import builder as builder_lib
from acme_impala.agent import config as config_lib
from acme_impala.agent import learning
from acme_impala.agent import networks
from acme_impala.agent import types
from acme_impala.envs import registry

import learner_reference as ref

T = 7  # Transitions per item; items have T + 1 steps.
NUM_ACTIONS = 2

# One row per item, one character per step (T + 1 of them):
#   m  real step inside an episode (discount 1)
#   s  real first step of an episode (start_of_episode)
#   t  real terminal step (discount 0)
#   u  real last step of a time-limit truncation (discount 1)
#   d  the adder's dummy step: the episode's final observation, zero action,
#      reward, discount and extras
#   z  ZERO_PAD padding: every field zero
ROWS = (
    'mmtdsmmm',  # terminal, dummy, mid-item episode start
    'mmmudsmm',  # truncation, dummy, start
    'mtdzzzzz',  # ZERO_PAD tail after a terminal
    'mmmmmtds',  # the bootstrap step starts an episode
    'smmmmmud',  # starts at step 0; truncation whose dummy is the bootstrap
    'mmudzzzz',  # ZERO_PAD tail after a truncation: no start follows
    'tdsmtdsm',  # two episode ends inside one item
    'dsmmmmmm',  # the item starts at a dummy step
    'mmmmmmmm',  # no boundary
)
# Worked out by hand from the layout (transition t: step t -> t+1).
EXPECTED_MASK = np.array([
    [1, 1, 1, 0, 1, 1, 1],
    [1, 1, 1, 1, 0, 1, 1],
    [1, 1, 0, 0, 0, 0, 0],
    [1, 1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 1, 1, 1],
    [1, 1, 1, 0, 0, 0, 0],
    [1, 0, 1, 1, 1, 0, 1],
    [0, 1, 1, 1, 1, 1, 1],
    [1, 1, 1, 1, 1, 1, 1],
], np.float64)
B = len(ROWS)
# Rows whose step-0 LSTM state is random (nonzero). Row 4 starts an episode
# at step 0: the learner must ignore its (random) recorded state.
RANDOM_STATE_ROWS = (0, 1, 3, 4, 6, 8)


def _config(**kw):
  base = dict(unroll_length=T, batch_size=B, lstm_size=16,
              max_queue_size=100, kl_threshold=None,
              reward_clipping='abs_one', discount=0.9, entropy_cost=0.05,
              baseline_cost=0.5,
              # Distinct thresholds, so rho_bar, c_bar, the policy-gradient
              # clip and lambda cannot be mixed up unnoticed.
              clip_rho_threshold=1.5, clip_c_threshold=0.9,
              clip_pg_rho_threshold=1.2, lambda_=0.95)
  base.update(kw)
  return config_lib.IMPALAConfig(**base)


def _spec():
  return specs.make_environment_spec(
      registry.make_environment('CartPole-v1', seed=0))


def _network(config, spec, seed=0):
  tf.random.set_seed(seed)
  net = networks.make_network(config, spec.actions.num_values)
  tf2_utils.create_variables(net, [spec.observations])
  return net


def _hand_built_items(signature, seed=0):
  """A batch-major Step nest [B, T+1, ...] laid out as ROWS says.

  Args:
    signature: the items' Reverb signature (leaves [T+1, ...]).
    seed: of the random contents.
  """
  rng = np.random.default_rng(seed)

  def zeros(spec):
    assert spec.shape[0] == T + 1, spec
    return np.zeros((B,) + tuple(spec.shape), spec.dtype.as_numpy_dtype)

  items = tree.map_structure(zeros, signature)
  obs = items.observation
  extras = items.extras
  hidden_size = extras[types.CORE_STATE].hidden.shape[-1]
  for b, row in enumerate(ROWS):
    assert len(row) == T + 1
    prev_action, prev_reward = rng.integers(NUM_ACTIONS), rng.uniform(-2, 2)
    for t, kind in enumerate(row):
      if kind == 'z':
        continue  # All zeros, start_of_episode False.
      # Every other step holds an observation (the dummy: the final one).
      obs.observation[b, t] = rng.normal(size=obs.observation.shape[-1])
      if kind == 's':
        items.start_of_episode[b, t] = True
        prev_action, prev_reward = 0, 0.
      obs.action[b, t] = prev_action
      obs.reward[b, t] = prev_reward
      if kind == 'd':
        continue  # Zero action, reward, discount and extras.
      items.action[b, t] = rng.integers(NUM_ACTIONS)
      # Beyond [-1, 1], so that reward clipping matters.
      items.reward[b, t] = rng.uniform(-2, 2)
      items.discount[b, t] = 0. if kind == 't' else 1.
      extras[types.LOGITS][b, t] = rng.normal(size=NUM_ACTIONS)
      extras[types.CORE_STATE].hidden[b, t] = 0.5 * rng.normal(
          size=hidden_size)
      extras[types.CORE_STATE].cell[b, t] = rng.normal(size=hidden_size)
      if types.POLICY_VERSION in extras:
        extras[types.POLICY_VERSION][b, t] = 3
      prev_action, prev_reward = items.action[b, t], items.reward[b, t]
    if b not in RANDOM_STATE_ROWS:
      extras[types.CORE_STATE].hidden[b, 0] = 0.
      extras[types.CORE_STATE].cell[b, 0] = 0.
  return items


def _items_and_network(config, seed=0):
  spec = _spec()
  net = _network(config, spec, seed=seed)
  signature = builder_lib.IMPALABuilder(config, spec).trajectory_signature(
      net)
  items = _hand_built_items(signature)
  # Exactly the structure, shapes and dtypes of a real batch of items.
  tree.assert_same_structure(items, signature)
  for item, spec_ in zip(tree.flatten(items), tree.flatten(signature)):
    assert item.shape == (B,) + tuple(spec_.shape), (item.shape, spec_)
    assert item.dtype == spec_.dtype.as_numpy_dtype, (item.dtype, spec_)
  return items, net


def test_batch_layout_is_as_intended():
  """The hand-built batch holds what it claims (a test of the fixture)."""
  items, _ = _items_and_network(_config())
  start = items.start_of_episode
  logits = items.extras[types.LOGITS]
  for b, row in enumerate(ROWS):
    for t, kind in enumerate(row):
      written = np.all(logits[b, t] == 0)
      assert written == (kind in 'dz'), (b, t)
      assert start[b, t] == (kind == 's'), (b, t)
      if kind in 'dz':
        assert items.discount[b, t] == 0 and items.action[b, t] == 0
      if kind == 'z':
        assert np.all(items.observation.observation[b, t] == 0)
      else:
        assert np.any(items.observation.observation[b, t] != 0)
  # Nonzero recorded states at step 0, including where an episode starts.
  hidden0 = items.extras[types.CORE_STATE].hidden[:, 0]
  assert np.all(np.any(hidden0 != 0, axis=-1) ==
                np.isin(np.arange(B), RANDOM_STATE_ROWS))
  assert start[4, 0] and np.any(hidden0[4] != 0)


def test_reference_mask_is_the_hand_derived_one():
  items, _ = _items_and_network(_config())
  mask = ref.real_transitions(items.start_of_episode, items.discount,
                              items.extras[types.LOGITS])
  np.testing.assert_array_equal(mask, EXPECTED_MASK)


def test_valid_transitions_matches_reference():
  items, _ = _items_and_network(_config())
  start = np.asarray(items.start_of_episode).T  # [T+1, B]
  discounts = np.asarray(items.discount[:, :-1]).T  # [T, B]
  logits = np.transpose(items.extras[types.LOGITS][:, :-1], [1, 0, 2])
  got = learning.valid_transitions(tf.constant(start), tf.constant(discounts),
                                   tf.constant(logits)).numpy()
  expected = ref.real_transitions(items.start_of_episode, items.discount,
                                  items.extras[types.LOGITS])
  np.testing.assert_array_equal(got.T, expected)


def test_valid_transitions_matches_reference_on_random_layouts():
  """Every combination of starts, terminals and adder-written steps, beyond
  what Acme writes (e.g. a dummy with nonzero logits before a start, a real
  step after a terminal): rules (a) and (c) are redundant with (b) on Acme's
  own layouts, here each of them decides some transitions."""
  rng = np.random.default_rng(2)
  steps, batch = T + 1, 2000
  start = rng.random([steps, batch]) < 0.2
  discounts = (rng.random([steps - 1, batch]) > 0.2).astype(np.float32)
  logits = rng.normal(size=[steps - 1, batch, NUM_ACTIONS]).astype(np.float32)
  logits[rng.random([steps - 1, batch]) < 0.2] = 0.
  got = learning.valid_transitions(tf.constant(start), tf.constant(discounts),
                                   tf.constant(logits)).numpy()
  expected = ref.real_transitions(start.T, discounts.T,
                                  np.transpose(logits, [1, 0, 2]))
  np.testing.assert_array_equal(got.T, expected)
  # Each rule alone decides some transitions of this batch.
  written = np.all(logits == 0, axis=-1)
  only_a = start[1:] & ~written & (expected.T == 0)
  assert only_a.any()
  only_c = ~start[1:] & ~written & (expected.T == 0)
  assert only_c.any()


def test_reference_vtrace_is_n_step_return_on_policy():
  """Sanity check of the reference itself: with pi = mu, no masking and
  lambda = 1, eq. (1) is the n-step return (paper, section 4.1)."""
  rng = np.random.default_rng(1)
  n = 6
  rewards, values = rng.normal(size=n), rng.normal(size=n + 1)
  discounts = rng.uniform(0.5, 1., size=n)
  vs = ref.vtrace_targets(np.ones(n), discounts, rewards, values, np.ones(n),
                          1., 1., 1.)
  for s in range(n):
    ret, scale = 0., 1.
    for t in range(s, n):
      ret += scale * rewards[t]
      scale *= discounts[t]
    np.testing.assert_allclose(vs[s], ret + scale * values[n])
  # A masked step: its own target is V, and earlier ones bootstrap from it.
  mask = np.ones(n)
  mask[3] = 0.
  vs = ref.vtrace_targets(np.ones(n), discounts, rewards, values, mask,
                          1., 1., 1.)
  assert vs[3] == values[3]
  np.testing.assert_allclose(
      vs[2], rewards[2] + discounts[2] * values[3])


def _learner_step(config, items, net, online=None):
  logger = loggers.InMemoryLogger()
  data = tree.map_structure(tf.constant, items)
  sample = data if online is None else types.Batch(
      data=data, online=tf.constant(online))
  learner = learning.IMPALALearner(net, iter([sample]), config,
                                   logger=logger)
  learner.step()
  assert learner.num_steps == 1
  return logger.data[0]


@pytest.mark.parametrize('compile_mode', ['none', 'vtrace_and_optimizer'])
@pytest.mark.parametrize('reduction', ['sum', 'mean'])
def test_first_step_loss_matches_reference(compile_mode, reduction):
  config = _config(compile_mode=compile_mode, loss_reduction=reduction)
  items, net = _items_and_network(config, seed=3)
  before = [v.numpy().copy() for v in net.trainable_variables]
  expected, mask = ref.learner_loss(net, items, config)
  np.testing.assert_array_equal(mask, EXPECTED_MASK)
  # The batch exercises the clipping: some rho above each threshold.
  assert 0 < expected['clipped_rho_fraction'] < 1
  row = _learner_step(config, items, net)
  ref.assert_logged_matches(row, expected)
  assert row['num_valid_steps'] == EXPECTED_MASK.sum()
  # The learner did update the weights the reference was computed with.
  after = [v.numpy() for v in net.trainable_variables]
  assert any(not np.allclose(a, b) for a, b in zip(before, after))


def test_first_step_loss_matches_reference_with_paper_thresholds():
  """rho_bar = c_bar = 1, lambda = 1, gamma = 0.99 (the config defaults)."""
  config = config_lib.IMPALAConfig(unroll_length=T, batch_size=B,
                                   lstm_size=16, max_queue_size=100)
  assert config.kl_threshold is None
  items, net = _items_and_network(config, seed=4)
  expected, _ = ref.learner_loss(net, items, config)
  ref.assert_logged_matches(_learner_step(config, items, net), expected)


def test_first_step_loss_matches_reference_with_online_entropy():
  """types.Batch rows marked replayed get no entropy bonus (LASER)."""
  config = _config(entropy_on_online_only=True, replay_fraction=1 / 3,
                   replay_core_state='stored', loss_reduction='mean')
  items, net = _items_and_network(config, seed=5)
  online = np.array([True] * 6 + [False] * 3)
  expected, _ = ref.learner_loss(net, items, config, online=online)
  all_online, _ = ref.learner_loss(net, items, config)
  assert not np.isclose(expected['entropy_loss'], all_online['entropy_loss'])
  ref.assert_logged_matches(_learner_step(config, items, net, online),
                            expected)
