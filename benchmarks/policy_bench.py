"""The actors' policy call: XLA, a graph through tf.data, a TF1 session.

Run as `python benchmarks/policy_bench.py` (`--quick`: a check that it runs).
For each network of the configs (CartPole's MLP+LSTM(64), the Atari
config's shallow torso + LSTM(256), and the deep torso) and each number K
of environments per actor, it times one policy step on K observations as
the batched actor makes it (an OAR nest with the previous action and reward,
the LSTM state as numpy arrays, the logits read back as numpy), four ways:

  - `xla`: `tf.function(jit_compile=True)` called eagerly (the actors'
    policy before this benchmark);
  - `graph`: the same function without XLA, called eagerly (TensorFlow's
    own kernels, oneDNN's with `TF_ENABLE_ONEDNN_OPTS=1`; leaks ~420 bytes
    per call on TF 2.8, so not usable as is: tests/test_memory.py);
  - `graph via tf.data`: the same graph run by `tf_calls.
    DataPipelineFunction` (`acting.policy_function`, the actors' policy now);
  - `session`: the same network built in a TF1 graph with its own copy of
    the weights, run by `Session.make_callable` (the lowest per-call cost
    TensorFlow 2.8 offers without XLA, and no per-call leak; measured, not
    adopted: the copy would have to follow every change of the network's
    weights, see docs/benchmarks.md#policy-step).

The four are checked to give the same logits (to 1% of their scale) first.
Repeats are interleaved (the order rotated each round) and the median
reported.
"""

import argparse
import os
import statistics
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# pylint: disable=g-import-not-at-top
import acme_impala  # pylint: disable=unused-import  # Sets oneDNN first.
from acme.wrappers import observation_action_reward
import numpy as np
import tensorflow as tf
import tree

from acme_impala.agent import acting
from acme_impala.agent import networks
from acme_impala.agent import presets
from acme_impala.envs import registry

import provenance  # benchmarks/ is on sys.path as the script's directory.

_CASES = (
    ('CartPole-v1, MLP+LSTM(64)', 'cartpole', {}, (1, 8, 64)),
    ('ALE/Pong-v5, shallow+LSTM(256)', 'atari', {}, (1, 8, 16)),
    ('ALE/Pong-v5, deep+LSTM(256)', 'atari', {'network': 'deep'}, (8, 16)),
)


def _inputs(spec, k, rng):
  observation = spec.observations.observation  # The environments give OARs.
  if observation.dtype == np.uint8:
    frames = rng.integers(0, 256, (k,) + observation.shape, dtype=np.uint8)
  else:
    frames = rng.normal(size=(k,) + observation.shape).astype(
        observation.dtype)
  return observation_action_reward.OAR(
      observation=frames,
      action=rng.integers(0, spec.actions.num_values, k).astype(np.int32),
      reward=rng.normal(size=k).astype(np.float32))


def _numpy(x):
  return x if isinstance(x, np.ndarray) else x.numpy()


def _time(fn, inputs, state, calls):
  start = time.perf_counter()
  for _ in range(calls):
    (logits, _), _ = fn(inputs, state)
    _numpy(logits)
  return (time.perf_counter() - start) / calls * 1e3


def _session_policy(config, network, inputs, state):
  """`network`'s policy as a TF1 session call on a copy of its weights."""
  copy = networks.make_network(config, network.num_actions)  # Eagerly.
  graph = tf.Graph()
  with graph.as_default():
    placeholders = tree.map_structure(
        lambda x: tf.compat.v1.placeholder(x.dtype, np.shape(x)),
        (inputs, state))
    (logits, value), new_state = copy(*placeholders)
    weights = [tf.compat.v1.placeholder(v.dtype, v.shape)
               for v in copy.variables]
    load = tf.group([v.assign(w) for v, w in zip(copy.variables, weights)])
  session = tf.compat.v1.Session(graph=graph)
  # Same construction, same variable order; the logits are checked equal.
  session.run(load, dict(zip(weights, [v.numpy() for v in network.variables])))
  call = session.make_callable([logits, value, new_state],
                               feed_list=tree.flatten(placeholders))

  def policy(step_inputs, step_state):
    step_logits, step_value, step_new_state = call(
        *tree.flatten((step_inputs, step_state)))
    return (step_logits, step_value), step_new_state
  return policy


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true',
                      help='a check that it runs, not a measurement: 2 '
                      'rounds instead of 15, the smallest K of each network')
  args = parser.parse_args()
  rounds = 2 if args.quick else 15
  rng = np.random.default_rng(0)
  tf.random.set_seed(0)  # The same weights each run.
  print(f'policy_bench.py at {provenance.stamp()}: TensorFlow '
        f'{tf.__version__}, {len(os.sched_getaffinity(0))} CPU(s), '
        f'TF_ENABLE_ONEDNN_OPTS={os.environ.get("TF_ENABLE_ONEDNN_OPTS")}; '
        f'median of {rounds} interleaved rounds of ~0.3 s each.\n')
  print('| network | K | xla (ms) | graph (ms) | graph via tf.data (ms) '
        '| session (ms) | tf.data vs xla | session vs tf.data |')
  print('|---|---:|---:|---:|---:|---:|---:|---:|')
  for name, config_name, overrides, ks in _CASES:
    config = presets.get_config(config_name).replace(**overrides)
    spec = registry.environment_spec(config.env_id)
    network = networks.make_network(config, spec.actions.num_values)
    for k in ks[:1] if args.quick else ks:
      inputs = _inputs(spec, k, rng)
      state = tree.map_structure(np.asarray, network.initial_state(k))
      # Sonnet makes the variables (to be copied) at a first call.
      network(*tree.map_structure(tf.convert_to_tensor, (inputs, state)))
      fns = {
          'xla': tf.function(network.__call__, autograph=False,
                             jit_compile=True),
          'graph': tf.function(network.__call__, autograph=False),
          'graph via tf.data': acting.policy_function(network),
          'session': _session_policy(config, network, inputs, state),
      }
      reference = None
      for label, fn in fns.items():  # Trace, compile, check.
        for _ in range(3):
          (logits, _), _ = fn(inputs, state)
        if reference is None:
          reference = _numpy(logits)
        # Tolerance relative to the logits' scale: a wrong weight or state
        # copy moves them by about their whole scale, while kernels may
        # round differently: CI saw 'graph via tf.data' (oneDNN in tf.data's
        # threads) 2.9e-5 off xla on logits of size 0.04, 8e-4 of their
        # scale, on an AMD EPYC with AVX512-BF16.
        np.testing.assert_allclose(
            _numpy(logits), reference, rtol=0,
            atol=1e-2 * float(np.abs(reference).max()), err_msg=label)
      # Calls per timed repeat: about 0.3 s of the slowest.
      calls = max(5, int(0.3e3 / max(_time(f, inputs, state, 5)
                                     for f in fns.values())))
      times = {label: [] for label in fns}
      labels = list(fns)
      for r in range(rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
          times[label].append(_time(fns[label], inputs, state, calls))
      ms = {label: statistics.median(t) for label, t in times.items()}
      print(f'| {name} | {k} | {ms["xla"]:.2f} | {ms["graph"]:.2f} | '
            f'{ms["graph via tf.data"]:.2f} | {ms["session"]:.2f} | '
            f'{ms["xla"] / ms["graph via tf.data"]:.2f}x | '
            f'{ms["graph via tf.data"] / ms["session"]:.2f}x |', flush=True)


if __name__ == '__main__':
  main()
