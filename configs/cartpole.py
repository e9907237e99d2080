"""CartPole-v1: a small MLP+LSTM agent that trains in minutes on 2 cores.

Table G.1's Atari values are kept where they transfer (discount, RMSProp
momentum 0 and decay, gradient-norm clip, reward clipping); the learning
rate, baseline and entropy costs and ε are tuned for this small, dense-reward
task (the paper sweeps them per domain, Table D.1). The tuning runs are in
docs/benchmarks.md#learning-the-default-cartpole-program.
"""

from acme_impala.agent import config as config_lib


def get_config() -> config_lib.IMPALAConfig:
  return config_lib.IMPALAConfig(
      env_id='CartPole-v1',
      network='mlp_lstm',
      mlp_hidden_sizes=(64, 64),
      lstm_size=64,
      # Short unrolls, and batches of 32 of them: with 2 actors x 32
      # environments the learner is the bottleneck, and a batch of 8 ran
      # ~115 updates/s whose policy lag (20-35 updates) slowed learning; 32
      # keeps the lag at 2-3 updates
      # (docs/benchmarks.md#learning-the-default-cartpole-program).
      unroll_length=10,
      batch_size=32,
      discount=0.99,
      # CartPole pays +1 per step, so with discount 0.99 values reach ~100
      # (Atari's clipped rewards keep them small). At Table G.1's 0.5 the
      # baseline's squared error dominated the gradient of the torso and LSTM
      # the policy shares, and the default program stalled at returns of
      # 90-200 in 3 of 3 seeds; at 0.1 every seed tried reached 400+.
      baseline_cost=0.1,
      # The evaluator samples from pi, so an average of 450 needs a nearly
      # deterministic policy: 0.01 held the entropy near 0.5 nats and the
      # average near 420; with 0.003 the default program passed 450 in 7 of
      # 8 runs, and took all three tuning seeds past 450
      # (benchmarks/results/cartpole_tuning.md).
      entropy_cost=0.003,
      reward_clipping='abs_one',
      # With batch 32: 4e-3 reached an evaluator mean of 475 sooner than
      # 2e-3 or 6e-3 (66 s against 76 s and 100 s to 475, one run each;
      # the exploration is in the README of cbc1dd0).
      learning_rate=4e-3,
      rmsprop_decay=0.99,
      rmsprop_epsilon=1e-5,
      rmsprop_momentum=0.0,
      # Sonnet's start of the mean square, not the paper's 1: these values
      # were tuned with it (benchmarks/results/cartpole_tuning.md), and with
      # the mean-reduced loss the gradients are ~1e-2, so starting at 1
      # makes the first few hundred updates ~100x smaller (the
      # single-process agent's return then rose 23 -> 35 in 40k steps
      # instead of 20 -> 43).
      rmsprop_initial_mean_square=0.0,
      max_gradient_norm=40.0,
      # One batched policy call per step for 32 environments per actor:
      # about 4x the env steps/s of 8 per actor, with the batch and learning
      # rate above (with batch 8 it learned less per step:
      # benchmarks/results/envs_per_actor_exploration.txt).
      envs_per_actor=32,
      # EnvPool: the same data as gymnasium's CartPole (tests), a faster
      # actor; the default program's rate is learner-bound and the same with
      # either (docs/benchmarks.md#environment-engines), so the gain is CPU
      # left to the learner.
      env_engine='envpool',
      # A short queue (2 batches) bounds policy lag; actors block when it
      # is full.
      max_queue_size=64,
  )
