"""IMPALA actor: runs the behaviour policy μ and writes trajectories.

The actor samples actions from the recurrent policy, and hands each step to an
Acme adder with the extras the learner needs for V-trace: the behaviour logits
and the LSTM state *before* the step (so item[0]'s `core_state` is the state at
the start of the sequence), in Acme's own extras layout (`logits`,
`core_state`), so that Acme's IMPALA learner can read what this actor writes.
Optionally it also records `policy_version`, the learner step of the weights
that acted, and `agent_id`, the agent of a sweep they belong to, from which
the learner measures policy lag and replay staleness.
"""

import time
from typing import Dict, Mapping, Optional, Sequence

from acme import adders
from acme import core
from acme import types as acme_types
from acme.tf import utils as tf2_utils
from acme.tf import variable_utils as tf2_variable_utils
from absl import logging
import dm_env
import numpy as np
import sonnet as snt
import tensorflow as tf
import tree

from acme_impala.agent import compat
from acme_impala.agent import tf_calls
from acme_impala.agent import types


def sample_categorical(rng: np.random.Generator, logits: np.ndarray
                       ) -> np.ndarray:
  """Samples [B] actions from [B, A] logits with the Gumbel-max trick.

  Sampling in numpy keeps the TF graph to a single call per step and makes
  actions reproducible from the actor's seed.
  """
  gumbel = rng.gumbel(size=logits.shape)
  return np.argmax(logits + gumbel, axis=-1).astype(np.int32)


def policy_function(network: snt.RNNCore):
  """`network.__call__` as one TensorFlow graph, called through tf.data.

  Graph mode runs TensorFlow's own kernels (oneDNN's convolutions on the
  Atari torsos: 1.4-2.6x faster than the same network XLA-compiled, see
  `benchmarks/policy_bench.py`); tf.data spares it TF 2.8's per-call leak
  (`tf_calls`). AutoGraph is off: the networks have no Python control flow
  on tensors.
  """
  return tf_calls.DataPipelineFunction(
      tf.function(network.__call__, autograph=False))


class _TolerantUpdates:
  """Keeps acting on the current weights while the learner is unreachable
  (busy compiling its first step, or restarting after a crash). Failures are
  logged at the first one and then at most every `log_every_s`; with
  `max_outage_s` set, an outage longer than that raises. Blocking updates
  (wait=True) raise."""

  def __init__(self, client, max_outage_s: Optional[float] = None,
               log_every_s: float = 30.):
    self._client = client
    self._max_outage_s = max_outage_s
    self._log_every_s = log_every_s
    self._failing_since = None
    self._failures = 0
    self._last_log = 0.

  def update(self, wait: bool = False):
    if wait:
      # A blocking fetch was asked for explicitly: its caller handles errors.
      self._client.update(wait=True)
      self._failing_since = None
      return
    try:
      self._client.update(wait)
    except Exception as error:  # pylint: disable=broad-except
      # Acme's VariableClient keeps a failed future and would re-raise it on
      # every call: drop it so that the next update asks again.
      compat.forget_failed_variable_update(self._client)
      now = time.time()
      self._failures += 1
      if self._failing_since is None:
        self._failing_since = now
      if now - self._last_log >= self._log_every_s:
        self._last_log = now
        logging.warning('Variable update failed (%s); %d failures in %.0f s; '
                        'acting on the current weights and retrying.', error,
                        self._failures, now - self._failing_since)
      if (self._max_outage_s is not None and
          now - self._failing_since > self._max_outage_s):
        raise
      return
    if self._failing_since is not None and compat.variable_update_idle(
        self._client):
      # Idle after a failure means a fetch completed: the outage is over.
      logging.warning('Variable updates work again after %.1f s (%d failed '
                      'fetches).', time.time() - self._failing_since,
                      self._failures)
      self._failing_since, self._failures, self._last_log = None, 0, 0.


