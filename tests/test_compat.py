"""The Sonnet/Acme workarounds of agent/compat.py that compute something."""

import time

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf

from acme_impala.agent import compat


def _variables(rng):
  return [tf.Variable(rng.normal(size=shape).astype(np.float32))
          for shape in ((5, 8), (8,), (3,))]


@pytest.mark.parametrize('momentum', [0., 0.9])
def test_rmsprop_apply_is_sonnets_rmsprop_and_the_formula(momentum):
  """Three updates of the fused kernel against Sonnet's `apply` on a copy
  of the same variables and slots, and against the update written out in
  NumPy; learning rate and epsilon are variables changed between updates,
  as population-based training does, and one gradient is None (a variable
  the loss does not reach: left as it is, as by Sonnet)."""
  rng = np.random.default_rng(0)
  ours_vars = _variables(rng)
  theirs_vars = [tf.Variable(v) for v in ours_vars]
  lr, eps = tf.Variable(1e-2), tf.Variable(1e-3)
  make = lambda: snt.optimizers.RMSProp(  # pylint: disable=unnecessary-lambda-assignment
      learning_rate=lr, decay=0.99, momentum=momentum, epsilon=eps)
  ours, theirs = make(), make()
  compat.create_rmsprop_slots(ours, ours_vars, 0.1)
  compat.create_rmsprop_slots(theirs, theirs_vars, 0.1)
  want = [v.numpy().astype(np.float64) for v in ours_vars]
  ms = [np.full(v.shape, 0.1) for v in want]
  mom = [np.zeros(v.shape) for v in want]
  for step in range(3):
    lr.assign(1e-2 / (step + 1))
    eps.assign(10. ** -(step + 3))
    grads = [tf.constant(rng.normal(size=v.shape).astype(np.float32))
             for v in ours_vars]
    grads[2] = None
    returned = []

    def fused(g):
      returned.append([op.type for op in
                       compat.rmsprop_apply(ours, g, ours_vars)])

    tf.function(fused)(grads)
    # In a graph it hands back its update ops, one per gradient given (the
    # learner orders its step count after them).
    assert returned[0] == (
        ['ResourceApplyRMSProp'] * (len(grads) - 1))
    theirs.apply(grads, theirs_vars)
    for k, g in enumerate(grads):
      if g is None:
        continue
      g = g.numpy().astype(np.float64)
      ms[k] = 0.99 * ms[k] + 0.01 * g * g
      mom[k] = momentum * mom[k] + lr.numpy() * g / np.sqrt(ms[k] + eps.numpy())
      want[k] = want[k] - mom[k]
  for o, t, w in zip(ours_vars, theirs_vars, want):
    np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(o.numpy(), w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ours.ms[0].numpy(), theirs.ms[0].numpy(),
                             rtol=1e-6)
  assert not np.allclose(ours_vars[0].numpy(), _variables(
      np.random.default_rng(0))[0].numpy())  # It did move.


def test_rmsprop_apply_refuses_what_it_does_not_compute():
  variables = _variables(np.random.default_rng(0))
  centered = snt.optimizers.RMSProp(1e-3, centered=True)
  centered._initialize(variables)  # pylint: disable=protected-access
  with pytest.raises(ValueError, match='centered=True'):
    compat.rmsprop_apply(centered, [tf.zeros_like(v) for v in variables],
                         variables)
  without_slots = snt.optimizers.RMSProp(1e-3)
  with pytest.raises(ValueError, match='create_rmsprop_slots'):
    compat.rmsprop_apply(without_slots, [tf.zeros_like(v) for v in variables],
                         variables)


class _Source:
  def __init__(self, values):
    self.values, self.asked = values, []

  def get_variables(self, names):
    self.asked.append(list(names))
    return [self.values[n] for n in names]


def test_hooked_variable_client_runs_its_hooks_where_acme_runs_its_own():
  """Acme 0.4.0's VariableClient calls its private `_request` and `_copy`;
  the hooked client must see `fetch` (blocking or not) and `copy` on both
  of Acme's paths, and by default fetch and copy as Acme does. An Acme whose
  client changed those names fails here first."""
  weights = [tf.Variable(tf.zeros([2])), tf.Variable(tf.zeros([3]))]
  steps = [tf.Variable(0, dtype=tf.int64)]
  source = _Source({'policy': [np.ones(2), np.full(3, 2.)],
                    'learner_steps': [np.int64(7)]})
  calls = []

  class Spy(compat.HookedVariableClient):

    def fetch(self, blocking):
      calls.append(('fetch', blocking))
      return super().fetch(blocking)

    def copy(self, fetched):
      calls.append(('copy', len(fetched)))
      super().copy(fetched)

  client = Spy(source, {'policy': weights, 'learner_steps': steps})
  client.update(wait=True)
  assert calls == [('fetch', True), ('copy', 2)]
  assert source.asked == [['policy', 'learner_steps']]
  np.testing.assert_array_equal(weights[1].numpy(), [2., 2., 2.])
  assert int(steps[0].numpy()) == 7

  weights[0].assign(tf.zeros([2]))
  deadline = time.time() + 30
  while len(calls) < 4:
    assert time.time() < deadline, calls
    client.update()
    time.sleep(0.001)
  assert calls[2:4] == [('fetch', False), ('copy', 2)]
  np.testing.assert_array_equal(weights[0].numpy(), [1., 1.])
