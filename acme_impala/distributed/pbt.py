"""Population-based training's decisions (IMPALA Appendix F), as pure
functions of the population's fitness and hyperparameters.

Appendix F's rule, for the instance that is due to evolve:

  * exploit: "a random instance in the population is selected. If the score
    of the selected instance is more than an absolute 5% higher, then the
    selected instance weights and parameters are copied" (`exploit`);
  * explore: "No matter if a copy happened or not, each parameter (RMSProp
    epsilon, learning rate and entropy cost) is permuted with 33%
    probability by multiplying with either 1.2 or 1/1.2" (`explore`);
  * after a "burn-in" period in which no evolution is done.

The fitness is the mean capped normalised score (`envs.multitask`), so the
5 % margin is absolute on a 0-1 scale. The node that applies these
decisions to learners is not built yet (issue 39 item 2).
"""

import dataclasses
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

# Appendix F's adapted parameters, as IMPALAConfig fields (its Atari-57
# agent adapts the gradient-norm clip too: max_gradient_norm).
HYPERPARAMETERS = ('learning_rate', 'entropy_cost', 'rmsprop_epsilon')
PERTURB_PROBABILITY = 1 / 3  # "33% probability".
PERTURB_FACTOR = 1.2  # "either 1.2 or 1/1.2".
COPY_MARGIN = 0.05  # "more than an absolute 5% higher".


@dataclasses.dataclass(frozen=True)
class Decision:
  """What one agent's evolution step does: copy `source`'s weights and
  optimiser state and hyperparameters first (None: no copy), then take
  `hyperparameters` (the source's or its own, perturbed)."""
  agent: int
  source: Optional[int]
  hyperparameters: Dict[str, float]


def exploit(agent: int, fitness: Sequence[float], rng: np.random.Generator,
            margin: float = COPY_MARGIN) -> Optional[int]:
  """The agent to copy, or None: a uniformly random other agent, kept only
  when its fitness exceeds `agent`'s by more than `margin`. A NaN fitness
  (not evaluated yet) is never copied, and an agent without one copies
  nobody."""
  others = [i for i in range(len(fitness)) if i != agent]
  if not others:
    return None
  other = int(rng.choice(others))
  if np.isnan(fitness[agent]) or np.isnan(fitness[other]):
    return None
  return other if fitness[other] > fitness[agent] + margin else None


def explore(values: Mapping[str, float], rng: np.random.Generator,
            names: Sequence[str] = HYPERPARAMETERS,
            probability: float = PERTURB_PROBABILITY,
            factor: float = PERTURB_FACTOR) -> Dict[str, float]:
  """`values` with each of `names`, independently with `probability`,
  multiplied by `factor` or 1 / `factor` (equally likely); the other
  entries unchanged."""
  unknown = sorted(set(names) - set(values))
  if unknown:
    raise ValueError(f'explore: {unknown} are not among the values '
                     f'{sorted(values)}.')
  out = dict(values)
  for name in names:
    if rng.random() < probability:
      out[name] = values[name] * (factor if rng.random() < 0.5
                                  else 1 / factor)
  return out


def evolve(agent: int, fitness: Sequence[float],
           hyperparameters: Sequence[Mapping[str, float]],
           rng: np.random.Generator) -> Decision:
  """Appendix F's step for `agent`: exploit, then explore whatever it then
  has (the source's hyperparameters after a copy, its own otherwise).

  Args:
    agent: index of the agent that is due.
    fitness: [N] each agent's fitness (NaN: none yet).
    hyperparameters: [N] each agent's current values of HYPERPARAMETERS.
    rng: the controller's generator (its state is checkpointed with it).
  """
  if len(fitness) != len(hyperparameters):
    raise ValueError(f'evolve: {len(fitness)} fitness values for '
                     f'{len(hyperparameters)} agents.')
  source = exploit(agent, fitness, rng)
  start = hyperparameters[agent if source is None else source]
  return Decision(agent=agent, source=source,
                  hyperparameters=explore(start, rng))


def due(learner_steps: Sequence[int], last_evolved: Sequence[int],
        interval: int, burn_in: int) -> Tuple[int, ...]:
  """The agents due to evolve: past `burn_in` learner steps and at least
  `interval` since their last evolution (or since the burn-in)."""
  return tuple(i for i, (steps, last) in enumerate(zip(learner_steps,
                                                       last_evolved))
               if steps >= burn_in and steps - max(last, burn_in) >= interval)
