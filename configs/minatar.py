"""MinAtar (Young and Tian 2019): the MinAtar paper's torso into IMPALA's LSTM.

The network is the paper's (conv 16 filters 3x3 stride 1, ReLU, FC 128,
ReLU; `networks.minatar_torso`) feeding an LSTM with the last action and
reward, as IMPALA's network does elsewhere. MinAtar has no frame skip, so
env steps are frames, and its 10x10 observations are 0/1 channels (not
scaled).

PROVISIONAL (issue 37): the values below are a starting point, each with
where it comes from; the small tuning sweep on Breakout and SpaceInvaders
that is to justify them by measurement has not run yet
(docs/benchmarks.md#minatar lists what has run and what is still to run).
Asterix, Freeway and Seaquest are never tuned on.
"""

from acme_impala.agent import config as config_lib


def get_config() -> config_lib.IMPALAConfig:
  return config_lib.IMPALAConfig(
      env_id='MinAtar/Breakout-v1',
      network='minatar',
      # The torso's width (FC 128); the LSTM keeps it.
      lstm_size=128,
      # IMPALA's unroll (Table G.1); batches of 32 as the cartpole preset,
      # whose learner keeps the policy lag at 2-3 updates with 2 x 32
      # environments.
      unroll_length=20,
      batch_size=32,
      discount=0.99,
      # Table G.1's.
      baseline_cost=0.5,
      # The MinAtar paper's actor-critic: entropy bonus 0.01 and RMSProp
      # step size 2^-8 (about 3.9e-3), close to the cartpole preset's 4e-3
      # with the same mean-reduced loss.
      entropy_cost=0.01,
      learning_rate=4e-3,
      rmsprop_decay=0.99,
      rmsprop_epsilon=1e-5,
      rmsprop_momentum=0.0,
      # As the cartpole preset (tuned with the mean-reduced loss).
      rmsprop_initial_mean_square=0.0,
      max_gradient_norm=40.0,
      # MinAtar pays 0 or 1 a step: clipping changes nothing, and keeps
      # the LSTM's reward input in [-1, 1].
      reward_clipping='abs_one',
      # One batched policy call for 32 environments per actor, as the
      # cartpole preset; EnvPool has no MinAtar games.
      envs_per_actor=32,
      env_engine='gymnasium',
      # Two batches: bounds the policy lag; actors block when it is full.
      max_queue_size=64,
  )
