"""An independent numpy reference for one IMPALALearner loss evaluation.

Written from the IMPALA paper (Espeholt et al. 2018, eq. (1) and section 4.2),
LASER's masked V-trace (Schmitt et al. 2019, eq. (8)) and the layout of Acme's
SequenceAdder items, WITHOUT using acme_impala.agent.vtrace, acme_impala.agent.losses,
acme_impala.agent.learning or IMPALANetwork.unroll:

  (i)   `step_network`: the Sonnet network called one step at a time,
        `network(inputs_t, state)`, with the LSTM state reset to
        `network.initial_state` where an episode starts;
  (ii)  `vtrace_targets` / `impala_loss_terms`: eq. (1) with the relevance
        mask, computed as the explicit double sum (no recursion), and the three
        loss terms;
  (iii) `real_transitions`: which transitions of an item are real, by walking
        each row of the batch step by step.

Everything is computed in float64 from the network's float32 outputs.

Layout of an item (Acme SequenceAdder, T+1 steps; transition t goes from step
t to step t+1, step T only gives the bootstrap observation):
  * a real step holds x_t, a_t, r_t, d_t and the actor's extras (behaviour
    logits, LSTM state before the step);
  * when an episode ends (terminal: d = 0, or time-limit truncation: d = 1 on
    its last step), the adder writes a "dummy" step holding the final
    observation with zero action, reward, discount and extras;
  * then either the next episode's first step (start_of_episode=True;
    EndBehavior.CONTINUE) or all-zero steps to the end of the item
    (EndBehavior.ZERO_PAD).
"""

from typing import Dict, Optional

import numpy as np
import tensorflow as tf
import tree


def to_numpy(nest):
  return tree.map_structure(np.asarray, nest)


# -- (i) The network, one step at a time. ----------------------------------


def step_network(network, observations, core_state, start_of_episode):
  """Per-step logits and values of `network` on batch-major items.

  Args:
    network: an RNNCore `((logits [B, A], value [B]), state) =
      network(inputs [B, ...], state)` with `initial_state(batch_size)`.
    observations: nest of [B, T+1, ...] arrays.
    core_state: nest of [B, H] arrays, the LSTM state before step 0.
    start_of_episode: [B, T+1] bool.

  Returns:
    logits [B, T+1, A] and values [B, T+1], float64.
  """
  observations = to_numpy(observations)
  start = np.asarray(start_of_episode, bool)
  batch_size, num_steps = start.shape
  zero_state = to_numpy(network.initial_state(batch_size))
  state = to_numpy(core_state)
  all_logits, all_values = [], []
  for t in range(num_steps):
    # A new episode starts at step t: the actor began it from the initial
    # state.
    state = tree.map_structure(
        lambda z, s, t=t: np.where(start[:, t, None], z, s), zero_state, state)
    inputs = tree.map_structure(lambda x, t=t: tf.constant(x[:, t]),
                                observations)
    state_tf = tree.map_structure(lambda s: tf.constant(s, tf.float32), state)
    (logits, value), new_state = network(inputs, state_tf)
    all_logits.append(np.asarray(logits, np.float64))
    all_values.append(np.asarray(value, np.float64).reshape(batch_size))
    state = to_numpy(new_state)
  return np.stack(all_logits, axis=1), np.stack(all_values, axis=1)


# -- (iii) Which transitions are real. --------------------------------------


def _adder_written(behaviour_logits_t) -> bool:
  # The actor records the logits of its (softmax) policy; the adder writes
  # zeros for steps the actor never acted in.
  return bool(np.all(np.asarray(behaviour_logits_t) == 0))


