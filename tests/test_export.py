"""export_policy: the SavedModel runs where only TensorFlow is installed and
acts as the actors do, step for step."""

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf
from acme_impala.agent import acting
from acme_impala.agent import builder as builder_lib
from acme_impala.agent import export
from acme_impala.agent import networks
from acme_impala.agent import presets
from acme_impala.envs import adapter
from acme_impala.envs import registry

B = 3  # Environments acting in one batch.
STEPS = 40
SEED = 7

# Runs in a fresh interpreter: loads the SavedModel with TensorFlow alone and
# replays the recorded inputs, resetting a row's state where its episode
# starts, as the actors do.
_REPLAY = r'''
import json, os, sys
import numpy as np
import tensorflow as tf

model_dir, inputs_path, outputs_path = sys.argv[1:]
policy = tf.saved_model.load(model_dir)
loaded = sorted(m for m in sys.modules
                if m.split('.')[0] in ('acme_impala', 'acme', 'sonnet'))
assert not loaded, loaded
with open(os.path.join(model_dir, 'policy.json')) as f:
  names = [i['name'] for i in json.load(f)['step']['inputs']]
state_names = [n for n in names if n.startswith('state_')]
recorded = np.load(inputs_path)
batch_size = recorded['first'].shape[1]
initial = policy.initial_state(batch_size)
state = dict(initial)
outputs = {k: [] for k in ['action', 'greedy', 'logits', 'value'] + state_names}
for t in range(len(recorded['first'])):
  reset = recorded['first'][t][:, None]
  state = {k: tf.where(reset, initial[k], v) for k, v in state.items()}
  inputs = {'observation': recorded['observation'][t],
            'prev_action': recorded['prev_action'][t],
            'prev_reward': recorded['prev_reward'][t],
            'noise': recorded['noise'][t], **state}
  out = policy.step(*[inputs[n] for n in names])
  # The serving signature takes the same inputs by name.
  served = policy.signatures['step'](**inputs)
  assert sorted(served) == sorted(out), (sorted(served), sorted(out))
  np.testing.assert_array_equal(served['action'], out['action'])
  greedy = policy.step(*[inputs[n] if n != 'noise' else
                         np.zeros_like(inputs['noise']) for n in names])
  outputs['greedy'].append(greedy['action'].numpy())
  for k in outputs:
    if k != 'greedy':
      outputs[k].append(out[k].numpy())
  state = {k: out[k] for k in state_names}
np.savez(outputs_path, **{k: np.stack(v) for k, v in outputs.items()})
'''


def _network():
  config = presets.get_config('cartpole').replace(lstm_size=16)
  spec = registry.environment_spec(config.env_id)
  tf.random.set_seed(SEED)
  return builder_lib.IMPALABuilder(config, spec).make_network(), spec


def _act(network):
  """Drives a BatchedIMPALAActor on B CartPoles for STEPS steps; returns the
  inputs it saw (with the noise its sampler drew) and what it computed."""
  envs = [registry.make_environment('CartPole-v1', seed=i)
          for i in range(B)]
  actor = acting.BatchedIMPALAActor(network, B, seed=SEED)
  # The actor draws one [B, A] Gumbel sample per step from this stream.
  noise_rng = np.random.default_rng(SEED)
  timesteps = [env.reset() for env in envs]
  first = np.ones(B, bool)
  for i, timestep in enumerate(timesteps):
    actor.observe_first(i, timestep)
  inputs = {k: [] for k in ('observation', 'prev_action', 'prev_reward',
                            'first', 'noise')}
  acted = {k: [] for k in ('action', 'logits', 'hidden', 'cell')}
  for _ in range(STEPS):
    observations = [t.observation for t in timesteps]
    actions = actor.select_actions(
        adapter.stack_timesteps(timesteps).observation)
    # The actor shows its logits and LSTM state to its adder only.
    acted['logits'].append(actor._extras['logits'])  # pylint: disable=protected-access
    state = actor._state  # pylint: disable=protected-access
    acted['hidden'].append(np.copy(state.hidden))
    acted['cell'].append(np.copy(state.cell))
    acted['action'].append(actions)
    inputs['observation'].append(np.stack([o.observation
                                           for o in observations]))
    inputs['prev_action'].append(np.stack([o.action for o in observations]))
    inputs['prev_reward'].append(np.stack([o.reward for o in observations]))
    inputs['first'].append(first)
    inputs['noise'].append(noise_rng.gumbel(size=(B, 2)).astype(np.float32))
    timesteps = [env.step(a) for env, a in zip(envs, actions)]
    first = np.array([t.last() for t in timesteps])
    for i in np.flatnonzero(first):
      timesteps[i] = envs[i].reset()
      actor.observe_first(i, timesteps[i])
  for env in envs:
    env.close()
  return ({k: np.stack(v) for k, v in inputs.items()},
          {k: np.stack(v) for k, v in acted.items()})


