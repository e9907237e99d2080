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

The fitness (`fitness`) is Appendix F's mean capped normalised score for a
multi-task agent (`envs.multitask`), so the 5 % margin is absolute on a 0-1
scale; for one task it is the score normalised the same way, uncapped (a
cap at the reference would make every agent past it equal), or the raw
return where the task has no reference, with the margin then 5 % of the
agent's own (`copy_margin`). `nodes.PBTControllerNode` applies these
decisions to a sweep's learners.
"""

import dataclasses
import math
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from acme_impala.envs import minatar
from acme_impala.envs import multitask

# Appendix F's adapted parameters, as IMPALAConfig fields (its Atari-57
# agent adapts the gradient-norm clip too: max_gradient_norm).
HYPERPARAMETERS = ('learning_rate', 'entropy_cost', 'rmsprop_epsilon')
PERTURB_PROBABILITY = 1 / 3  # "33% probability".
PERTURB_FACTOR = 1.2  # "either 1.2 or 1/1.2".
COPY_MARGIN = 0.05  # "more than an absolute 5% higher".


def validate(pbt_interval_steps: int, pbt_burn_in_steps: int,
             num_agents: int, evaluator: bool) -> None:
  """PBT's settings, before any process starts (no TensorFlow here:
  the programs call it before it loads)."""
  if pbt_interval_steps < 0:
    raise ValueError(f'pbt_interval_steps={pbt_interval_steps!r} is '
                     'invalid: expected learner steps >= 1, or 0 for no '
                     'PBT.')
  if pbt_burn_in_steps < 0:
    raise ValueError(f'pbt_burn_in_steps={pbt_burn_in_steps!r} is invalid: '
                     'expected learner steps >= 0.')
  if not pbt_interval_steps:
    return
  if num_agents < 2:
    raise ValueError(
        f'pbt_interval_steps={pbt_interval_steps} needs a population: this '
        'run has 1 agent (give a sweep, e.g. --learning_rates=1e-3,2e-3,'
        '4e-3,8e-3).')
  if not evaluator:
    raise ValueError(
        f'pbt_interval_steps={pbt_interval_steps} with --noevaluator: PBT '
        "ranks the agents by their evaluators' returns, so it needs them.")


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
           rng: np.random.Generator, margin: float = COPY_MARGIN
           ) -> Decision:
  """Appendix F's step for `agent`: exploit, then explore whatever it then
  has (the source's hyperparameters after a copy, its own otherwise).

  Args:
    agent: index of the agent that is due.
    fitness: [N] each agent's fitness (NaN: none yet).
    hyperparameters: [N] each agent's current values of HYPERPARAMETERS.
    rng: the controller's generator (its state is checkpointed with it).
    margin: how much better a partner must be to be copied.
  """
  if len(fitness) != len(hyperparameters):
    raise ValueError(f'evolve: {len(fitness)} fitness values for '
                     f'{len(hyperparameters)} agents.')
  source = exploit(agent, fitness, rng, margin)
  start = hyperparameters[agent if source is None else source]
  return Decision(agent=agent, source=source,
                  hyperparameters=explore(start, rng))


NEVER = -1  # `last_evolved` of an agent that has not evolved yet.


def due(learner_steps: Sequence[int], last_evolved: Sequence[int],
        interval: int, burn_in: int) -> Tuple[int, ...]:
  """The agents due to evolve: the first time once past `burn_in` learner
  steps (no evolution before, Appendix F's burn-in), then each time
  `interval` steps after their last evolution (`last_evolved`: the learner
  step of it, or NEVER)."""
  return tuple(i for i, (steps, last) in enumerate(zip(learner_steps,
                                                       last_evolved))
               if steps >= burn_in and (last == NEVER or
                                        steps - last >= interval))


def has_reference(env_id: str) -> bool:
  """Whether the task's score can be normalised (random play and AC(lambda)
  at 5M steps are known: the MinAtar games)."""
  return (env_id.startswith('MinAtar/') and
          minatar.game(env_id) in minatar.AC_LAMBDA_5M)


def recent_return(rounds: Sequence[Mapping[str, Any]], since: float,
                  window: int) -> float:
  """The mean episode return of the last `window` evaluation rounds that
  started at or after `since` (weights fetched after the agent's last
  copy), each round weighted by its episodes; NaN if there is none.
  `rounds`: oldest first, each {'start_time', 'mean_return', 'episodes'}."""
  kept = [r for r in rounds if r['start_time'] >= since][-window:]
  if not kept:
    return math.nan
  episodes = np.array([r['episodes'] for r in kept], float)
  returns = np.array([r['mean_return'] for r in kept], float)
  return float(np.sum(episodes * returns) / np.sum(episodes))


def fitness(returns: Mapping[str, float]) -> float:
  """An agent's fitness from its recent return on each task: the mean
  capped normalised score for several tasks (IMPALA section 5.3 and
  Appendix F), the uncapped normalised score for one task with a
  reference, else the raw return. NaN when any task has no return yet."""
  if not returns or any(math.isnan(r) for r in returns.values()):
    return math.nan
  if len(returns) > 1:
    return multitask.suite_score(returns)
  (env_id, value), = returns.items()
  return multitask.normalised_score(env_id, value) if has_reference(
      env_id) else float(value)


def copy_margin(task_ids: Sequence[str], agent_fitness: float) -> float:
  """How much better a partner must be to be copied: Appendix F's absolute
  0.05 on a normalised score, else 5 % of the agent's own raw return."""
  if all(has_reference(t) for t in task_ids):
    return COPY_MARGIN
  return COPY_MARGIN * abs(agent_fitness) if not math.isnan(
      agent_fitness) else COPY_MARGIN