class VersionedVariableClient(compat.HookedVariableClient):
  """Acme's VariableClient, fetching and copying the weights only when they
  are new, and asking for them at a pace set by the learner's.

  Each request first asks the source for its `types.WEIGHTS_VERSION` (16
  bytes); only when that differs from the version of the weights last copied
  does it fetch the variables, with their version read first, and copy them.
  Acme's client fetches and copies every variable at each request: with
  `update_period=1` a Pong actor pulled the shallow net's 4.8 MB up to once
  per actor step (~77 a second) from a learner that changed them twice a
  second. Without that traffic the Pong program on 2 cores runs 1.33x
  faster (docs/benchmarks.md#the-atari-program-on-2-cores).

  Background requests (`update()`) are also paced: one waits until
  `PACE` of the learner's step interval (as observed from the versions
  fetched, at most `MAX_PAUSE_S`) has passed since the previous one. That
  delays new weights by at most a tenth of a learner step, and spares the
  learner the version requests a Pong actor would otherwise send at each
  step (~100 a second, a tenth of that program's throughput). Blocking
  updates (`update(wait=True)`, an evaluator's round) ask at once.

  The source must serve `types.WEIGHTS_VERSION`, as IMPALALearner does.
  """

  PACE = 0.1
  MAX_PAUSE_S = 0.1

  def __init__(self, client: core.VariableSource,
               variables: Mapping[str, Sequence[tf.Variable]],
               update_period: int = 1):
    super().__init__(client, variables, update_period=update_period)
    self._version = None  # Of the weights last copied.
    self._last_request = -float('inf')
    self._last_fetch = None  # (time, version) of the last fetch.
    self._step_interval = None  # Seconds per learner step, as observed.

  def fetch(self, blocking: bool):
    """(version, values) of new weights, or None if they are not new."""
    # A background fetch runs on the client's one fetch thread, and only
    # once the previous one has been copied: never beside `copy`.
    if not blocking and self._step_interval is not None:
      pause = min(self.PACE * self._step_interval, self.MAX_PAUSE_S)
      pause -= time.monotonic() - self._last_request
      if pause > 0:
        time.sleep(pause)
    self._last_request = time.monotonic()
    if self._version is not None:
      (version,), = self.source.get_variables([types.WEIGHTS_VERSION])
      if np.array_equal(version, self._version):
        return None
    (version,), *values = self.source.get_variables(
        [types.WEIGHTS_VERSION] + self.groups)
    now = time.monotonic()
    if self._last_fetch is not None:
      then, previous = self._last_fetch
      steps = int(version[1]) - int(previous[1])
      if version[0] == previous[0] and steps > 0:
        self._step_interval = (now - then) / steps
    self._last_fetch = (now, version)
    return version, values

  def copy(self, fetched) -> None:
    if fetched is None:
      return
    version, values = fetched
    self.assign(values)
    self._version = version


def make_variable_client(
    source: core.VariableSource,
    network: snt.Module,
    update_period: int = 1,
    policy_version: Optional[tf.Variable] = None,
    versioned: bool = False,
) -> tf2_variable_utils.VariableClient:
  """An Acme VariableClient refreshing `network` (and the policy version);
  with `versioned`, a VersionedVariableClient (the source serves
  `types.WEIGHTS_VERSION`)."""
  variables: Dict[str, Sequence[tf.Variable]] = {
      types.POLICY_VARIABLES: network.variables}
  if policy_version is not None:
    variables[types.LEARNER_STEPS] = [policy_version]
  client_class = (VersionedVariableClient if versioned
                  else tf2_variable_utils.VariableClient)
  return client_class(source, variables, update_period=update_period)


class IMPALAActor(core.Actor):
  """A recurrent actor sampling from π and recording μ's logits and state."""

  def __init__(
      self,
      network: snt.RNNCore,
      adder: Optional[adders.Adder] = None,
      variable_client: Optional[tf2_variable_utils.VariableClient] = None,
      *,
      policy_version: Optional[tf.Variable] = None,
      agent_id: int = 0,
      seed: Optional[int] = None,
  ):
    """Creates the actor.

    Args:
      network: RNNCore returning ((logits [B, A], value [B]), state).
      adder: an Acme adder (e.g. SequenceAdder); None for evaluation.
      variable_client: refreshes `network` (and `policy_version`) from a
        VariableSource; its update_period sets how often.
      policy_version: optional int64 scalar variable kept up to date by the
        variable client with the learner step of the weights; when given it
        is written to extras['policy_version'], with `agent_id`.
      agent_id: which agent of a sweep the weights belong to, written to
        extras['agent_id'] beside the policy version.
      seed: seed of the action sampler.
    """
    self._network = network
    self._adder = adder
    self._variable_client = (_TolerantUpdates(variable_client)
                             if variable_client else None)
    self._policy_version = policy_version
    self._agent_id = agent_id
    self._rng = np.random.default_rng(seed)
    # One graph call per step: the per-call floor of TF dominates otherwise.
    self._policy = policy_function(network)
    self._state = None
    self._prev_state = None
    self._prev_logits = None

  def select_action(self, observation: acme_types.NestedArray) -> np.ndarray:
    batched = tf2_utils.add_batch_dim(observation)
    if self._state is None:
      self._state = self._network.initial_state(1)
    (logits, _), new_state = self._policy(batched, self._state)
    self._prev_logits = logits
    self._prev_state = self._state
    self._state = new_state
    return sample_categorical(self._rng, logits.numpy())[0]

  def observe_first(self, timestep: dm_env.TimeStep):
    if self._adder:
      self._adder.add_first(timestep)
    # A new episode starts from the initial LSTM state; the learner resets at
    # `start_of_episode` steps in the same way.
    self._state = None

  def observe(self, action: acme_types.NestedArray,
              next_timestep: dm_env.TimeStep):
    if not self._adder:
      return
    extras = {types.LOGITS: self._prev_logits,
              types.CORE_STATE: self._prev_state}
    extras = tf2_utils.to_numpy_squeeze(extras)
    if self._policy_version is not None:
      extras[types.POLICY_VERSION] = np.asarray(
          self._policy_version.numpy(), dtype=np.int64)
      extras[types.AGENT_ID] = np.int32(self._agent_id)
    self._adder.add(np.asarray(action, dtype=np.int32), next_timestep, extras)

  def update(self, wait: bool = False):
    if self._variable_client:
      self._variable_client.update(wait)