def test_saved_policy_acts_as_the_actor_in_a_tensorflow_only_process(
    tmp_path):
  network, spec = _network()
  model_dir = str(tmp_path / 'policy')
  description = export.export_policy(network, spec, model_dir)
  inputs, acted = _act(network)
  # Episodes end within the run, so the state resets are exercised.
  assert inputs['first'][1:].any()

  inputs_path = str(tmp_path / 'inputs.npz')
  outputs_path = str(tmp_path / 'outputs.npz')
  np.savez(inputs_path, **inputs)
  proc = subprocess.run(
      [sys.executable, '-c', _REPLAY, model_dir, inputs_path, outputs_path],
      cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-5000:]
  out = np.load(outputs_path)

  np.testing.assert_array_equal(out['action'], acted['action'])
  np.testing.assert_allclose(out['logits'], acted['logits'], atol=1e-5)
  np.testing.assert_allclose(out['state_hidden'], acted['hidden'], atol=1e-5)
  np.testing.assert_allclose(out['state_cell'], acted['cell'], atol=1e-5)
  assert out['value'].shape == (STEPS, B)
  # Zero noise is the greedy action; the Gumbel noise made a difference.
  np.testing.assert_array_equal(out['greedy'],
                                np.argmax(acted['logits'], axis=-1))
  assert (out['greedy'] != out['action']).any()

  with open(os.path.join(model_dir, export.POLICY_FILE)) as f:
    assert json.load(f) == description
  assert [i['name'] for i in description['step']['inputs']] == [
      'observation', 'prev_action', 'prev_reward', 'state_hidden',
      'state_cell', 'noise']
  assert description['step']['inputs'][0]['shape'] == [None, 4]
  assert description['num_actions'] == 2


def test_atari_policy_takes_uint8_frames(tmp_path):
  config = presets.get_config('atari').replace(env_id='ALE/Breakout-v5',
                                                lstm_size=16)
  spec = registry.environment_spec(config.env_id)
  network = builder_lib.IMPALABuilder(config, spec).make_network()
  model_dir = str(tmp_path / 'policy')
  description = export.export_policy(network, spec, model_dir)
  frame = description['step']['inputs'][0]
  assert (frame['shape'], frame['dtype']) == ([None, 84, 84, 4], 'uint8')

  policy = tf.saved_model.load(model_dir)
  frames = np.random.default_rng(0).integers(0, 256, (2, 84, 84, 4),
                                             dtype=np.uint8)
  prev_action = np.array([0, 3], np.int32)
  prev_reward = np.array([0., 5.], np.float32)
  state = policy.initial_state(2)
  out = policy.step(frames, prev_action, prev_reward, state['state_hidden'],
                    state['state_cell'], np.zeros([2, 4], np.float32))
  (logits, value), new_state = network(
      networks.OAR(frames, prev_action, prev_reward),
      network.initial_state(2))
  np.testing.assert_allclose(out['logits'], logits, atol=1e-5)
  np.testing.assert_allclose(out['value'], value, atol=1e-5)
  np.testing.assert_allclose(out['state_cell'], new_state.cell, atol=1e-5)
  np.testing.assert_array_equal(out['action'], np.argmax(logits, axis=-1))
