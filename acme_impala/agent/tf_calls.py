"""Calling a TensorFlow function once per step, for days, on TF 2.8.

TF 2.8 leaks about 420 bytes of native memory on every eager call of a
tf.function that is not XLA-compiled: an intra-process rendezvous per call,
kept in the eager context's table (tensorflow#50765, fixed in TF 2.12). At a
call per actor step or per learner update that is megabytes a minute per
process (tests/test_memory.py measures it).

XLA-compiling the function avoids the rendezvous but gives up TensorFlow's
own kernels: on the Atari networks the actor's policy ran 1.4-2.6x slower
under XLA than as a graph with oneDNN's convolutions (`benchmarks/
policy_bench.py`). `DataPipelineFunction` keeps the graph and drops the
leak: each call's arguments are handed to a tf.data pipeline whose map
function is the tf.function, and the call takes one element. Eagerly there is
then only the iterator's get-next op; tf.data runs the function in its own
runtime, which keeps nothing per call.
"""

import collections
from typing import Any, Callable, Dict, Tuple

import numpy as np
import tensorflow as tf
import tree


def _key(leaves) -> Tuple:
  return tuple((tuple(np.shape(x)), tf.as_dtype(x.dtype)) for x in leaves)


class DataPipelineFunction:
  """`fn(*args)`, run as the map function of a tf.data pipeline.

  `fn` is a traceable function (a `tf.function`, typically with
  `autograph=False`) of array arguments; the result is what `fn` returns, as
  eager tensors. One pipeline is made per structure, shapes and dtypes of
  the arguments, at its first call: every call of one shape runs in order,
  exactly once (nothing is asked for before its arguments are handed over).
  Not thread-safe: one caller at a time, as an actor's or a learner's loop.

  Nests are compared by their leaves: namedtuples of equal fields but
  different classes (Acme's and those Reverb rebuilds from a signature) are
  given to `fn` in the structure of the first call of their shape.
  """

  def __init__(self, fn: Callable[..., Any],
               max_intra_op_parallelism: int = 0):
    """`max_intra_op_parallelism`: threads one op of `fn` may use, 0 for
    TensorFlow's intra-op pool (its default, all cores), 1 to run each op on
    the thread that runs it (see `learning.intra_op_threads`)."""
    if max_intra_op_parallelism < 0:
      raise ValueError('max_intra_op_parallelism must be >= 0 (0: '
                       "TensorFlow's pool); got "
                       f'{max_intra_op_parallelism}.')
    self._fn = fn
    self._max_intra_op_parallelism = max_intra_op_parallelism
    self._pipelines: Dict[Tuple, Tuple[Any, Any, collections.deque]] = {}

  def __call__(self, *args):
    leaves = tree.flatten(args)
    key = _key(leaves)
    pipeline = self._pipelines.get(key)
    if pipeline is None:
      pipeline = self._pipelines[key] = self._make_pipeline(args)
    structure, iterator, pending = pipeline
    pending.append(tree.unflatten_as(structure, leaves))
    return next(iterator)

  def _make_pipeline(self, args):
    pending = collections.deque()

    def arguments():
      while True:
        yield pending.popleft()

    signature = tree.map_structure(
        lambda x: tf.TensorSpec(np.shape(x), tf.as_dtype(x.dtype)), args)
    options = tf.data.Options()
    # No element may be asked for before its arguments are handed over.
    options.experimental_optimization.map_parallelization = False
    # tf.data runs a pipeline's ops on one intra-op thread unless told
    # otherwise (0: no limit, TensorFlow's own pool): on the Atari learner's
    # update that one thread made the step 1.4x slower than a direct call.
    options.threading.max_intra_op_parallelism = (
        self._max_intra_op_parallelism)
    dataset = tf.data.Dataset.from_generator(
        arguments, output_signature=signature)
    iterator = iter(dataset.map(self._fn).with_options(options))
    return signature, iterator, pending
