"""Workarounds that reach into private attributes of Acme 0.4.0 and Sonnet
2.0.1, kept in one place so that an upgrade has one file to re-check.

Each function says which private attribute it uses and why no public API
serves.
"""

from typing import List, Mapping, Optional, Sequence

from acme.tf import variable_utils as tf2_variable_utils
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


class HookedVariableClient(tf2_variable_utils.VariableClient):
  """Acme 0.4.0's VariableClient with public hooks for what a request
  fetches and what is done with it.

  Acme's `update()` runs its private `_request` (on its fetch thread, or
  the caller's for `update(wait=True)`) and hands the result to its private
  `_copy`; Acme offers no public way to skip a fetch or a copy. Here they
  call `fetch(blocking)` and `copy(fetched)`, whose defaults do what Acme's
  do; `assign(values)` is Acme's copy of fetched values into the variables.
  """

  def __init__(self, source, variables: Mapping[str, Sequence[tf.Variable]],
               update_period: int = 1):
    super().__init__(source, variables, update_period=update_period)
    self.source = source
    self.groups = list(variables)
    self._request = lambda: self.fetch(blocking=False)

  def fetch(self, blocking: bool):
    del blocking
    return self.source.get_variables(self.groups)

  def copy(self, fetched) -> None:
    self.assign(fetched)

  def assign(self, values) -> None:
    super()._copy(values)

  def update_and_wait(self):
    self._copy(self.fetch(blocking=True))

  def _copy(self, fetched):
    self.copy(fetched)


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


def rmsprop_apply(optimizer, updates: Sequence[Optional[tf.Tensor]],
                  variables: Sequence[tf.Variable]) -> List[tf.Operation]:
  """`optimizer.apply(updates, variables)` for a Sonnet RMSProp (not
  centered), run as TensorFlow's fused `ResourceApplyRMSProp` kernel on the
  optimiser's own slots (`mom`, `ms`, made by `create_rmsprop_slots`).

  The kernel computes Sonnet's update (ms <- decay ms + (1 - decay) g^2;
  mom <- momentum mom + lr g / sqrt(ms + epsilon); v <- v - mom) in one op
  per variable where Sonnet's `apply` dispatches about ten. In graph mode
  it was 1.2x (CartPole's MLP+LSTM(64)) and 1.3x (the shallow Atari net)
  faster than Sonnet's update XLA-compiled, the fastest before
  (docs/benchmarks.md, "The RMSProp update alone"). Checkpoints are
  unchanged: the state is Sonnet's slot variables. It reads the slot lists
  `ms` and `mom` in Sonnet's order; Sonnet offers no fused apply.

  Returns the update ops in a graph (for control dependencies: a graph
  function orders stateful ops per variable only), [] when eager.
  """
  if optimizer.centered:
    raise ValueError('rmsprop_apply: centered RMSProp is not supported; '
                     f'{optimizer.name} has centered=True.')
  if len(optimizer.ms) != len(variables):
    raise ValueError(
        f'rmsprop_apply: {len(variables)} variables but the optimiser has '
        f'{len(optimizer.ms)} slots; expected create_rmsprop_slots first.')
  hyperparameters = [tf.cast(x, tf.float32) for x in (
      optimizer.learning_rate, optimizer.decay, optimizer.momentum,
      optimizer.epsilon)]
  learning_rate, decay, momentum, epsilon = hyperparameters
  ops = []
  for update, variable, mom, ms in zip(updates, variables, optimizer.mom,
                                       optimizer.ms):
    if update is None:  # As Sonnet: a variable the loss does not reach.
      continue
    op = tf.raw_ops.ResourceApplyRMSProp(
        var=variable.handle, ms=ms.handle, mom=mom.handle, lr=learning_rate,
        rho=decay, momentum=momentum, epsilon=epsilon, grad=update)
    if op is not None:
      ops.append(op)
  return ops


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
