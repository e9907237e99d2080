"""IMPALABuilder with replay: tables, one write per trajectory, exact
online/replay counts per learner batch from real Reverb tables."""

import acme
from acme import specs
import numpy as np
import pytest
import reverb
import tensorflow as tf

from acme_impala import builder as builder_lib
from acme_impala import config as config_lib
from acme_impala import environments

T = 5


def _setup(replay_fraction, batch_size=8):
  config = config_lib.IMPALAConfig(
      unroll_length=T, batch_size=batch_size, lstm_size=8,
      replay_fraction=replay_fraction, replay_capacity=1000,
      min_replay_size=4, max_queue_size=1000)
  env = environments.make_environment(config.env_id, seed=0)
  builder = builder_lib.IMPALABuilder(config, specs.make_environment_spec(env))
  server = reverb.Server(builder.make_replay_tables(), port=None)
  return config, env, builder, server


def _act(builder, env, server, version, steps):
  client = reverb.Client(f'localhost:{server.port}')
  net = builder.make_network()
  adder = builder.make_adder(client)
  actor = builder.make_actor(net, adder, None, seed=version)
  actor._policy_version.assign(version)  # pylint: disable=protected-access
  acme.EnvironmentLoop(env, actor, should_update=False).run(num_steps=steps)
  adder.flush()
  return client


def _sizes(client):
  info = client.server_info()
  return {name: t.current_size for name, t in info.items()}


@pytest.mark.parametrize('f,tables', [
    (0.0, {'priority_table'}), (0.5, {'priority_table', 'replay'}),
    (1.0, {'replay'})])
def test_tables_and_single_write(f, tables):
  config, env, builder, server = _setup(f)
  client = _act(builder, env, server, version=1, steps=200)
  sizes = _sizes(client)
  assert set(sizes) == tables
  # Each trajectory is written once and referenced by every table.
  assert len(set(sizes.values())) == 1 and min(sizes.values()) >= 30
  server.stop()


@pytest.mark.parametrize('f', [0.5, 0.875])
def test_batches_hold_exact_online_and_replay_counts(f):
  config, env, builder, server = _setup(f, batch_size=8)
  address = f'localhost:{server.port}'
  client = _act(builder, env, server, version=1, steps=300)
  # Drain the queue: from now on it only holds version-2 trajectories, while
  # the replay keeps the version-1 ones too.
  drain = builder._table_iterator(address, 'priority_table', 1, 500)  # pylint: disable=protected-access
  drained = sum(1 for _ in drain)
  assert drained >= 40
  _act(builder, env, server, version=2, steps=300)
  assert config.num_online == 8 - int(8 * f) and config.num_replayed == int(8 * f)

  iterator = builder.make_dataset_iterator(address)
  saw_old_in_replay = False
  for _ in range(5):
    data = next(iterator)
    assert data.action.shape[0] == 8
    versions = data.extras['policy_version'].numpy()[:, 0]
    online, replayed = versions[:config.num_online], versions[config.num_online:]
    assert len(online) == config.num_online and len(replayed) == config.num_replayed
    # Online rows come from the queue (version 2 only; a dummy step at the
    # start of an item carries 0).
    assert set(online) <= {0, 2}, versions
    saw_old_in_replay |= 1 in set(replayed)
  # Replay samples uniformly over both generations.
  assert saw_old_in_replay
  server.stop()


def test_replay_fraction_must_give_whole_trajectories():
  with pytest.raises(config_lib.ConfigError, match='whole number'):
    config_lib.IMPALAConfig(batch_size=8, replay_fraction=0.3)
  with pytest.raises(config_lib.ConfigError, match='min_replay_size'):
    config_lib.IMPALAConfig(replay_capacity=10, min_replay_size=20)
