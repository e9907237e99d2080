"""tf_calls.DataPipelineFunction: same results as calling the function, each
call run exactly once and in order, whatever shapes and nest classes come."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from acme_impala.agent import tf_calls


@pytest.mark.parametrize('threads', [0, 1])
def test_results_equal_the_function_called_directly(threads):
  fn = tf.function(lambda x, y: (tf.matmul(x, y), tf.reduce_sum(x, -1)),
                   autograph=False)
  piped = tf_calls.DataPipelineFunction(fn, max_intra_op_parallelism=threads)
  rng = np.random.default_rng(0)
  for _ in range(3):
    x = rng.normal(size=(400, 300)).astype(np.float32)
    y = rng.normal(size=(300, 200)).astype(np.float32)
    got, want = piped(x, y), fn(x, y)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-4)


def test_negative_thread_count_is_refused():
  with pytest.raises(ValueError, match='got -1'):
    tf_calls.DataPipelineFunction(tf.function(lambda x: x), -1)


def test_each_call_runs_once_in_order_and_sees_variable_updates():
  counter = tf.Variable(0, dtype=tf.int64)
  scale = tf.Variable(1., dtype=tf.float32)

  @tf.function(autograph=False)
  def step(x):
    counter.assign_add(1)
    return counter.read_value(), x * scale

  piped = tf_calls.DataPipelineFunction(step)
  for i in range(1, 6):
    scale.assign(float(i))
    count, y = piped(np.full([2], 10., np.float32))
    assert count.numpy() == i  # Nothing ran ahead of its arguments.
    np.testing.assert_array_equal(y.numpy(), [10. * i, 10. * i])
  assert counter.numpy() == 5


def test_shapes_dtypes_and_nest_classes():
  first = collections.namedtuple('First', ['a', 'b'])
  second = collections.namedtuple('Second', ['a', 'b'])  # Same fields.
  fn = tf.function(lambda n: n.a * 2 + tf.cast(n.b, n.a.dtype),
                   autograph=False)
  piped = tf_calls.DataPipelineFunction(fn)
  out = piped(first(np.ones([2], np.float32), np.ones([2], np.int32)))
  np.testing.assert_array_equal(out.numpy(), [3., 3.])
  out = piped(second(np.full([2], 2., np.float32), np.zeros([2], np.int32)))
  np.testing.assert_array_equal(out.numpy(), [4., 4.])
  # Another shape and dtype: another pipeline, the first still works.
  out = piped(first(np.ones([3], np.float64), np.ones([3], np.int32)))
  assert out.dtype == tf.float64 and out.shape == (3,)
  out = piped(first(np.zeros([2], np.float32), np.ones([2], np.int32)))
  np.testing.assert_array_equal(out.numpy(), [1., 1.])
  # Tensors and numpy arrays of one shape and dtype share a pipeline.
  piped(first(tf.zeros([2], tf.float32), tf.ones([2], tf.int32)))
  assert len(piped._pipelines) == 2  # pylint: disable=protected-access
