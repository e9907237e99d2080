"""The single-process agent learns: CartPole return rises."""

import acme
from acme import specs
from acme.utils import loggers
import numpy as np

from acme_impala import agent as agent_lib
from acme_impala import environments
from acme_impala import configs


class _Returns(loggers.Logger):
  def __init__(self):
    self.returns = []

  def write(self, data):
    self.returns.append(float(data['episode_return']))

  def close(self):
    pass


def test_single_process_agent_return_rises_on_cartpole():
  # Small batches: many updates per environment step, so the rise shows
  # within a test budget (about 40k steps, 1-2 minutes here).
  config = configs.get_config('cartpole').replace(
      batch_size=8, unroll_length=10, learning_rate=2e-3, seed=0)
  env = environments.make_environment(config.env_id, seed=0)
  agent = agent_lib.IMPALA(specs.make_environment_spec(env), config,
                           logger=loggers.NoOpLogger())
  log = _Returns()
  loop = acme.EnvironmentLoop(env, agent, logger=log)
  loop.run(num_steps=40_000)
  returns = np.array(log.returns)
  first, last = returns[:50].mean(), returns[-20:].mean()
  # A uniform random policy averages ~22 on CartPole.
  assert first < 40
  # Measured here: ~20 -> ~43 over these 40k steps (it reaches ~170 by
  # 110k); the margin allows for run-to-run noise.
  assert last > 1.6 * first, (first, last)
  assert agent.learner.num_steps > 100
  agent.close()
