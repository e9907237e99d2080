"""The recurrent policy as a TensorFlow SavedModel that needs only TensorFlow.

`export_policy(network, environment_spec, directory)` writes a SavedModel of
a `networks.IMPALANetwork` (any RNNCore returning ((logits [B, A],
value [B]), state)) with two functions, all inputs and outputs plain tensors
(no Sonnet or Acme structures), so a process with TensorFlow alone can load
and run it:

  initial_state(batch_size)  int32 scalar B
      -> {'state_hidden': float32 [B, H], 'state_cell': float32 [B, H]}
  step(observation, prev_action, prev_reward, state_hidden, state_cell, noise)
      observation   [B, *obs_shape] of the observation's dtype (CartPole
                    float32 [B, 4], Atari uint8 [B, 84, 84, 4]);
      prev_action   int32 [B], the previous action (0 at an episode's start);
      prev_reward   float32 [B], the previous reward, unclipped (0 at start);
      state_*       the state from `initial_state` or the previous `step`;
      noise         float32 [B, A], added to the logits before the argmax.
      -> {'action': int32 [B], 'logits': float32 [B, A], 'value': float32 [B],
          'state_hidden': [B, H], 'state_cell': [B, H]}

The state names are the network's state fields (an LSTM's hidden and cell);
`policy.json` beside the SavedModel lists every input and output in order,
with shapes (None: any size) and dtypes. `step` takes its inputs in that
order; the serving signatures `step` (also `serving_default`) and
`initial_state` take them by name.

Actions follow the actors' rule (`acting.sample_categorical`): argmax(logits +
noise). Gumbel(0, 1) noise samples from softmax(logits): drawn as
`np.random.default_rng(seed).gumbel(size=(B, A))`, once per step, it gives
the actions of a BatchedIMPALAActor with that seed; zeros give the greedy
action. The actors add the float64 noise: rounded to float32 it changes an
action only when two sums tie to within float32 rounding. At an episode's
start, reset that row of the state to the initial state, as the actors do.

    policy = tf.saved_model.load(directory)
    state = policy.initial_state(1)
    out = policy.step(observation[None], prev_action[None], prev_reward[None],
                      state['state_hidden'], state['state_cell'],
                      np.zeros([1, num_actions], np.float32))
"""

import json
import os
from typing import Any, Dict, Union

from acme import specs
import sonnet as snt
import tensorflow as tf
import tree

from acme_impala.agent import networks

POLICY_FILE = 'policy.json'
_STATE_PREFIX = 'state_'


def _describe(spec: Union[tf.TensorSpec, tf.Tensor], name: str
              ) -> Dict[str, Any]:
  return {'name': name, 'shape': spec.shape.as_list(),
          'dtype': spec.dtype.name}


def export_policy(network: snt.RNNCore,
                  environment_spec: specs.EnvironmentSpec,
                  directory: str) -> Dict[str, Any]:
  """Writes the SavedModel of `network` and its `policy.json` to `directory`.

  Args:
    network: RNNCore (inputs [B, ...], state) -> ((logits [B, A], value [B]),
      state), with its variables created; the SavedModel holds their current
      values.
    environment_spec: the spec of the environment the network acts in; an
      OAR observation (registry.make_environment's default) is fed from
      the `observation`, `prev_action` and `prev_reward` inputs, a plain one
      from `observation` alone (the other two are then ignored).
    directory: where to write; created if needed.

  Returns:
    The description written to `<directory>/policy.json`: the inputs and
    outputs of `initial_state` and `step`, and the number of actions.
  """
  num_actions = int(environment_spec.actions.num_values)
  observations = environment_spec.observations
  oar = networks.is_oar(observations)
  frame = observations.observation if oar else observations
  # The state's parts, named after their fields, in tree.flatten's order
  # (`step` rebuilds the network's state from them in that order).
  structure = network.initial_state(1)
  names = [_STATE_PREFIX + '_'.join(str(p) for p in path)
           for path, _ in tree.flatten_with_path(structure)]
  state_specs = [tf.TensorSpec([None, *s.shape[1:]], s.dtype, name=n)
                 for n, s in zip(names, tree.flatten(structure))]
  step_specs = [
      tf.TensorSpec([None, *frame.shape], tf.as_dtype(frame.dtype),
                    name='observation'),
      tf.TensorSpec([None], tf.int32, name='prev_action'),
      tf.TensorSpec([None], tf.float32, name='prev_reward'),
      *state_specs,
      tf.TensorSpec([None, num_actions], tf.float32, name='noise'),
  ]
  initial_specs = [tf.TensorSpec([], tf.int32, name='batch_size')]

  def initial_state(batch_size):
    return dict(zip(names, tree.flatten(network.initial_state(batch_size))))

  # *args: the number of state parts is the network's.
  def step(observation, prev_action, prev_reward, *state_and_noise):
    *state, noise = state_and_noise
    inputs = (type(observations)(observation=observation, action=prev_action,
                                 reward=prev_reward) if oar else observation)
    state = tree.unflatten_as(structure, state)
    (logits, value), new_state = network(inputs, state)
    return {'action': tf.argmax(logits + noise, axis=-1,
                                output_type=tf.int32),
            'logits': logits, 'value': value,
            **dict(zip(names, tree.flatten(new_state)))}

  module = tf.Module()
  # Only the variables are tracked, not the Sonnet module that owns them:
  # loading then revives no object of a library other than TensorFlow.
  module.policy_variables = list(network.variables)
  module.initial_state = tf.function(initial_state, autograph=False,
                                     input_signature=initial_specs)
  module.step = tf.function(step, autograph=False, input_signature=step_specs)
  initial_fn = module.initial_state.get_concrete_function()
  step_fn = module.step.get_concrete_function()
  tf.saved_model.save(module, directory, signatures={
      'initial_state': initial_fn, 'step': step_fn, 'serving_default': step_fn})

  def signature(input_specs, fn):
    return {'inputs': [_describe(s, s.name) for s in input_specs],
            'outputs': [_describe(t, name) for name, t in sorted(
                fn.structured_outputs.items())]}
  description = {
      'num_actions': num_actions,
      'initial_state': signature(initial_specs, initial_fn),
      'step': signature(step_specs, step_fn),
      'action': 'argmax(logits + noise); Gumbel(0, 1) noise samples from '
                'softmax(logits), zeros give the greedy action',
      'observation_is_oar': oar,
  }
  with open(os.path.join(directory, POLICY_FILE), 'w') as f:
    json.dump(description, f, indent=1)
    f.write('\n')
  return description
