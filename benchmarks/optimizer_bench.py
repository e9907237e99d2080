"""The RMSProp update alone: Sonnet's, XLA-compiled and in graph mode, and
the learner's (TensorFlow's fused kernel on Sonnet's slots) in graph mode.

Run as `python benchmarks/optimizer_bench.py`. For the variables of each
network of learner_bench.py (MLP+LSTM(64) for CartPole, the shallow Atari net
+ LSTM(256) for Pong), it times the update - global-norm clipping then
RMSProp with the paper's settings - as a `tf.function`, on the same random
gradients, repeats interleaved and the median reported. The last column is
what compile_mode 'none' (the default) runs; 'vtrace_and_optimizer' runs the
same kernel under XLA.
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
import acme_impala  # pylint: disable=unused-import  # Sets TF2_BEHAVIOR first.
from acme import specs
from acme.tf import utils as tf2_utils
import numpy as np
import sonnet as snt
import tensorflow as tf

from acme_impala.agent import compat
from acme_impala.agent import config as config_lib
from acme_impala.agent import networks
from acme_impala.envs import registry
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # pylint: disable=g-import-not-at-top

_NETWORKS = (
    ('CartPole-v1, MLP+LSTM(64)',
     dict(env_id='CartPole-v1', network='mlp_lstm', lstm_size=64)),
    ('ALE/Pong-v5, shallow+LSTM(256)',
     dict(env_id='ALE/Pong-v5', network='shallow', lstm_size=256)),
)
_ROUNDS, _STEPS = 15, 40
_QUICK_ROUNDS = 2  # --quick: a check that it runs, not a measurement.


def _update_fn(config, variables, jit, fused=False):
  optimizer = snt.optimizers.RMSProp(
      learning_rate=config.learning_rate, decay=config.rmsprop_decay,
      momentum=config.rmsprop_momentum, epsilon=config.rmsprop_epsilon)
  compat.create_rmsprop_slots(optimizer, variables,
                              config.rmsprop_initial_mean_square)

  def update(gradients):
    gradients, norm = tf.clip_by_global_norm(gradients,
                                             config.max_gradient_norm)
    if fused:
      compat.rmsprop_apply(optimizer, gradients, variables)
    else:
      optimizer.apply(gradients, variables)
    return norm
  return tf.function(update, jit_compile=jit, autograph=False)


def main():
  print(f'optimizer_bench.py at {provenance.stamp()}: TensorFlow '
        f'{tf.__version__}; median of '
        f'{_ROUNDS} interleaved repeats of {_STEPS} updates.\n')
  print('| network | parameters | Sonnet, XLA (ms) | Sonnet, graph (ms) | '
        'fused kernel, graph (ms) | Sonnet XLA / fused |')
  print('|---|---:|---:|---:|---:|---:|')
  for label, overrides in _NETWORKS:
    config = config_lib.IMPALAConfig(**overrides)
    env = registry.make_environment(config.env_id, seed=0)
    spec = specs.make_environment_spec(env)
    net = networks.make_network(config, spec.actions.num_values)
    tf2_utils.create_variables(net, [spec.observations])
    variables = net.trainable_variables
    rng = np.random.default_rng(0)
    grads = [tf.constant(rng.normal(size=v.shape).astype(np.float32) * 1e-3)
             for v in variables]
    fns = {'xla': _update_fn(config, variables, True),
           'graph': _update_fn(config, variables, False),
           'fused': _update_fn(config, variables, False, fused=True)}
    for fn in fns.values():
      fn(grads).numpy()  # Trace and compile outside the timing.
    times = {name: [] for name in fns}
    for r in range(_ROUNDS):
      order = list(fns)[r % 3:] + list(fns)[:r % 3]
      for name in order:
        start = time.perf_counter()
        for _ in range(_STEPS):
          norm = fns[name](grads)
        norm.numpy()
        times[name].append((time.perf_counter() - start) / _STEPS)
    xla, graph, fused = (statistics.median(times[name]) * 1e3
                         for name in ('xla', 'graph', 'fused'))
    size = sum(int(np.prod(v.shape)) for v in variables)
    print(f'| {label} | {size:,} | {xla:.2f} | {graph:.2f} | {fused:.2f} | '
          f'{xla / fused:.2f}x |')
    env.close()


if __name__ == '__main__':
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true',
                      help=f'{_QUICK_ROUNDS} rounds instead of {_ROUNDS}.')
  if parser.parse_args().quick:
    _ROUNDS = _QUICK_ROUNDS
  main()