def real_transitions(start_of_episode, discounts, behaviour_logits):
  """[B, T] 0/1: which transitions of the items the agent should learn from.

  Walks each row: an item may start in the middle of an episode. Transitions
  are real while the episode is running; an episode is over after its
  terminal step (discount 0) or once the adder wrote a step (the dummy after
  any episode end, or zero padding), until a step marked start_of_episode.
  The transition out of the dummy step into the next episode's first step is
  not a transition of either episode.

  Args:
    start_of_episode: [B, T+1] bool.
    discounts: [B, T+1] (or [B, T]) the environment's discounts.
    behaviour_logits: [B, T+1, A] (or [B, T, A]).
  """
  start = np.asarray(start_of_episode, bool)
  discounts = np.asarray(discounts)
  behaviour_logits = np.asarray(behaviour_logits)
  batch_size, num_steps = start.shape
  num_transitions = num_steps - 1
  real = np.zeros([batch_size, num_transitions])
  for b in range(batch_size):
    running = True  # Step 0 continues an episode unless it is adder-written.
    for t in range(num_transitions):
      if start[b, t]:
        running = True
      written = _adder_written(behaviour_logits[b, t])
      if written:
        running = False
      if running and not start[b, t + 1]:
        real[b, t] = 1.
      if discounts[b, t] == 0:
        running = False  # Terminal: what follows is the dummy, then padding.
  return real


# -- (ii) V-trace, eq. (1) with LASER's relevance mask, and the loss. --------


def _log_softmax(logits):
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _clip(x, threshold):
  return x if threshold is None else np.minimum(threshold, x)


def vtrace_targets(ratios, discounts, rewards, values, mask, rho_bar, c_bar,
                   lambda_):
  """v_s for one row, straight from the sum of eq. (1) / LASER eq. (8).

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i m_i c_i)
                                   m_t rho_t delta_t,
    delta_t = r_t + gamma_t V(x_{t+1}) - V(x_t),
    rho_t = min(rho_bar, pi/mu), c_i = lambda min(c_bar, pi/mu).

  Args:
    ratios, discounts, rewards, mask: [T] (discounts already gamma * d_t).
    values: [T+1], values[T] the bootstrap V(x_T).

  Returns:
    [T+1] targets, v_T = V(x_T).
  """
  num_transitions = len(ratios)
  vs = np.array(values, np.float64)
  for s in range(num_transitions):
    total = 0.
    trace = 1.  # prod_{i=s}^{t-1} gamma_i m_i c_i
    for t in range(s, num_transitions):
      rho_t = _clip(ratios[t], rho_bar)
      delta_t = rewards[t] + discounts[t] * values[t + 1] - values[t]
      total += trace * mask[t] * rho_t * delta_t
      trace *= discounts[t] * mask[t] * lambda_ * _clip(ratios[t], c_bar)
    vs[s] = values[s] + total
  return vs


def clip_rewards(rewards, mode: str):
  if mode == 'none':
    return np.asarray(rewards, np.float64)
  if mode == 'abs_one':
    return np.clip(np.asarray(rewards, np.float64), -1., 1.)
  raise NotImplementedError(f'reference has no reward clipping {mode!r}')


def impala_loss_terms(target_logits, values, behaviour_logits, actions,
                      rewards, discounts, mask, *, baseline_cost, entropy_cost,
                      clip_rho_threshold, clip_c_threshold,
                      clip_pg_rho_threshold, lambda_, reduction,
                      entropy_weights=None) -> Dict[str, float]:
  """IMPALA section 4.2 loss terms, batch-major.

  Args:
    target_logits: [B, T, A] learner logits; values: [B, T+1] (bootstrap
      last); behaviour_logits [B, T, A]; actions, rewards (clipped),
      discounts (gamma * d), mask: [B, T]; entropy_weights: [B, T] or None
      (then the mask).
  """
  log_pi = _log_softmax(target_logits)
  log_mu = _log_softmax(behaviour_logits)
  batch_size, num_transitions = np.shape(actions)
  policy = baseline = entropy_sum = 0.
  rho_sum = clipped = vs_sum = adv_sum = 0.
  if entropy_weights is None:
    entropy_weights = mask
  for b in range(batch_size):
    a = np.asarray(actions[b], int)
    idx = np.arange(num_transitions)
    log_pi_a = log_pi[b, idx, a]
    ratios = np.exp(log_pi_a - log_mu[b, idx, a])
    vs = vtrace_targets(ratios, discounts[b], rewards[b], values[b], mask[b],
                        clip_rho_threshold, clip_c_threshold, lambda_)
    for s in range(num_transitions):
      entropy_s = -np.sum(np.exp(log_pi[b, s]) * log_pi[b, s])
      entropy_sum += entropy_weights[b, s] * entropy_s
      if not mask[b, s]:
        continue
      advantage = _clip(ratios[s], clip_pg_rho_threshold) * (
          rewards[b, s] + discounts[b, s] * vs[s + 1] - values[b, s])
      policy += -advantage * log_pi_a[s]
      baseline += 0.5 * (vs[s] - values[b, s]) ** 2
      rho_sum += ratios[s]
      if clip_rho_threshold is not None and ratios[s] > clip_rho_threshold:
        clipped += 1
      vs_sum += vs[s]
      adv_sum += advantage
  num_valid = float(np.sum(mask))
  normaliser = 1. if reduction == 'sum' else max(num_valid, 1.)
  out = {
      'policy_loss': policy / normaliser,
      'baseline_loss': baseline_cost * baseline / normaliser,
      'entropy_loss': -entropy_cost * entropy_sum / normaliser,
      'num_valid_steps': num_valid,
      'entropy': entropy_sum / max(float(np.sum(entropy_weights)), 1.),
      'mean_rho': rho_sum / max(num_valid, 1.),
      'clipped_rho_fraction': clipped / max(num_valid, 1.),
      'mean_vs': vs_sum / max(num_valid, 1.),
      'mean_advantage': adv_sum / max(num_valid, 1.),
  }
  out['loss'] = out['policy_loss'] + out['baseline_loss'] + out['entropy_loss']
  return out


