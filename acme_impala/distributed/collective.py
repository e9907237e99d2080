"""The collective group of K synchronous learner processes.

TensorFlow runs a collective op only in a process whose eager context was
set up for it before its first op ("Collective ops must be configured at
program startup"): a learner replica calls `join` before it builds anything.
`MultiWorkerMirroredStrategy` does that set-up from a cluster spec (one
gRPC server per replica); its own distributed variables are not used: each
replica keeps ordinary variables and `agent/replicas.py` sums the gradients
with one collective op per step (the ring all-reduce measured by
`benchmarks/allreduce_bench.py`).

Where the replicas listen is decided before launch, as every node's address
is, and handed to the learner processes in $ACME_IMPALA_LEARNER_ADDRESSES:
on local hosts free ports on localhost (`local_addresses`, set by
`launch/local.py` before the node processes start), on Kubernetes each
learner pod's DNS name and `naming.COLLECTIVE_PORT` (set by
`launch/k8s/node.py` from the address map).

A replica that is lost (killed, crashed) leaves the others waiting in a
collective: the strategy's health check (TF 2.8: every 30 s, a peer given
3 tries of 10 s) aborts them, and `nodes.LearnerNode` exits for the group
to restart.
"""

import json
import os
from typing import List, Sequence

import portpicker

ADDRESSES_ENV = 'ACME_IMPALA_LEARNER_ADDRESSES'


def addresses_from_env(num_learners: int) -> List[str]:
  """The group's addresses from $ACME_IMPALA_LEARNER_ADDRESSES; ValueError
  naming what is wrong when they are not `num_learners` host:port."""
  text = os.environ.get(ADDRESSES_ENV, '')
  addresses = [a for a in text.split(',') if a]
  if len(addresses) != num_learners or not all(
      a.rpartition(':')[2].isdigit() for a in addresses):
    raise ValueError(
        f'${ADDRESSES_ENV}={text!r}: expected {num_learners} comma-separated '
        'host:port addresses of the learner replicas (set by the launcher: '
        'num_learners > 1 runs under local_mp or on Kubernetes).')
  return addresses


def abort(reason: str) -> None:
  """Ends every collective op of this process now and later (they raise
  CancelledError)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  context.context().abort_collective_ops(tf.errors.CANCELLED, reason)


def local_addresses(num_learners: int) -> List[str]:
  """`num_learners` free ports on localhost (none when 1: one learner runs
  no collective)."""
  if num_learners < 2:
    return []
  return [f'localhost:{portpicker.pick_unused_port()}'
          for _ in range(num_learners)]


def join(addresses: Sequence[str], index: int, timeout_s: float = 0.):
  """Sets this process up as replica `index` of the group at `addresses`
  (one `host:port` per replica, the same list in every replica). Must run
  before this process's first TensorFlow op; returns the strategy (kept
  alive by the caller: it owns the gRPC server)."""
  if not 0 <= index < len(addresses):
    raise ValueError(f'replica index={index!r} is out of range for '
                     f'{len(addresses)} addresses.')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  os.environ['TF_CONFIG'] = json.dumps({
      'cluster': {'worker': list(addresses)},
      'task': {'type': 'worker', 'index': index}})
  options = tf.distribute.experimental.CommunicationOptions(
      implementation=tf.distribute.experimental.CommunicationImplementation
      .RING, timeout_seconds=timeout_s or None)
  try:
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=options)
  except RuntimeError as error:
    if 'configured at program startup' not in str(error):
      raise
    raise RuntimeError(
        f'learner replica {index}: TensorFlow ran an op in this process '
        'before the collective group was joined; a replica must join first '
        '(collective ops are configured at start-up).') from error
