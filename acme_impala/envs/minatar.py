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
