"""Tests of acme_impala/distributed/pbt.py: Appendix F's exploit and explore
rules, by hand and by their frequencies."""

import math

import numpy as np
import pytest

from acme_impala.distributed import pbt

VALUES = {'learning_rate': 4e-3, 'entropy_cost': 0.01,
          'rmsprop_epsilon': 1e-5, 'discount': 0.99}


class _Fixed:
  """A generator whose draws are given: choice() returns `choice`,
  random() the next of `randoms`."""

  def __init__(self, choice=None, randoms=()):
    self._choice, self._randoms = choice, list(randoms)

  def choice(self, options):
    assert self._choice in options
    return self._choice

  def random(self):
    return self._randoms.pop(0)


@pytest.mark.parametrize('fitness,other,expected', [
    ([0.50, 0.56], 1, 1),      # More than 5 % (absolute) higher: copied.
    ([0.50, 0.55], 1, None),   # Exactly 5 %: not more than.
    ([0.50, 0.40], 1, None),   # Worse.
    ([0.50, math.nan], 1, None),  # Not evaluated yet.
    ([math.nan, 0.90], 1, None),  # The agent itself has no fitness.
])
def test_exploit_copies_only_a_partner_more_than_5_percent_better(
    fitness, other, expected):
  assert pbt.exploit(0, fitness, _Fixed(choice=other)) == expected


def test_exploit_picks_the_partner_uniformly_among_the_others():
  rng = np.random.default_rng(0)
  fitness = [0.0, 1.0, 1.0, 1.0]
  picks = [pbt.exploit(0, fitness, rng) for _ in range(3000)]
  counts = np.bincount(picks, minlength=4)
  assert counts[0] == 0
  np.testing.assert_allclose(counts[1:] / 3000, 1 / 3, atol=0.04)
  assert pbt.exploit(0, [0.5], rng) is None  # A population of one.


def test_explore_by_hand():
  # learning_rate: perturbed (0.1 < 1/3), up (0.2 < 0.5); entropy_cost: not
  # (0.9); rmsprop_epsilon: perturbed (0.3), down (0.7).
  out = pbt.explore(VALUES, _Fixed(randoms=[0.1, 0.2, 0.9, 0.3, 0.7]))
  assert out['learning_rate'] == pytest.approx(4e-3 * 1.2)
  assert out['entropy_cost'] == 0.01
  assert out['rmsprop_epsilon'] == pytest.approx(1e-5 / 1.2)
  assert out['discount'] == 0.99  # Not an adapted parameter.


def test_explore_frequencies_are_the_papers():
  rng = np.random.default_rng(1)
  n = 6000
  outs = [pbt.explore(VALUES, rng) for _ in range(n)]
  for name in pbt.HYPERPARAMETERS:
    ratios = np.array([o[name] / VALUES[name] for o in outs])
    assert set(np.round(ratios, 9)) <= {1.0, round(1.2, 9), round(1 / 1.2, 9)}
    np.testing.assert_allclose(np.mean(ratios != 1.0), 1 / 3, atol=0.025)
    # Up and down equally likely: the multiplication is unbiased in log.
    np.testing.assert_allclose(np.mean(ratios > 1.0), 1 / 6, atol=0.02)
  assert all(o['discount'] == 0.99 for o in outs)


def test_explore_refuses_a_name_it_has_no_value_for():
  with pytest.raises(ValueError, match=r"\['max_gradient_norm'\]"):
    pbt.explore(VALUES, np.random.default_rng(0),
                names=('learning_rate', 'max_gradient_norm'))


def test_evolve_explores_from_the_source_after_a_copy():
  population = [dict(VALUES, learning_rate=1e-3),
                dict(VALUES, learning_rate=8e-3)]
  # Copies agent 1, then perturbs nothing (every draw >= 1/3).
  decision = pbt.evolve(0, [0.2, 0.9], population,
                        _Fixed(choice=1, randoms=[0.5, 0.5, 0.5]))
  assert decision.source == 1
  assert decision.hyperparameters == population[1]
  # No copy: its own values, perturbed.
  decision = pbt.evolve(1, [0.2, 0.9], population,
                        _Fixed(choice=0, randoms=[0.0, 0.9, 0.5, 0.5]))
  assert decision.source is None
  assert decision.hyperparameters['learning_rate'] == pytest.approx(
      8e-3 / 1.2)
  with pytest.raises(ValueError, match='3 fitness values for 2 agents'):
    pbt.evolve(0, [0.1, 0.2, 0.3], population, np.random.default_rng(0))


def test_due_waits_for_the_burn_in_then_every_interval():
  assert pbt.due([99, 150, 400], [0, 0, 350], interval=100,
                 burn_in=100) == ()
  assert pbt.due([200, 150, 350], [0, 0, 250], interval=100,
                 burn_in=100) == (0, 2)
