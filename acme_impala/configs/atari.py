"""Atari: the hyperparameters of Table G.1 of the IMPALA paper.

Frame preprocessing of Table G.1 (84x84 gray, action repeat 4, max-pool over
the last 2 frames, 4-frame stack, end of episode on life loss) is done by
acme_impala.environments; the learning rate is annealed linearly to 0 over the
run (the launcher sets lr_anneal_steps from the step budget).
"""

from acme_impala import config as config_lib


def get_config() -> config_lib.IMPALAConfig:
  return config_lib.IMPALAConfig(
      env_id='ALE/Pong-v5',
      network='shallow',
      lstm_size=256,
      unroll_length=20,
      batch_size=32,
      discount=0.99,
      baseline_cost=0.5,
      entropy_cost=0.01,
      reward_clipping='abs_one',
      learning_rate=0.0006,
      rmsprop_decay=0.99,
      rmsprop_epsilon=0.01,
      rmsprop_momentum=0.0,
      max_gradient_norm=40.0,
  )
