"""MinAtar (Young and Tian 2019) through the optional `minatar` package.

Observations `uint8[10, 10, C]`. The package is imported only when a MinAtar id is
made, since it pulls pandas and seaborn.
"""

import importlib.util
import re
from typing import List

import gymnasium

ID_PATTERN = re.compile(r'^MinAtar/[A-Za-z0-9]+-v1$')
# The games minatar 1.0.15 registers; listed here so that messages and
# `known_environment_ids` need not import minatar (which pulls pandas and seaborn).
GAMES = ('Asterix', 'Breakout', 'Freeway', 'Seaquest', 'SpaceInvaders')
# Every game's full action set: no-op, left, up, right, down, fire (the
# `-v1` ids give each game its minimal set).
NUM_FULL_ACTIONS = 6
# Young and Tian 2019 (kenjyoung/MinAtar), actor-critic AC(lambda=0.8): the
# average return of the last 100 training episodes at 5M frames, 30 runs.
AC_LAMBDA_5M = {'Breakout': 17.5, 'SpaceInvaders': 185., 'Asterix': 19.,
                'Freeway': 47., 'Seaquest': 15.}
# Uniform random play over the full action set: the mean return of 1,000
# episodes per game (seeds 0-999), measured with
# `python benchmarks/minatar_random.py` (docs/benchmarks.md#minatar-random-play).
RANDOM_RETURNS = {'Asterix': 0.471, 'Breakout': 0.520, 'Freeway': 0.137,
                  'Seaquest': 0.111, 'SpaceInvaders': 2.910}


def available() -> bool:
  return importlib.util.find_spec('minatar') is not None


def ids() -> List[str]:
  return [f'MinAtar/{game}-v1' for game in GAMES]


def register() -> None:
  try:
    import minatar.gym  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ValueError(
        'MinAtar ids (MinAtar/<Game>-v1) need the optional package minatar '
        f'(pip install minatar==1.0.15), which failed to import: {e}') from e
  if not any(i.startswith('MinAtar/') for i in gymnasium.registry):
    minatar.gym.register_envs()


def game(env_id: str) -> str:
  """'MinAtar/Breakout-v1' -> 'Breakout'."""
  return env_id[len('MinAtar/'):-len('-v1')]
