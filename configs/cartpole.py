"""CartPole-v1: a small MLP+LSTM agent that trains in minutes on 2 cores.

Table G.1's Atari values are kept where they transfer (discount, baseline
cost, RMSProp momentum 0 and decay, gradient-norm clip, reward clipping);
the learning rate, entropy cost and ε are tuned for this small, dense-reward
task (the paper sweeps them per domain, Table D.1).
"""

from acme_impala import config as config_lib


def get_config() -> config_lib.IMPALAConfig:
  return config_lib.IMPALAConfig(
      env_id='CartPole-v1',
      network='mlp_lstm',
      mlp_hidden_sizes=(64, 64),
      lstm_size=64,
      # Small batches of short unrolls: many updates per environment step,
      # which is what CartPole's data efficiency depends on here (the learner
      # has the capacity: ~10 ms per update on 2 cores).
      unroll_length=10,
      batch_size=8,
      discount=0.99,
      baseline_cost=0.5,
      entropy_cost=0.01,
      reward_clipping='abs_one',
      learning_rate=2e-3,
      rmsprop_decay=0.99,
      rmsprop_epsilon=1e-5,
      rmsprop_momentum=0.0,
      max_gradient_norm=40.0,
      # One batched policy call per step for 8 environments per actor.
      envs_per_actor=8,
      # A short queue bounds policy lag; actors block when it is full.
      max_queue_size=128,
  )
