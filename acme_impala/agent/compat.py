"""Workarounds that reach into private attributes of Acme 0.4.0 and Sonnet
2.0.1, kept in one place so that an upgrade has one file to re-check.

Each function says which private attribute it uses and why no public API
serves.
"""

from typing import Sequence

import tensorflow as tf


def acme_adder_writer(adder):
  """The Reverb writer of an Acme 0.4.0 `ReverbAdder`, or None.

  `ReverbAdder` keeps it in the name-mangled `__writer` and exposes no
  flush or close with a timeout.
  """
  return getattr(adder, '_ReverbAdder__writer', None)


def close_acme_adder(adder) -> None:
  """Closes an Acme adder's writer without flushing (see adders.close_adder).

  Acme flushes in `__del__` with a 10 s timeout; dropping the writer first
  makes that a no-op.
  """
  writer = acme_adder_writer(adder)
  if writer is None:
    return
  try:
    writer.close()
  except Exception:  # pylint: disable=broad-except
    pass
  adder._ReverbAdder__writer = None  # pylint: disable=protected-access


def forget_failed_variable_update(client) -> None:
  """Lets an Acme `VariableClient` ask again after a failed fetch.

  Acme 0.4.0 keeps the failed future in `_future` and re-raises it on every
  later `update()`.
  """
  client._future = None  # pylint: disable=protected-access


def variable_update_idle(client) -> bool:
  """True when an Acme `VariableClient` has no fetch in flight (its
  `_future` is None: the last one completed and was copied)."""
  return client._future is None  # pylint: disable=protected-access


def create_rmsprop_slots(optimizer, variables: Sequence[tf.Variable],
                         initial_ms: float) -> None:
  """Creates a Sonnet RMSProp's slots now, with its mean square at
  `initial_ms`.

  Sonnet creates slots lazily in the first `apply` (its `_initialize`); a
  checkpoint restored before that would not restore them. Sonnet starts the
  mean square at 0 and offers no initial value.
  """
  optimizer._initialize(variables)  # pylint: disable=protected-access
  for ms in optimizer.ms:
    ms.assign(tf.fill(tf.shape(ms), tf.cast(initial_ms, ms.dtype)))



def constant_chunk_trajectory_writer(client, chunk_length: int,
                                     num_keep_alive_refs: int,
                                     get_signature_timeout_ms):
  """A Reverb 0.7 TrajectoryWriter with a constant chunk length.

  `Client.trajectory_writer` auto-tunes the chunk length, and
  `TrajectoryWriter.configure` can fix it only once the first step has been
  appended. The constant option is built here through the client's private
  `_client` (the pybind client), as the public method does itself.
  """
  import reverb  # pylint: disable=g-import-not-at-top
  from reverb import pybind  # pylint: disable=g-import-not-at-top
  options = pybind.ConstantChunkerOptions(
      max_chunk_length=chunk_length, num_keep_alive_refs=num_keep_alive_refs)
  return reverb.TrajectoryWriter(client._client.NewTrajectoryWriter(  # pylint: disable=protected-access
      options, get_signature_timeout_ms))
