"""An environment loop for K environments stepped in lockstep by one actor.

With K = 1 use Acme's own `EnvironmentLoop`. This loop keeps the same
logging contract (`episode_return`, `episode_length`, `steps_per_second`,
the counter's `actor_steps`), but counts steps in bulk, because the counter
of a distributed program is a remote call. The K environments are one
`batched.BatchedEnvironment` (gymnasium or EnvPool engine), whose
finished environments restart on the next step (dm_env's auto-reset).
"""

import time
from typing import Callable, Dict, List, Optional

from acme.utils import counting
from acme.utils import loggers
import dm_env
import numpy as np

from acme_impala.agent import acting
from acme_impala.envs import adapter
from acme_impala.envs import batched


def observe_firsts(actor: acting.BatchedIMPALAActor,
                   timesteps: dm_env.TimeStep, rows) -> None:
  """The actor starts an episode in each of `rows` (its LSTM rows reset)."""
  for i in rows:
    actor.observe_first(int(i), adapter.timestep_row(timesteps, i))


def observe_step(actor: acting.BatchedIMPALAActor, actions: np.ndarray,
                 timesteps: dm_env.TimeStep) -> np.ndarray:
  """The actor records the step `actions` made and starts an episode in each
  row that restarted (dm_env's auto-reset); returns those rows."""
  actor.observe(actions, timesteps)
  restarted = np.flatnonzero(
      np.asarray(timesteps.step_type) == int(dm_env.StepType.FIRST))
  observe_firsts(actor, timesteps, restarted)
  return restarted


class BatchedEnvironmentLoop:
  """Runs a BatchedEnvironment with a BatchedIMPALAActor."""

  def __init__(
      self,
      environment: batched.BatchedEnvironment,
      actor: acting.BatchedIMPALAActor,
      counter: Optional[counting.Counter] = None,
      logger: Optional[loggers.Logger] = None,
      should_update: bool = True,
      count_every: int = 1000,
  ):
    if environment.num_envs != actor.num_envs:
      raise ValueError(f'Got {environment.num_envs} environments for an '
                       f'actor of num_envs={actor.num_envs}.')
    self._env = environment
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

    Returns the number of environment steps taken (a step that only
    restarts a finished environment is not one).
    """
    k = self._env.num_envs
    if self._timesteps is None:
      # Episodes carry on across run() calls, as the adders' streams do.
      self._timesteps = self._env.reset()
      observe_firsts(self._actor, self._timesteps, range(k))
      self._returns = np.zeros(k)
      self._lengths = np.zeros(k, np.int64)
    returns, lengths = self._returns, self._lengths
    steps = 0
    uncounted = 0
    start = time.time()
    counts = self._counter.get_counts()
    while num_steps is None or steps < num_steps:
      if should_stop is not None and should_stop():
        break
      actions = self._actor.select_actions(self._timesteps.observation)
      timesteps = self._env.step(actions)
      self._timesteps = timesteps
      restarted = observe_step(self._actor, actions, timesteps)
      step_types = np.asarray(timesteps.step_type)
      stepped = k - len(restarted)
      returns += timesteps.reward  # 0 on restarted rows.
      lengths += step_types != int(dm_env.StepType.FIRST)
      steps += stepped
      uncounted += stepped
      for i in np.flatnonzero(step_types == int(dm_env.StepType.LAST)):
        episode = {'episode_return': float(returns[i]),
                   'episode_length': int(lengths[i])}
        returns[i], lengths[i] = 0., 0
        episode['steps_per_second'] = steps / max(time.time() - start, 1e-9)
        episode.update(counts)
        episode['actor_steps'] = counts.get('actor_steps', 0)
        self._logger.write(episode)
      if self._should_update:
        self._actor.update()
      if uncounted >= self._count_every:
        counts = self._counter.increment(steps=uncounted)
        uncounted = 0
    if uncounted:
      self._counter.increment(steps=uncounted)
    return steps


def evaluation_episodes(
    environment: batched.BatchedEnvironment,
    actor: acting.BatchedIMPALAActor,
    should_stop: Optional[Callable[[], bool]] = None,
    stop_check_every: int = 100,
) -> Optional[List[Dict[str, float]]]:
  """One episode in each of the K environments, played at once.

  An evaluation round: every environment restarts, the K episodes run side
  by side with one policy call per step and the actor's current weights
  (the caller refreshes them before the round, not during it), and each
  environment counts only its first episode, so the K returns are an
  unbiased sample of one policy's returns however long each episode is.
  Rows that finished keep stepping (auto-reset) until the last one ends;
  their further episodes are not counted.

  Returns K rows (`episode_return`, `episode_length`, `steps_per_second`:
  counted environment steps per second of the round), or None when
  `should_stop()` became true (checked every `stop_check_every` steps).
  """
  k = environment.num_envs
  if k != actor.num_envs:
    raise ValueError(f'Got {k} environments for an actor of '
                     f'num_envs={actor.num_envs}.')
  timesteps = environment.reset()
  observe_firsts(actor, timesteps, range(k))
  returns = np.zeros(k)
  lengths = np.zeros(k, np.int64)
  done = np.zeros(k, bool)
  start = time.time()
  steps = 0
  while not done.all():
    if should_stop is not None and steps % stop_check_every == 0 and (
        should_stop()):
      return None
    timesteps = environment.step(actor.select_actions(timesteps.observation))
    step_types = np.asarray(timesteps.step_type)
    counted = ~done & (step_types != int(dm_env.StepType.FIRST))
    returns[counted] += np.asarray(timesteps.reward)[counted]
    lengths[counted] += 1
    done |= counted & (step_types == int(dm_env.StepType.LAST))
    observe_firsts(actor, timesteps,
                   np.flatnonzero(step_types == int(dm_env.StepType.FIRST)))
    steps += 1
  rate = lengths.sum() / max(time.time() - start, 1e-9)
  return [{'episode_return': float(returns[i]),
           'episode_length': int(lengths[i]),
           'steps_per_second': float(rate)} for i in range(k)]
