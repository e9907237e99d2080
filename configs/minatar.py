"""MinAtar (Young and Tian 2019): the MinAtar paper's torso into IMPALA's LSTM.

The network is the paper's (conv 16 filters 3x3 stride 1, ReLU, FC 128,
ReLU; `networks.minatar_torso`) feeding an LSTM with the last action and
reward, as IMPALA's network does elsewhere. MinAtar has no frame skip, so
env steps are frames, and its 10x10 observations are 0/1 channels (not
scaled).

Tuned on Breakout and SpaceInvaders only, seed 0, 2M env steps per run
(docs/benchmarks.md#minatar-tuning): the learning rate (2e-3, 4e-3, 8e-3),
the batch (16, 32) and the entropy cost (0.01, 0.03), one at a time from
these values. Asterix, Freeway and Seaquest are never tuned on: they show
whether the preset generalises. Values marked "not varied" were not swept.
"""

from acme_impala.agent import config as config_lib


def get_config() -> config_lib.IMPALAConfig:
  return config_lib.IMPALAConfig(
      env_id='MinAtar/Breakout-v1',
      network='minatar',
      # The torso's width (FC 128); the LSTM keeps it (not varied).
      lstm_size=128,
      # IMPALA's unroll (Table G.1; not varied). Batch 32: Breakout 17.2 at
      # 2M against 13.6 with batch 16, which also ran slower (3.7k against
      # 4.4k env steps/s, both beside other work: the learner's cost per
      # step falls less than its batch); the policy lag stays at 2-3
      # updates with 2 x 32 environments.
      unroll_length=20,
      batch_size=32,
      discount=0.99,
      # Table G.1's (not varied).
      baseline_cost=0.5,
      # The MinAtar paper's actor-critic's entropy bonus. 0.03 kept the
      # policy's entropy higher (0.64 against 0.19 nats at 1.2M on
      # SpaceInvaders) but finished lower: 32.4 against 46.4 at 2M.
      entropy_cost=0.01,
      # 8x the MinAtar actor-critic's RMSProp step (2^-11 in its
      # examples/AC_lambda.py, an online update of one transition), with
      # the mean-reduced loss over 32 x 20 transitions. At 2M: SpaceInvaders 46.4 (4e-3) against 22.5
      # (2e-3) and 39.0 (8e-3); Breakout 17.2 against 17.6 (8e-3). 4e-3 is
      # the best on both taken together.
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