# -- One learner step's loss on a batch. ------------------------------------


def learner_loss(network, data, config, online: Optional[np.ndarray] = None):
  """What the learner's first step should log, for the current weights.

  Args:
    network: the learner's network, BEFORE the update.
    data: batch-major Acme Step/Trajectory nest [B, T+1, ...] with extras
      'logits' and 'core_state'.
    config: an IMPALAConfig (V-trace correction, no trust region).
    online: [B] bool, rows from the queue (only matters with
      config.entropy_on_online_only); None: all online.

  Returns:
    (metrics dict, mask [B, T]).
  """
  if config.off_policy_correction != 'vtrace':
    raise NotImplementedError('reference implements V-trace only')
  if config.kl_threshold is not None:
    raise NotImplementedError('reference has no trust region')
  data = to_numpy(data)
  start = np.asarray(data.start_of_episode, bool)
  behaviour_logits = np.asarray(data.extras['logits'], np.float64)[:, :-1]
  raw_discounts = np.asarray(data.discount, np.float64)[:, :-1]
  mask = real_transitions(start, raw_discounts, behaviour_logits)
  core_state = tree.map_structure(lambda x: x[:, 0],
                                  data.extras['core_state'])
  logits, values = step_network(network, data.observation, core_state, start)
  entropy_weights = mask
  if config.entropy_on_online_only and online is not None:
    entropy_weights = mask * np.asarray(online, np.float64)[:, None]
  metrics = impala_loss_terms(
      logits[:, :-1], values, behaviour_logits,
      np.asarray(data.action)[:, :-1],
      clip_rewards(np.asarray(data.reward)[:, :-1], config.reward_clipping),
      config.discount * raw_discounts, mask,
      baseline_cost=config.baseline_cost, entropy_cost=config.entropy_cost,
      clip_rho_threshold=config.clip_rho_threshold,
      clip_c_threshold=config.clip_c_threshold,
      clip_pg_rho_threshold=config.clip_pg_rho_threshold,
      lambda_=config.lambda_, reduction=config.loss_reduction,
      entropy_weights=entropy_weights)
  return metrics, mask


LOSS_KEYS = ('loss', 'policy_loss', 'baseline_loss', 'entropy_loss',
             'num_valid_steps')
DIAGNOSTIC_KEYS = ('entropy', 'mean_rho', 'clipped_rho_fraction', 'mean_vs',
                   'mean_advantage')


def assert_logged_matches(row, expected, keys=LOSS_KEYS + DIAGNOSTIC_KEYS,
                          rtol=1e-4, atol=1e-6):
  """Compares a learner's logged row with `learner_loss` metrics."""
  mismatches = []
  for key in keys:
    got, want = float(row[key]), float(expected[key])
    if not np.isclose(got, want, rtol=rtol, atol=atol):
      mismatches.append(f'{key}: learner logged {got!r}, reference {want!r}')
  assert not mismatches, '\n'.join(mismatches)
