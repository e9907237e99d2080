"""Random play on MinAtar: the floor of the multi-task suite score.

Plays `--episodes` episodes of each game (episode i seeded with i) with
actions drawn uniformly from the full action set (6 actions, as a
multi-task agent acts: `acme_impala.envs.multitask`), and prints a table of
the mean return (with its standard error) per game. The means are
`acme_impala.envs.minatar.RANDOM_RETURNS`; the script says where they
differ from the table it measured.

  python benchmarks/minatar_random.py --episodes=1000
"""

import os
import sys
import time

from absl import app
from absl import flags
import numpy as np
import provenance  # pylint: disable=g-import-not-at-top

from acme_impala.envs import minatar  # pylint: disable=g-import-not-at-top
from acme_impala.envs import registry  # pylint: disable=g-import-not-at-top

# This script's directory (sys.path[0]) holds benchmarks/minatar.py, which
# would shadow the MinAtar package that making an environment imports.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != _HERE]

flags.DEFINE_integer('episodes', 1000, 'Episodes per game.', lower_bound=1)
flags.DEFINE_list('games', list(minatar.GAMES), 'Games to play.')
FLAGS = flags.FLAGS


def play(env_id: str, episodes: int) -> np.ndarray:
  """The return of each of `episodes` uniformly random episodes [episodes]."""
  returns = np.zeros(episodes)
  rng = np.random.default_rng(0)
  for i in range(episodes):
    env = registry.make_environment(env_id, seed=i, oar=False,
                                    full_action_set=True)
    timestep = env.reset()
    num_actions = env.action_spec().num_values
    while not timestep.last():
      timestep = env.step(rng.integers(num_actions))
      returns[i] += timestep.reward
    env.close()
  return returns


def main(argv):
  del argv
  bad = sorted(set(FLAGS.games) - set(minatar.GAMES))
  if bad:
    sys.exit(f'minatar_random.py: error: --games: {bad} are not MinAtar '
             f'games; expected some of {list(minatar.GAMES)}.')
  print(f'minatar_random.py at {provenance.stamp()}: {FLAGS.episodes} '
        'episodes per game, uniform over the full action set.\n')
  print('| game | mean return | standard error | in RANDOM_RETURNS | seconds |')
  print('|---|---:|---:|---:|---:|')
  differ = []
  for game in FLAGS.games:
    start = time.time()
    returns = play(f'MinAtar/{game}-v1', FLAGS.episodes)
    mean = returns.mean()
    sem = returns.std(ddof=1) / np.sqrt(len(returns)) if len(returns) > 1 else 0.
    kept = minatar.RANDOM_RETURNS[game]
    print(f'| {game} | {mean:.3f} | {sem:.3f} | {kept:g} | '
          f'{time.time() - start:.0f} |', flush=True)
    if FLAGS.episodes >= 1000 and abs(mean - kept) > max(3 * sem, 0.01):
      differ.append(game)
  if differ:
    print(f'\nRANDOM_RETURNS differs from this table for {differ}.')


if __name__ == '__main__':
  app.run(main)
