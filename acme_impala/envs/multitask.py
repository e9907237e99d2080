"""One agent on a suite of tasks (IMPALA section 5.3): compatible tasks and
their score.

A multi-task run has one learner and one set of weights; each actor plays
one task, fixed for the run, and the model is not told which. So every task
of a suite must have the same observation and action specs. For MinAtar (the
suites here) they do not as registered, and are made so in the way the
IMPALA paper does it for Atari-57 (Appendix G: "we train the multi-task
agent on the full Atari action set consisting of 18 actions"):

  * actions: MinAtar's full action set, the same 6 actions (no-op, left,
    up, right, down, fire) in every game, in place of each game's minimal
    set (Breakout's 3, Asterix's 5, ...). An action a game does not use
    does nothing in it, as on an Atari console;
  * observations: each game's C channels (4 to 10) padded with all-zero
    channels to the suite's largest C. A channel is one kind of object, so
    the padding adds objects that are never present; channel k means a
    different object in each game, which the network must tell apart from
    the scene itself, as for Atari's pixels.

The score of a suite is IMPALA's mean capped normalised score (Table G.1's
fitness): per task min(1, (R - random) / (reference - random)), averaged.
For MinAtar the reference is the MinAtar paper's AC(lambda) at 5M frames
and random is uniform play over the full action set (`minatar.py`).
"""

from typing import Dict, Mapping, Sequence, Tuple

import gymnasium
import numpy as np

from acme_impala.envs import minatar

# Named suites for `config.env_ids`.
SUITES: Dict[str, Tuple[str, ...]] = {'minatar5': tuple(minatar.ids())}


def task_ids(env_ids: Sequence[str]) -> Tuple[str, ...]:
  """`config.env_ids` with each suite name replaced by its ids, in order."""
  ids = []
  for name in env_ids:
    ids.extend(SUITES.get(name, (name,)))
  return tuple(ids)


def validate_task_ids(env_ids: Sequence[str]) -> Tuple[str, ...]:
  """The task ids of `env_ids` (`task_ids`); raises ValueError naming a bad
  entry: the suite needs 2 or more distinct MinAtar ids."""
  ids = task_ids(env_ids)
  for env_id in ids:
    if not minatar.ID_PATTERN.match(env_id):
      raise ValueError(
          f'env_ids: {env_id!r} cannot be a task of a multi-task run: '
          'expected MinAtar ids (MinAtar/<Game>-v1, whose specs are made '
          f'compatible) or a suite, one of {sorted(SUITES)}.')
  duplicates = sorted({i for i in ids if ids.count(i) > 1})
  if duplicates:
    raise ValueError(f'env_ids={tuple(env_ids)!r}: {duplicates} given more '
                     'than once; expected distinct tasks.')
  if len(ids) < 2:
    raise ValueError(f'env_ids={tuple(env_ids)!r}: a multi-task run needs '
                     'at least 2 tasks (for one, set env_id).')
  return ids


def task_name(env_id: str) -> str:
  """A short lower-case name for labels and log directories:
  'MinAtar/Breakout-v1' -> 'breakout'."""
  return env_id.split('/')[-1].split('-')[0].lower()


class PadChannels(gymnasium.ObservationWrapper):
  """Observations [H, W, C] padded with zero channels to [H, W, channels]."""

  def __init__(self, env: gymnasium.Env, channels: int):
    super().__init__(env)
    space = env.observation_space
    *rest, own = space.shape
    if channels < own:
      raise ValueError(f'PadChannels: channels={channels} is below the '
                       f'environment\'s {own}.')
    self._pad = [(0, 0)] * len(rest) + [(0, channels - own)]
    # The padding has the bounds of the game's own channels (every task of
    # a suite then has one spec), though it is always 0.
    low, high = (np.broadcast_to(b, space.shape) for b in (space.low,
                                                          space.high))
    self.observation_space = gymnasium.spaces.Box(
        low=np.pad(low, self._pad, constant_values=low.min()),
        high=np.pad(high, self._pad, constant_values=high.max()),
        dtype=space.dtype)

  def observation(self, observation):
    return np.pad(observation, self._pad)


def normalised_score(env_id: str, mean_return: float) -> float:
  """(R - random) / (reference - random) for one task, uncapped."""
  game = minatar.game(env_id)
  random = minatar.RANDOM_RETURNS[game]
  return (mean_return - random) / (minatar.AC_LAMBDA_5M[game] - random)


def suite_score(mean_returns: Mapping[str, float]) -> float:
  """Mean over tasks of min(1, normalised score): IMPALA's mean capped
  normalised score. `mean_returns`: {task id: mean episode return}."""
  if not mean_returns:
    raise ValueError('suite_score needs the return of at least one task.')
  return float(np.mean([min(1., normalised_score(env_id, r))
                        for env_id, r in mean_returns.items()]))
