"""An environment loop for K environments stepped in lockstep by one actor.

With K = 1 use Acme's own `EnvironmentLoop`. This loop keeps the same
logging contract (`episode_return`, `episode_length`, `steps_per_second`,
the counter's `actor_steps`), but counts steps in bulk, because the counter
of a distributed program is a remote call.
"""

import time
from typing import Callable, Optional, Sequence

from acme.utils import counting
from acme.utils import loggers
import dm_env
import numpy as np

from acme_impala import acting


class BatchedEnvironmentLoop:
  """Runs K dm_env environments with a BatchedIMPALAActor."""

  def __init__(
      self,
      environments: Sequence[dm_env.Environment],
      actor: acting.BatchedIMPALAActor,
      counter: Optional[counting.Counter] = None,
      logger: Optional[loggers.Logger] = None,
      should_update: bool = True,
      count_every: int = 1000,
  ):
    if len(environments) != actor.num_envs:
      raise ValueError(f'Got {len(environments)} environments for an actor '
                       f'of num_envs={actor.num_envs}.')
    self._envs = list(environments)
    self._actor = actor
    self._counter = counter or counting.Counter()
    self._logger = logger or loggers.make_default_logger('actor')
    self._should_update = should_update
    self._count_every = count_every
    self._timesteps = None
    self._returns = None
    self._lengths = None

  def run(self, num_steps: Optional[int] = None,
          should_stop: Optional[Callable[[], bool]] = None) -> int:
    """Steps all environments until `num_steps` (summed) or `should_stop()`.

    Returns the number of environment steps taken.
    """
    k = len(self._envs)
    if self._timesteps is None:
      # Episodes carry on across run() calls, as the adders' streams do.
      self._timesteps = [env.reset() for env in self._envs]
      for i, ts in enumerate(self._timesteps):
        self._actor.observe_first(i, ts)
      self._returns = np.zeros(k)
      self._lengths = np.zeros(k, np.int64)
    timesteps, returns, lengths = (self._timesteps, self._returns,
                                   self._lengths)
    steps = 0
    uncounted = 0
    start = time.time()
    counts = self._counter.get_counts()
    while num_steps is None or steps < num_steps:
      if should_stop is not None and should_stop():
        break
      actions = self._actor.select_actions(
          [ts.observation for ts in timesteps])
      for i, env in enumerate(self._envs):
        timesteps[i] = env.step(actions[i])
      self._actor.observe(actions, timesteps)
      for i, ts in enumerate(timesteps):
        returns[i] += ts.reward
        lengths[i] += 1
        if ts.last():
          episode = {'episode_return': float(returns[i]),
                     'episode_length': int(lengths[i])}
          returns[i], lengths[i] = 0., 0
          timesteps[i] = self._envs[i].reset()
          self._actor.observe_first(i, timesteps[i])
          episode['steps_per_second'] = steps / max(time.time() - start,
                                                    1e-9)
          episode.update(counts)
          episode['actor_steps'] = counts.get('actor_steps', 0)
          self._logger.write(episode)
      steps += k
      uncounted += k
      if self._should_update:
        self._actor.update()
      if uncounted >= self._count_every:
        counts = self._counter.increment(steps=uncounted)
        uncounted = 0
    if uncounted:
      self._counter.increment(steps=uncounted)
    return steps