def extras_spec(network: snt.RNNCore, num_actions: int,
                record_policy_version: bool = True
                ) -> Mapping[str, acme_types.NestedSpec]:
  """The extras an IMPALAActor writes, as unbatched specs (for signatures).

  With `record_policy_version` the actor also writes the policy version and
  its agent's id (the two identify the weights that acted).
  """
  core_state = tree.map_structure(
      lambda t: tf.TensorSpec(t.shape, t.dtype),
      tf2_utils.squeeze_batch_dim(network.initial_state(1)))
  spec = {
      types.CORE_STATE: core_state,
      types.LOGITS: tf.TensorSpec([num_actions], tf.float32),
  }
  if record_policy_version:
    spec[types.POLICY_VERSION] = tf.TensorSpec([], tf.int64)
    spec[types.AGENT_ID] = tf.TensorSpec([], tf.int32)
  return spec


class BatchedIMPALAActor:
  """Acts in K environments with one policy call per step (batched inference).

  Each environment keeps its own row of the LSTM state, and the batched adder
  keeps one stream of items per environment, so the items in Reverb are
  exactly those K single-environment IMPALAActors would write; only the
  network call is shared, which amortises TF's per-call cost (about 0.5 ms
  here) over K environments.

  The adder is any `adders.BatchedAdder` (`BatchedTrajectoryAdder`, or
  `PerStreamAdders` over K Acme adders); the actor hands it the K steps'
  actions, timesteps and extras, and the adder builds its own steps.
  """

  def __init__(
      self,
      network: snt.RNNCore,
      num_envs: int,
      adder=None,
      variable_client: Optional[tf2_variable_utils.VariableClient] = None,
      *,
      policy_version: Optional[tf.Variable] = None,
      agent_id: int = 0,
      seed: Optional[int] = None,
  ):
    if adder is not None and adder.num_streams != num_envs:
      raise ValueError(f'The batched adder has {adder.num_streams} streams '
                       f'for num_envs={num_envs}; expected equal numbers.')
    self._network = network
    self._num_envs = num_envs
    self._adder = adder
    self._variable_client = (_TolerantUpdates(variable_client)
                             if variable_client else None)
    self._policy_version = policy_version
    self._agent_ids = np.full(num_envs, agent_id, np.int32)
    self._rng = np.random.default_rng(seed)
    self._policy = policy_function(network)
    self._zero_state = tf2_utils.to_numpy(network.initial_state(num_envs))
    self._state = tree.map_structure(np.copy, self._zero_state)
    self._extras = None

  @property
  def num_envs(self) -> int:
    return self._num_envs

  def select_actions(self, observations: acme_types.NestedArray
                     ) -> np.ndarray:
    """[K] actions for the K environments' current observations, a nest of
    [K, ...] arrays (a `BatchedEnvironment` timestep's observation)."""
    (logits, _), new_state = self._policy(observations, self._state)
    logits = logits.numpy()
    extras = {types.LOGITS: logits, types.CORE_STATE: self._state}
    if self._policy_version is not None:
      # Read once per batched step, not once per environment.
      extras[types.POLICY_VERSION] = np.full(
          self._num_envs, self._policy_version.numpy(), np.int64)
      extras[types.AGENT_ID] = self._agent_ids
    self._extras = extras
    # np.array copies: rows are reset in place at episode starts.
    self._state = tree.map_structure(np.array, new_state)
    return sample_categorical(self._rng, logits)

  def observe_first(self, index: int, timestep: dm_env.TimeStep):
    """Environment `index` starts an episode: its LSTM row is reset."""
    if self._adder is not None:
      self._adder.add_first(index, timestep)
    for state, zero in zip(tree.flatten(self._state),
                           tree.flatten(self._zero_state)):
      state[index] = zero[index]

  def observe(self, actions: np.ndarray, next_timesteps: dm_env.TimeStep):
    """Records the K environments' steps after `select_actions`, given as
    one batch of timesteps (FIRST rows, environments reset by this step,
    record nothing: call `observe_first` for them next).
    """
    if self._adder is not None:
      self._adder.add(np.asarray(actions, dtype=np.int32), next_timesteps,
                      self._extras)

  def update(self, wait: bool = False):
    if self._variable_client:
      self._variable_client.update(wait)
