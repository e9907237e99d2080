"""Side-by-side timing of trfl's V-trace and acme_impala.agent.vtrace.

Run as `python benchmarks/vtrace_bench.py`. For each shape it times

  * trfl, eager;
  * trfl, `tf.function`;
  * trfl, `tf.function(jit_compile=True)`;
  * ours, `tf.function`;
  * ours, `tf.function(jit_compile=True)`;

on identical random float32 inputs (c_bar = 1, lambda = 1, no mask, where the
two implementations compute the same thing, which is checked first), and
prints a Markdown table of the median time per call. Each repeat runs enough
calls to last about `_TARGET_REPEAT_S` so timer resolution does not matter,
repeats are interleaved across implementations so that background load skews
none of them in particular, and compilation and tracing happen in the warm-up
calls, which are not timed.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# pylint: disable=g-import-not-at-top
import numpy as np
import tensorflow as tf
import trfl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))
from acme_impala.agent import vtrace
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # pylint: disable=g-import-not-at-top
# pylint: enable=g-import-not-at-top

_SHAPES = ((20, 32), (100, 32))
_WARMUP_CALLS = 3
_REPEATS = 11
_QUICK_REPEATS = 3  # --quick: a check that it runs, not a measurement.
_TARGET_REPEAT_S = 0.08
_BASELINE = 'trfl tf.function'


def _make_inputs(t, b, seed=0):
  rng = np.random.RandomState(seed)
  arrays = dict(
      log_rhos=rng.uniform(-1., 1., size=(t, b)),
      discounts=0.99 * (rng.uniform(size=(t, b)) > 0.05),
      rewards=rng.normal(size=(t, b)),
      values=rng.normal(size=(t, b)),
      bootstrap_value=rng.normal(size=(b,)),
  )
  return {k: tf.constant(v, tf.float32) for k, v in arrays.items()}


def _trfl(inputs):
  return trfl.vtrace_from_importance_weights(**inputs)


def _ours(inputs):
  return vtrace.vtrace_from_importance_weights(**inputs)


def _implementations():
  return {
      'trfl eager': _trfl,
      'trfl tf.function': tf.function(_trfl),
      'trfl tf.function(jit_compile=True)': tf.function(_trfl,
                                                        jit_compile=True),
      'ours tf.function': tf.function(_ours),
      'ours tf.function(jit_compile=True)': tf.function(_ours,
                                                        jit_compile=True),
  }


def _run(fn, inputs):
  out = fn(inputs)
  # Materialise on the host so asynchronous execution is fully counted.
  return [x.numpy() for x in out]


def _median_ms(implementations, inputs):
  """Median ms per call of each implementation.

  Repeats are interleaved round-robin across implementations so that load
  from other processes on a shared machine hits all of them alike.
  """
  calls = {}
  for name, fn in implementations.items():
    for _ in range(_WARMUP_CALLS):
      _run(fn, inputs)
    start = time.perf_counter()
    _run(fn, inputs)
    one_call = max(time.perf_counter() - start, 1e-6)
    calls[name] = max(1, int(_TARGET_REPEAT_S / one_call))
  samples = {name: [] for name in implementations}
  for _ in range(_REPEATS):
    for name, fn in implementations.items():
      start = time.perf_counter()
      for _ in range(calls[name]):
        _run(fn, inputs)
      samples[name].append(
          (time.perf_counter() - start) / calls[name] * 1e3)
  return {name: statistics.median(s) for name, s in samples.items()}


def main():
  start = time.perf_counter()
  rows = []
  for t, b in _SHAPES:
    inputs = _make_inputs(t, b)
    implementations = _implementations()
    reference = _run(_trfl, inputs)
    for name, fn in implementations.items():
      for got, want in zip(_run(fn, inputs), reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5,
                                   err_msg=name)
    timings = _median_ms(implementations, inputs)
    for name, ms in timings.items():
      rows.append((f'[T={t}, B={b}]', name, ms, timings[_BASELINE] / ms))

  print(f'vtrace_bench.py at {provenance.stamp()}: TensorFlow '
        f'{tf.__version__}; median of '
        f'{_REPEATS} repeats after {_WARMUP_CALLS} warm-up calls.\n')
  print('| shape | implementation | median ms | speed-up vs trfl tf.function |')
  print('|---|---|---:|---:|')
  for shape, name, ms, speedup in rows:
    print(f'| {shape} | {name} | {ms:.3f} | {speedup:.2f}x |')
  print(f'\nTotal benchmark time: {time.perf_counter() - start:.1f} s')


if __name__ == '__main__':
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true',
                      help=f'{_QUICK_REPEATS} repeats instead of {_REPEATS}.')
  if parser.parse_args().quick:
    _REPEATS = _QUICK_REPEATS
  main()
