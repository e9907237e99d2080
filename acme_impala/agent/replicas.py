# Copyright 2026 The acme_impala Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#    http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""K synchronous learner replicas (IMPALA section 3, Fig. 1 right).

Each of K replicas takes its own share of a learner batch (B / K rows of
[T+1] steps, of them B(1-f) / K online and Bf / K replayed) and computes the
loss's gradient on it; the gradients are summed over the replicas every step
and every replica applies the same update, so their weights stay equal.

The sum that makes K replicas one learner. `losses.impala_loss` divides
its sum over valid steps by N = max(1, sum_s w_s) ('mean') or by 1 ('sum').
Replica k, given rows with N_k valid steps, gets g_k = grad(S_k) / max(1,
N_k), S_k its sum. The whole batch's gradient is

  'sum':  sum_k grad(S_k)                  = sum_k g_k,
  'mean': sum_k grad(S_k) / max(1, sum_k N_k)
                                           = sum_k N_k g_k / max(1, sum_k N_k)

(N_k g_k = grad(S_k) also when N_k = 0: then S_k has no term). So a replica
contributes N_k g_k and N_k, and one all-reduced sum of both gives the whole
batch's gradient exactly (up to float summation order; with the bfloat16
torso each share's gradients are rounded to bfloat16 before the float32
sum, so agreement is to bfloat16 precision). Gradient-norm
clipping and RMSProp then see the same gradient as one learner given the
whole batch (`combine_gradients`).

Everything V-trace and the trust region compute is per row (time-major
[T, B]): a row's targets, importance weights and mask do not depend on the
other rows, so splitting the batch by rows changes nothing else. LASER's
recomputed LSTM states are per replayed row, each replica keeping its own.

`CollectiveSum` is the all-reduce: one TensorFlow collective op
(`CollectiveReduceV2`, ring over gRPC) on the gradients flattened into one
vector. It runs inside the learner's traced step; the process must have
configured collective ops at start-up (`distributed/collective.py`). Tests may
pass any function with its contract, e.g. a sum over in-process replicas.
"""

import dataclasses
from typing import Callable, List, Sequence

import tensorflow as tf

# Sums each tensor of a list over the replicas; same structure back.
AllReduceSum = Callable[[Sequence[tf.Tensor]], List[tf.Tensor]]

REDUCTIONS = ('mean', 'sum')
# The replicas' collective group: not MultiWorkerMirroredStrategy's own
# (its host group is key 1).
GROUP_KEY = 1000


def combine_gradients(gradients: Sequence[tf.Tensor], num_valid: tf.Tensor,
                      reduction: str,
                      all_reduce_sum: AllReduceSum) -> List[tf.Tensor]:
  """The whole batch's gradient from each replica's.

  Args:
    gradients: this replica's gradients of its loss (any shapes, float32).
    num_valid: [] float, N_k, this replica's valid steps (the loss's
      'num_valid_steps' metric, the mean reduction's N before max(1, .)).
    reduction: the loss's reduction, 'mean' or 'sum'.
    all_reduce_sum: sums a list of tensors over the replicas.

  Returns:
    The gradients one learner given every replica's rows would get, in the
    order of `gradients`.
  """
  if reduction not in REDUCTIONS:
    raise ValueError(f'reduction={reduction!r} is not one of {REDUCTIONS}.')
  if reduction == 'sum':
    return list(all_reduce_sum(list(gradients)))
  num_valid = tf.cast(num_valid, tf.float32)
  weighted = [g * tf.cast(num_valid, g.dtype) for g in gradients]
  summed = all_reduce_sum(weighted + [num_valid])
  total = tf.maximum(summed[-1], 1.)
  return [g / tf.cast(total, g.dtype) for g in summed[:-1]]


def from_first(values: Sequence[tf.Tensor], is_first: tf.Tensor,
               all_reduce_sum: AllReduceSum) -> List[tf.Tensor]:
  """Replica 0's `values` on every replica (a broadcast as a sum: the other
  replicas contribute zeros, and x + 0 = x exactly)."""
  return list(all_reduce_sum([
      tf.where(is_first, v, tf.zeros_like(v)) for v in values]))


class CollectiveSum:
  """`AllReduceSum` over `group_size` processes with TensorFlow's collective
  ops: the tensors are cast to float32 (every learner variable and slot is;
  a step count is exact in float32 up to 2**24, in float64 beyond: see
  `dtype`), flattened into one vector and reduced by one ring all-reduce.

  `instance_key` tells apart the distinct reductions of a step (the
  gradients, the start-up broadcast): calls at one call site run in the
  same order on every replica, so they can share it.
  """

  def __init__(self, group_size: int, instance_key: int,
               group_key: int = GROUP_KEY, timeout_s: float = 0.,
               dtype=tf.float32):
    if group_size < 2:
      raise ValueError(f'group_size={group_size!r}: a collective needs at '
                       'least 2 replicas.')
    self._group_size = group_size
    self._group_key = group_key
    self._instance_key = instance_key
    self._timeout_s = float(timeout_s)
    self._dtype = dtype

  def __call__(self, tensors: Sequence[tf.Tensor]) -> List[tf.Tensor]:
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    flat = tf.concat([tf.reshape(tf.cast(t, self._dtype), [-1])
                      for t in tensors], axis=0)
    summed = tf.raw_ops.CollectiveReduceV2(
        input=flat, group_size=self._group_size, group_key=self._group_key,
        instance_key=self._instance_key, ordering_token=[], merge_op='Add',
        final_op='Id', communication_hint='ring',
        timeout_seconds=self._timeout_s)
    # Static sizes: gradients, variables and slots have static shapes.
    parts = tf.split(summed, [t.shape.num_elements() for t in tensors])
    return [tf.cast(tf.reshape(p, t.shape), t.dtype)
            for p, t in zip(parts, tensors)]


# Instance keys of the collectives a learner replica runs, one per call site.
GRADIENTS_KEY = 1
STATE_KEY = 2


class GroupBroken(RuntimeError):
  """A collective of the replica group failed: a replica is gone, or the
  collectives were aborted (the program stopping). The group cannot go on
  short; `__cause__` is TensorFlow's error."""


def collective_errors():
  """What a collective op raises when it is aborted or a peer is lost."""
  return (tf.errors.UnavailableError, tf.errors.CancelledError,
          tf.errors.FailedPreconditionError, tf.errors.DeadlineExceededError,
          tf.errors.AbortedError, tf.errors.InternalError)


@dataclasses.dataclass(frozen=True)
class Group:
  """Replica `index` of `size` synchronous learners and its two reductions:
  the gradients every step, and the training state once at start-up
  (float64: the step count stays exact)."""
  index: int
  size: int
  gradient_sum: AllReduceSum
  state_sum: AllReduceSum

  @classmethod
  def collective(cls, index: int, size: int, timeout_s: float = 0.):
    """Over TensorFlow collectives (configured at the process's start-up).
    `timeout_s` > 0: a collective waiting longer for a lost replica fails
    (0: waits for ever)."""
    if not 0 <= index < size:
      raise ValueError(f'replica index={index!r} is out of range for a '
                       f'group of {size}.')
    return cls(index, size,
               CollectiveSum(size, GRADIENTS_KEY, timeout_s=timeout_s),
               CollectiveSum(size, STATE_KEY, timeout_s=timeout_s,
                             dtype=tf.float64))
