"""The single-process agent: built from the builder, with LASER's replay
(warm-up, then mixed batches) and with replay only.

That the agent learns is tested on the program (tests/test_docs.py: the
README's train command at 100k env steps, about 30 s); the single-process
loop, about 2 minutes for 40k steps on the slower CPU kind, is measured by
benchmarks/cartpole_single_process.py instead."""

import acme
from acme import specs
from acme.utils import counting
from acme.utils import loggers
import numpy as np

from acme_impala.agent import agent as agent_lib
from acme_impala.agent import presets
from acme_impala.envs import registry


def test_single_process_agent_learns_from_laser_replay():
  """The single-process agent is built from the builder, so LASER works in
  it: 1 online + 7 replayed rows per batch, trust region, shared tables."""
  # Batches of 8 (the cartpole config's before issue 13): 1 online row per
  # batch, which the counts below assume.
  config = presets.get_config('cartpole').replace(
      replay_fraction=0.875, kl_threshold=0.5, entropy_on_online_only=True,
      min_replay_size=16, replay_capacity=2000, seed=0, batch_size=8,
      learning_rate=2e-3)
  env = registry.make_environment(config.env_id, seed=0)
  rows = loggers.InMemoryLogger()
  agent = agent_lib.IMPALA(specs.make_environment_spec(env), config,
                           logger=rows)
  counter = counting.Counter()
  episode_log = loggers.InMemoryLogger()
  acme.EnvironmentLoop(env, agent, counter=counter,
                       logger=episode_log).run(num_steps=3000)
  # Items still in flight are not yet in the tables' sizes.
  agent.flush(timeout_ms=10_000)
  info = agent.server.localhost_client().server_info()
  sizes = {name: t.current_size for name, t in info.items()}
  assert set(sizes) == {'priority_table', 'replay'}
  # The replay holds every finished episode (the paper's recompute, the
  # default), except those whose last transition is in a window not yet
  # complete: an episode item is written with that window, and a window
  # completes within unroll_length steps of the episode's end.
  episodes = counter.get_counts()['episodes']
  ends = np.cumsum([row['episode_length'] for row in episode_log.data])
  pending = int(np.sum(ends > ends[-1] - config.unroll_length))
  assert episodes - pending <= sizes['replay'] <= episodes, (
      sizes['replay'], episodes, pending)
  trajectories = info['priority_table'].rate_limiter_info.insert_stats.completed
  assert trajectories >= 3000 // config.unroll_length - 1
  assert sizes['priority_table'] < config.num_online + 4
  # Below min_replay_size episodes the batches are all online (8 rows),
  # then 1 online + 7 replayed; every online trajectory learned from once
  # (bar what is still in flight).
  kinds = [(row['online_rows'], row['replayed_rows']) for row in rows.data]
  warm_up = kinds.index((1, 7))
  assert warm_up >= 1
  assert set(kinds[:warm_up]) == {(8, 0)} and set(kinds[warm_up:]) == {(1, 7)}
  learned = sum(online for online, _ in kinds)
  assert trajectories - 60 <= learned <= trajectories
  last = rows.data[-1]
  for key in ('rejected_fraction_online', 'rejected_fraction_replay',
              'replay_staleness_mean', 'walk_start_fraction'):
    assert np.isfinite(last[key]), (key, last)
  # Replayed rows (uniform over ~300 trajectories) were written by much
  # older weights than the newest online row.
  assert last['replay_staleness_mean'] > last['policy_lag_mean'] + 10
  agent.close()


def test_single_process_agent_replay_only_learns_at_the_rate_data_arrives():
  """f = 1 has no queue: one learner step per num_replayed * unroll_length
  new environment steps (the rate at which new data enters the replay)."""
  # Batches of 8: enough learner steps in this budget to check the rate.
  config = presets.get_config('cartpole').replace(
      replay_fraction=1.0, min_replay_size=8, replay_capacity=1000, seed=0,
      batch_size=8)
  env = registry.make_environment(config.env_id, seed=0)
  agent = agent_lib.IMPALA(specs.make_environment_spec(env), config,
                           logger=loggers.NoOpLogger())
  counter = counting.Counter()
  acme.EnvironmentLoop(env, agent, counter=counter,
                       logger=loggers.NoOpLogger()).run(num_steps=2000)
  steps = counter.get_counts()['steps']
  assert set(agent.server.localhost_client().server_info()) == {'replay'}
  expected = steps // (config.batch_size * config.unroll_length)
  assert expected >= 25
  assert expected - 1 <= agent.learner.num_steps <= expected
  agent.close()
