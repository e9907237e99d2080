"""Data efficiency of the single-process agent on CartPole-v1.

Trains `acme_impala.agent.IMPALA` (one actor, the learner, an in-process
Reverb queue) and reports the environment steps and wall time it needed to
reach an average return of 450 over the last 20 episodes, or the best
20-episode average within the budget. Prints a Markdown table.

  python benchmarks/cartpole_single_process.py [--max_steps=600000]
      [--seeds=0] [--config.batch_size=8 ...]
"""

import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np

from acme_impala.agent import presets
from acme_impala.launch import config_flags
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # pylint: disable=g-import-not-at-top

flags.DEFINE_integer('max_steps', 600_000, 'Environment-step budget per seed.')
flags.DEFINE_float('max_seconds', 1800, 'Wall-time budget per seed.')
flags.DEFINE_list('seeds', ['0'], 'Seeds to run.')
flags.DEFINE_float('target', 450., 'Target 20-episode average return.')
FLAGS = flags.FLAGS

# The single-process agent updates once per B*T environment steps; small
# batches give it more updates per step (measured best of a few settings).
# The recorded run (docs/benchmarks.md#learning-the-single-process-agent): the cartpole config before its baseline and
# entropy costs were tuned for the distributed program (now 0.1 and 0.003;
# pass --config.baseline_cost=0.1 --config.entropy_cost=0.003 to use them).
DEFAULTS = dict(batch_size=8, unroll_length=10, learning_rate=2e-3,
                baseline_cost=0.5, entropy_cost=0.01)


def run_seed(seed, overrides):
  import acme  # pylint: disable=g-import-not-at-top
  from acme import specs  # pylint: disable=g-import-not-at-top
  from acme.utils import loggers  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import agent as agent_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import registry

  config = presets.get_config('cartpole').replace(
      **{**DEFAULTS, **overrides, 'seed': seed})
  env = registry.make_environment(config.env_id, seed=seed)
  agent = agent_lib.IMPALA(specs.make_environment_spec(env), config,
                           logger=loggers.NoOpLogger())
  loop = acme.EnvironmentLoop(env, agent, logger=loggers.NoOpLogger())
  returns, steps, start = [], 0, time.time()
  best, solved_at = 0., None
  while steps < FLAGS.max_steps and time.time() - start < FLAGS.max_seconds:
    result = loop.run_episode()
    steps += int(result['episode_length'])
    returns.append(float(result['episode_return']))
    if len(returns) >= 20:
      avg = float(np.mean(returns[-20:]))
      best = max(best, avg)
      if avg >= FLAGS.target:
        solved_at = (steps, time.time() - start)
        break
    if len(returns) % 200 == 0:
      print(f'  seed {seed}: {steps} steps, {time.time() - start:.0f} s, '
            f'avg20 {np.mean(returns[-20:]):.1f}', flush=True)
  agent.close()
  return dict(seed=seed, solved_at=solved_at, steps=steps,
              seconds=time.time() - start, best=best,
              learner_steps=agent.learner.num_steps)


def main(argv, overrides):
  del argv
  rows = [run_seed(int(s), overrides) for s in FLAGS.seeds]
  print(f'\ncartpole_single_process.py at {provenance.stamp()}: seeds '
        f'{",".join(FLAGS.seeds)}.')
  print('\n| seed | env steps to avg20 >= %.0f | wall time (s) | best avg20 | '
        'learner steps |' % FLAGS.target)
  print('|---|---:|---:|---:|---:|')
  for r in rows:
    if r['solved_at']:
      steps, secs = r['solved_at']
      print(f"| {r['seed']} | {steps} | {secs:.0f} | {r['best']:.1f} | "
            f"{r['learner_steps']} |")
    else:
      print(f"| {r['seed']} | not reached in {r['steps']} | "
            f"{r['seconds']:.0f} | {r['best']:.1f} | {r['learner_steps']} |")


if __name__ == '__main__':
  argv, texts = config_flags.split_config_overrides(sys.argv)
  app.run(lambda a: main(a, config_flags.parse_overrides(texts)), argv=argv)
