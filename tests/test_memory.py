"""Memory of the actor's and the evaluator's loops stays flat (issue 16).

Each case runs in a fresh Python process (no other test's servers, threads
or caches in its memory) and prints its resident-memory growth over a
measured stretch after a warm-up:

  - `actor`: the actor node's loop as the node wires it: BatchedEnvironment-
    Loop, the builder's BatchedIMPALAActor (8 CartPoles, one policy call per
    step) and batched adder into a real Reverb queue drained as a learner
    would, an Acme counter and the node's CSV + TensorBoard logger;
  - `evaluator`: the evaluator's: one CartPole, the builder's IMPALAActor,
    one policy call per step, whole episodes;
  - `plain_function`: the control. The same network behind a tf.function
    that is not XLA-compiled, called as often: on TF 2.8 each call leaks
    ~420 bytes (tensorflow#50765), what made actors grow ~6 MB/min.

The bound (1.5 MB over 10,000 policy calls) is ~1/3 of what that leak adds
over the same calls (~4 MB) and well above the noise measured here
(< 0.1 MB).
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALLS = 10_000  # Policy calls measured, after as many for warm-up.
BOUND_MB = 1.5


def _probe(case: str) -> dict:
  proc = subprocess.run(
      [sys.executable, os.path.abspath(__file__), case], cwd=ROOT,
      capture_output=True, text=True, timeout=400)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('case', ['actor', 'evaluator'])
def test_loop_memory_is_flat(case):
  result = _probe(case)
  assert result['calls'] >= CALLS
  assert result['growth_mb'] < BOUND_MB, result


def test_the_bound_catches_tensorflows_per_call_leak():
  result = _probe('plain_function')
  assert result['growth_mb'] > 2 * BOUND_MB, result


# --- the probes (run as `python tests/test_memory.py CASE`) -----------------

def _rss_mb() -> float:
  import psutil  # pylint: disable=g-import-not-at-top
  return psutil.Process().memory_info().rss / 2**20


def _measure(run_calls) -> dict:
  """Warm-up of CALLS policy calls, then RSS growth over CALLS more."""
  import gc  # pylint: disable=g-import-not-at-top
  run_calls(CALLS)
  gc.collect()
  before = _rss_mb()
  calls = run_calls(CALLS)
  gc.collect()
  return {'calls': calls, 'growth_mb': _rss_mb() - before}


def _actor_probe() -> dict:
  import tempfile  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  from acme.utils import counting  # pylint: disable=g-import-not-at-top
  import reverb  # pylint: disable=g-import-not-at-top
  from acme_impala import builder as builder_lib  # pylint: disable=g-import-not-at-top
  from acme_impala import configs  # pylint: disable=g-import-not-at-top
  from acme_impala import environments  # pylint: disable=g-import-not-at-top
  from acme_impala import loggers as loggers_lib  # pylint: disable=g-import-not-at-top
  from acme_impala import loops  # pylint: disable=g-import-not-at-top

  config = configs.get_config('cartpole')
  builder = builder_lib.IMPALABuilder(
      config, environments.environment_spec(config.env_id))
  server = reverb.Server(builder.make_replay_tables())
  client = reverb.Client(f'localhost:{server.port}')
  stop = threading.Event()

  def drain():  # As the learner does: the queue never blocks the writers.
    for _ in client.sample(builder.queue_table, num_samples=10**12):
      if stop.is_set():
        return
  threading.Thread(target=drain, daemon=True).start()
  k = config.envs_per_actor
  actor = builder.make_actor(builder.make_network(),
                             builder.make_adder(client, num_envs=k), seed=0,
                             num_envs=k)
  loop = loops.BatchedEnvironmentLoop(
      [environments.make_environment(config.env_id, seed=i)
       for i in range(k)], actor, counting.Counter(time_delta=1.0),
      loggers_lib.make_logger('actor_0', tempfile.mkdtemp(),
                              steps_key='actor_steps',
                              terminal_time_delta=3600.,
                              tensorboard_time_delta=1.0),
      should_update=False)
  result = _measure(lambda calls: loop.run(num_steps=calls * k) // k)
  stop.set()
  return result


def _evaluator_probe() -> dict:
  from acme_impala import builder as builder_lib  # pylint: disable=g-import-not-at-top
  from acme_impala import configs  # pylint: disable=g-import-not-at-top
  from acme_impala import environments  # pylint: disable=g-import-not-at-top

  config = configs.get_config('cartpole')
  builder = builder_lib.IMPALABuilder(
      config, environments.environment_spec(config.env_id))
  actor = builder.make_actor(builder.make_network(), seed=0)
  env = environments.make_environment(config.env_id, seed=0, evaluation=True)

  def run_calls(calls):
    done = 0
    while done < calls:  # Whole episodes, as the evaluator node plays them.
      timestep = env.reset()
      actor.observe_first(timestep)
      while not timestep.last():
        timestep = env.step(actor.select_action(timestep.observation))
        done += 1
    return done
  return _measure(run_calls)


def _plain_function_probe() -> dict:
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tree  # pylint: disable=g-import-not-at-top
  from acme_impala import builder as builder_lib  # pylint: disable=g-import-not-at-top
  from acme_impala import configs  # pylint: disable=g-import-not-at-top
  from acme_impala import environments  # pylint: disable=g-import-not-at-top

  config = configs.get_config('cartpole')
  spec = environments.environment_spec(config.env_id)
  network = builder_lib.IMPALABuilder(config, spec).make_network()
  k = config.envs_per_actor
  observation = tree.map_structure(
      lambda s: np.zeros((k,) + s.shape, s.dtype), spec.observations)
  state = network.initial_state(k)
  policy = tf.function(network.__call__, autograph=False)

  def run_calls(calls):
    for _ in range(calls):
      policy(observation, state)
    return calls
  return _measure(run_calls)


if __name__ == '__main__':
  sys.path.insert(0, ROOT)
  from acme_impala import quiet  # pylint: disable=g-import-not-at-top
  quiet.silence()
  probe = {'actor': _actor_probe, 'evaluator': _evaluator_probe,
           'plain_function': _plain_function_probe}[sys.argv[1]]
  print(json.dumps(probe()))
