"""Network output shapes, OAR inputs, and unroll == step-by-step with resets."""

import os
import subprocess
import sys

from acme.tf.networks import vision
from acme.wrappers import observation_action_reward
import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf

from acme_impala.agent import config as config_lib
from acme_impala.agent import networks

OAR = observation_action_reward.OAR


def _oar(obs, t_b):
  return OAR(observation=obs,
             action=tf.zeros(t_b, tf.int32),
             reward=tf.ones(t_b, tf.float32) * 3.)  # clipped to 1 inside


@pytest.mark.parametrize('name,obs_shape,dtype,lstm', [
    ('mlp_lstm', (4,), tf.float32, 32),
    ('mlp_lstm', (10, 10, 4), tf.uint8, 32),  # MinAtar-like channels.
    ('minatar', (10, 10, 7), tf.uint8, 128),
    ('shallow', (84, 84, 4), tf.uint8, 256),
    ('deep', (84, 84, 4), tf.uint8, 256),
])
def test_output_shapes(name, obs_shape, dtype, lstm):
  config = config_lib.IMPALAConfig(network=name, lstm_size=lstm)
  net = networks.make_network(config, num_actions=6)
  b, t = 3, 5
  obs = tf.zeros((b,) + obs_shape, dtype)
  state = net.initial_state(b)
  (logits, value), new_state = net(_oar(obs, [b]), state)
  assert logits.shape == (b, 6) and value.shape == (b,)
  assert new_state.hidden.shape == (b, lstm)
  seq = tf.zeros((t, b) + obs_shape, dtype)
  (logits, values), _ = net.unroll(_oar(seq, [t, b]), state,
                                   tf.zeros((t, b), tf.bool))
  assert logits.shape == (t, b, 6) and values.shape == (t, b)


@pytest.mark.parametrize('name,obs_shape', [
    ('shallow', (84, 84, 4)), ('deep', (84, 84, 4)), ('minatar', (10, 10, 4)),
])
def test_feed_forward_network_is_the_heads_on_the_embedding(name, obs_shape):
  """use_lstm=False (the paper's feed-forward Atari agents): no LSTM
  variables, outputs that depend on the current input alone (any state,
  any history), the placeholder state carried unchanged, and an unroll
  that is the steps one at a time."""
  config = config_lib.IMPALAConfig(network=name, use_lstm=False)
  net = networks.make_network(config, num_actions=4)
  b, t = 2, 3
  rng = np.random.default_rng(1)
  seq = tf.constant(rng.integers(0, 2, (t, b) + obs_shape).astype(np.uint8))
  inputs = OAR(observation=seq, action=tf.constant(rng.integers(0, 4, (t, b)),
                                                   tf.int32),
               reward=tf.constant(rng.normal(size=(t, b)), tf.float32))
  state = net.initial_state(b)
  assert state.hidden.shape == (b, 1) and state.cell.shape == (b, 1)
  other = tf.nest.map_structure(lambda x: x + 5., state)
  step = lambda i, s: net(tf.nest.map_structure(lambda x: x[i], inputs), s)
  (logits, value), new_state = step(1, state)
  (logits_other, value_other), _ = step(1, other)
  np.testing.assert_allclose(logits, logits_other)
  np.testing.assert_allclose(value, value_other)
  assert new_state is state
  (all_logits, all_values), final = net.unroll(
      inputs, state, tf.zeros((t, b), tf.bool))
  assert final is state
  for i in range(t):
    (logits_i, value_i), _ = step(i, state)
    np.testing.assert_allclose(all_logits[i], logits_i, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(all_values[i], value_i, rtol=1e-5, atol=1e-6)
  assert not [v.name for v in net.trainable_variables if 'lstm' in v.name]


@pytest.mark.parametrize('channels', [4, 6, 7, 10])  # The five games' C.
def test_minatar_torso_is_the_minatar_papers(channels):
  """Conv 16 x 3x3 stride 1 without padding, ReLU, FC 128, ReLU (Young and
  Tian 2019): its parameter count, and its output computed by hand."""
  torso = networks.minatar_torso()
  rng = np.random.default_rng(0)
  frames = (rng.random((2, 10, 10, channels)) < 0.3).astype(np.uint8)
  out = torso(tf.constant(frames))
  assert out.shape == (2, 128)
  count = sum(int(v.shape.num_elements()) for v in torso.trainable_variables)
  assert count == 16 * (9 * channels + 1) + 128 * (8 * 8 * 16 + 1)
  conv, = [v for v in torso.trainable_variables if len(v.shape) == 4]
  lin_w = [v for v in torso.trainable_variables if len(v.shape) == 2][0]
  biases = sorted((v for v in torso.trainable_variables if len(v.shape) == 1),
                  key=lambda v: v.shape[0])
  conv_b, lin_b = biases
  x = frames.astype(np.float64)
  w = conv.numpy().astype(np.float64)  # [3, 3, C, 16]
  h = np.zeros((2, 8, 8, 16))
  for i in range(8):
    for j in range(8):
      h[:, i, j] = np.einsum('bxyc,xyco->bo', x[:, i:i + 3, j:j + 3], w)
  h = np.maximum(h + conv_b.numpy(), 0).reshape(2, -1)
  want = np.maximum(h @ lin_w.numpy() + lin_b.numpy(), 0)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)


def test_deep_torso_has_15_conv_layers():
  config = config_lib.IMPALAConfig(network='deep', lstm_size=8)
  net = networks.make_network(config, num_actions=4)
  net(_oar(tf.zeros((1, 84, 84, 4), tf.uint8), [1]), net.initial_state(1))
  convs = [v for v in net.variables if v.shape.rank == 4]  # conv kernels
  assert len(convs) == 15


def test_deep_torso_ends_with_relu_after_fc_256():
  """Figure 3 (right) of the IMPALA paper: ... FC 256, ReLU, then the LSTM.

  Acme's ResNetTorso stops at the linear layer (its MLP has no final
  activation). The reference here is a separate Acme ResNetTorso given the
  torso's own weights: the torso must equal relu of it, with no extra
  variables.
  """
  tf.random.set_seed(1)
  rng = np.random.default_rng(1)
  frames = tf.constant(rng.integers(0, 256, (4, 84, 84, 4)), tf.uint8)
  torso = networks.deep_atari_torso()
  out = torso(frames).numpy()
  assert out.shape == (4, 256)
  assert (out >= 0).all()
  assert (out == 0).any() and (out > 0).any()

  reference = vision.ResNetTorso(num_channels=(16, 32, 32),
                                 num_blocks=(2, 2, 2), num_output_hidden=(256,))
  reference(frames)  # Creates its variables.

  # Same variables, nothing added. Acme's three ResidualBlockGroups share
  # variable names, so pair the variables by Sonnet's deterministic order and
  # check name (without the uniquified top scope) and shape of each pair.
  ours, theirs = torso.variables, reference.variables
  assert len(ours) == len(theirs) == 32  # 15 convs + 1 linear, w and b.
  for mine, ref in zip(ours, theirs):
    assert mine.name.split('/', 1)[1] == ref.name.split('/', 1)[1]
    assert mine.shape == ref.shape
    ref.assign(mine)
  pre_activation = reference(frames).numpy()
  assert (pre_activation < 0).any()  # The ReLU has something to do.
  np.testing.assert_allclose(out, np.maximum(pre_activation, 0.), atol=1e-6)


def test_plain_observations_are_accepted():
  config = config_lib.IMPALAConfig(lstm_size=8)
  net = networks.make_network(config, num_actions=2)
  (logits, value), _ = net(tf.zeros((2, 4)), net.initial_state(2))
  assert logits.shape == (2, 2) and value.shape == (2,)


def test_unroll_matches_step_by_step_with_resets():
  """Folding time into batch for the torso must not change the result, and
  a start-of-episode step must see the initial LSTM state."""
  tf.random.set_seed(0)
  config = config_lib.IMPALAConfig(lstm_size=16)
  net = networks.make_network(config, num_actions=3)
  t, b = 6, 2
  rng = np.random.default_rng(0)
  obs = tf.constant(rng.normal(size=(t, b, 4)), tf.float32)
  inputs = OAR(observation=obs,
               action=tf.constant(rng.integers(0, 3, (t, b)), tf.int32),
               reward=tf.constant(rng.normal(size=(t, b)), tf.float32))
  start = np.zeros((t, b), bool)
  start[3, 0] = True
  state0 = net.initial_state(b)
  # A non-zero initial state, so that the reset is visible.
  state0 = tf.nest.map_structure(lambda s: s + 0.5, state0)
  (logits, values), _ = net.unroll(inputs, state0, tf.constant(start))

  state = state0
  for i in range(t):
    if start[i, 0]:
      zero = net.initial_state(b)
      state = tf.nest.map_structure(
          lambda z, s: tf.concat([z[:1], s[1:]], 0), zero, state)
    step_in = tf.nest.map_structure(lambda x, i=i: x[i], inputs)
    (l, v), state = net(step_in, state)
    np.testing.assert_allclose(l.numpy(), logits[i].numpy(), atol=1e-5)
    np.testing.assert_allclose(v.numpy(), values[i].numpy(), atol=1e-5)
  # And the reset really changed row 0 after step 3.
  (l_noreset, _), _ = net.unroll(inputs, state0, tf.zeros((t, b), tf.bool))
  assert not np.allclose(l_noreset[3, 0].numpy(), logits[3, 0].numpy())
  np.testing.assert_allclose(l_noreset[3, 1].numpy(), logits[3, 1].numpy(),
                             atol=1e-6)


@pytest.mark.parametrize('name,obs_shape', [
    ('shallow', (84, 84, 4)), ('mlp_lstm', (4,))])
def test_batch_major_embedding_unrolls_as_the_time_major_one(name, obs_shape):
  """The learner's path (embed the [B, T, ...] batch as it comes, then
  `unroll_embedded`) gives the time-major `unroll`'s logits, values and
  final state: each step's embedding is the same, only its place moves."""
  tf.random.set_seed(0)
  config = config_lib.IMPALAConfig(network=name, lstm_size=16)
  net = networks.make_network(config, num_actions=3)
  t, b = 4, 3
  rng = np.random.default_rng(2)
  obs = rng.integers(0, 256, (b, t) + obs_shape).astype(np.uint8)
  batch_major = OAR(observation=tf.constant(obs),
                    action=tf.constant(rng.integers(0, 3, (b, t)), tf.int32),
                    reward=tf.constant(rng.normal(size=(b, t)), tf.float32))
  time_major = tf.nest.map_structure(
      lambda x: tf.constant(np.swapaxes(x.numpy(), 0, 1)), batch_major)
  start = np.zeros((t, b), bool)
  start[2, 1] = True
  state0 = tf.nest.map_structure(lambda s: s + 0.3, net.initial_state(b))

  embeddings = net.embed_sequence(batch_major, batch_major=True)
  assert embeddings.shape[:2] == (t, b)
  np.testing.assert_allclose(embeddings.numpy(),
                             net.embed_sequence(time_major).numpy(),
                             rtol=1e-5, atol=1e-6)
  got = net.unroll_embedded(embeddings, state0, tf.constant(start))
  want = net.unroll(time_major, state0, tf.constant(start))
  for g, w in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
    np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
  # Steps really differ, so that a wrong transposition would show.
  assert not np.allclose(embeddings[0].numpy(), embeddings[1].numpy())


def test_reward_is_clipped_and_action_one_hot():
  config = config_lib.IMPALAConfig(lstm_size=8)
  net = networks.make_network(config, num_actions=3)
  obs = tf.zeros((1, 4))
  emb_big = net._embed(OAR(obs, tf.constant([2]), tf.constant([100.])))
  emb_one = net._embed(OAR(obs, tf.constant([2]), tf.constant([1.])))
  np.testing.assert_allclose(emb_big.numpy(), emb_one.numpy())
  assert emb_one.numpy()[0, -4:].tolist() == [0., 0., 1., 1.]


def _relative_error(got, want) -> float:
  return float(tf.norm(got - want) / tf.norm(want))


@pytest.mark.parametrize('compute_dtype,conv_impl', [
    ('float32', 'conv'), ('float32', 'space_to_depth'), ('bfloat16', 'conv')])
def test_shallow_torso_on_frames_is_the_papers_formula(compute_dtype,
                                                       conv_impl, request):
  """uint8 frames: the torso (first layer's weights scaled by 1/255, layers in
  the compute dtype) equals the layers applied to frames / 255 in float32
  (the direct formula, with the module's own variables), in value and in
  every variable's gradient: to float32 rounding in float32, to bfloat16's
  8-bit mantissa (relative error < 2 %, gradients aligned) in bfloat16.
  Its convolutions run as TensorFlow's or as space-to-depth matmuls."""
  if compute_dtype == 'bfloat16':
    request.getfixturevalue('bfloat16_runs')
  torso = networks.ShallowAtariTorso(compute_dtype, conv_impl=conv_impl)
  rng = np.random.default_rng(0)
  frames = rng.integers(0, 256, (3, 84, 84, 4), dtype=np.uint8)
  out = torso(frames)  # Creates the variables.
  assert out.dtype == tf.float32
  assert all(v.dtype == tf.float32 for v in torso.variables)
  conv1, conv2, linear = torso._parametrised  # pylint: disable=protected-access
  # Non-zero biases, so the first bias is checked against the scaling.
  for v in torso.trainable_variables:
    v.assign(v + rng.normal(size=v.shape).astype(np.float32) * 0.1)

  def direct(x):
    h = tf.nn.relu(tf.nn.conv2d(tf.cast(x, tf.float32) / 255., conv1.w, 4,
                                'VALID') + conv1.b)
    h = tf.nn.relu(tf.nn.conv2d(h, conv2.w, 2, 'VALID') + conv2.b)
    return tf.nn.relu(tf.matmul(tf.reshape(h, [3, -1]), linear.w) + linear.b)

  variables = torso.trainable_variables
  with tf.GradientTape(persistent=True) as tape:
    got, want = torso(frames), direct(frames)
    got_loss, want_loss = tf.reduce_sum(got ** 2), tf.reduce_sum(want ** 2)
  assert float(tf.reduce_mean(tf.cast(want > 0, tf.float32))) > 0.05
  got_grads = tape.gradient(got_loss, variables)
  want_grads = tape.gradient(want_loss, variables)
  if compute_dtype == 'float32':
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4,
                               atol=1e-5)
    for v, g, w in zip(variables, got_grads, want_grads):
      np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-3, atol=1e-4,
                                 err_msg=v.name)
  else:
    assert 1e-4 < _relative_error(got, want) < 0.02
    for v, g, w in zip(variables, got_grads, want_grads):
      assert g.dtype == tf.float32, v.name
      assert _relative_error(g, w) < 0.03, v.name
  # Float inputs are taken as they are (no scaling).
  scaled = torso(frames.astype(np.float32) / 255.)
  if compute_dtype == 'float32':
    np.testing.assert_allclose(scaled.numpy(), want.numpy(), rtol=1e-4,
                               atol=1e-5)
  else:
    assert _relative_error(scaled, want) < 0.02


def _layer_cases(rng, dtype):
  """(name, the layer, its composition of TensorFlow ops, x, w, b)."""
  conv_x = rng.normal(size=(3, 12, 12, 4))
  conv_w = rng.normal(size=(4, 4, 4, 5)) * 0.3
  lin_x, lin_w = rng.normal(size=(6, 9)), rng.normal(size=(9, 5)) * 0.3
  b = rng.normal(size=5) * 0.5

  def conv(x, w, b):
    return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 2, 'VALID'),
                                     tf.cast(b, x.dtype)))

  def linear(x, w, b):
    return tf.nn.relu(tf.matmul(x, w) + tf.cast(b, x.dtype))

  def as_tensors(*arrays):
    return [tf.constant(a, d) for a, d in zip(arrays,
                                               (dtype, dtype, tf.float32))]

  cases = [
      ('conv', lambda x, w, b: networks.conv2d_bias_relu(x, w, b, 2), conv,
       *as_tensors(conv_x, conv_w, b)),
      ('linear', networks.linear_bias_relu, linear,
       *as_tensors(lin_x, lin_w, b)),
  ]
  if dtype != tf.float32:
    # The space-to-depth layers run where oneDNN is off, in float32 only.
    return cases
  # Not square, so that a mix-up of rows and columns shows.
  s2d_x = rng.normal(size=(3, 12, 10, 4))
  return cases + [
      ('space_to_depth conv',
       lambda x, w, b: networks.space_to_depth_conv2d_bias_relu(
           tf.nn.space_to_depth(x, 2), w, b, 2), conv,
       *as_tensors(s2d_x, conv_w, b)),
      # Its 5 x 4 output cropped to 4 x 4, in blocks of 2 x 2.
      ('space_to_depth conv, output in blocks',
       lambda x, w, b: networks.space_to_depth_conv2d_bias_relu(
           tf.nn.space_to_depth(x, 2), w, b, 2, out_block=2),
       lambda x, w, b: tf.nn.space_to_depth(conv(x, w, b)[:, :4, :4], 2),
       *as_tensors(s2d_x, conv_w, b)),
      # A 5 x 7 output cropped along both sides to 4 x 6.
      ('space_to_depth conv, output in blocks, both sides cropped',
       lambda x, w, b: networks.space_to_depth_conv2d_bias_relu(
           tf.nn.space_to_depth(x, 2), w, b, 2, out_block=2),
       lambda x, w, b: tf.nn.space_to_depth(conv(x, w, b)[:, :4, :6], 2),
       *as_tensors(rng.normal(size=(3, 12, 16, 4)), conv_w, b)),
  ]


@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_bias_relu_layers_are_autodiff_of_their_formula(dtype, request):
  """conv2d_bias_relu and linear_bias_relu (hand-written gradients) against
  the same layers left to autodiff, eagerly and in a graph: value and the
  gradients of x, w and b (in float32 to float32 rounding; in bfloat16 to
  its rounding, b's gradient in float32 and closer than autodiff's
  bfloat16 sum). Upstream gradients that are not finite where the layer's
  output is 0 are dropped."""
  if dtype == 'bfloat16':
    request.getfixturevalue('bfloat16_runs')
  dtype = tf.as_dtype(dtype)
  rng = np.random.default_rng(0)
  for name, layer, formula, x, w, b in _layer_cases(rng, dtype):

    def value_and_grads(fn, x, w, b):
      with tf.GradientTape() as tape:
        tape.watch([x, w, b])
        y = fn(x, w, b)
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * dy)
      return y, tape.gradient(loss, [x, w, b])

    dy = tf.constant(rng.normal(size=layer(x, w, b).shape), tf.float32)
    for run in (value_and_grads, tf.function(value_and_grads)):
      got_y, got = run(layer, x, w, b)
      want_y, want = run(formula, x, w, b)
      assert 0.2 < float(tf.reduce_mean(tf.cast(want_y > 0, tf.float32))) < 1
      assert got_y.dtype == dtype and got[2].dtype == tf.float32, name
      tol = dict(rtol=1e-5, atol=1e-6) if dtype == tf.float32 else dict(
          rtol=0.02, atol=0.02)
      np.testing.assert_allclose(tf.cast(got_y, tf.float32),
                                 tf.cast(want_y, tf.float32), **tol)
      for g, v, what in zip(got, want, 'xwb'):
        np.testing.assert_allclose(tf.cast(g, tf.float32),
                                   tf.cast(v, tf.float32), **tol,
                                   err_msg=f'{name}: d{what}')
    if dtype == tf.float32 and 'blocks' not in name:
      # Non-finite upstream gradients, a channel that is 0 everywhere (its
      # bias far below the rest): its bias gradient is 0 here (ReluGrad's
      # dy * 0 would make it NaN), the others' are not finite.
      b_off = tf.tensor_scatter_nd_update(b, [[0]], [-100.])
      y = layer(x, w, b_off)
      assert float(tf.reduce_max(y[..., 0])) == 0.
      assert bool(tf.reduce_all(tf.reduce_any(
          tf.reshape(y[..., 1:] > 0, [-1, y.shape[-1] - 1]), axis=0)))
      dy = tf.where(tf.reshape(tf.range(tf.size(y)), y.shape) % 2 == 0,
                    float('nan'), float('inf'))
      with tf.GradientTape() as tape:
        tape.watch(b_off)
        out = layer(x, w, b_off)
      db = tape.gradient(out, b_off, output_gradients=dy).numpy()
      assert db[0] == 0. and not np.isfinite(db[1:]).any(), (name, db)


@pytest.mark.parametrize('dtype', [tf.float32, tf.bfloat16])
def test_frames_to_float_is_exact(dtype):
  """The XLA-compiled cast gives TensorFlow's cast, value for value (every
  uint8 is exact in float32 and in bfloat16), inside a graph too."""
  frames = np.arange(256, dtype=np.uint8).reshape(4, 8, 8, 1).repeat(3, -1)
  want = tf.cast(frames, dtype)
  got = networks.frames_to_float(frames, dtype)
  in_graph = tf.function(lambda x: networks.frames_to_float(x, dtype))(frames)
  for out in (got, in_graph):
    assert out.dtype == dtype and out.shape == want.shape
    np.testing.assert_array_equal(tf.cast(out, tf.float32).numpy(),
                                  tf.cast(want, tf.float32).numpy())


def test_frames_to_float_in_blocks_is_space_to_depth():
  """block_size > 1: the cast's output in tf.nn.space_to_depth's layout,
  value for value, for uint8 (the compiled cast) and float frames."""
  frames = np.arange(2 * 8 * 12 * 3).reshape(2, 8, 12, 3) % 256
  for dtype in (np.uint8, np.float32):
    x = frames.astype(dtype)
    want = tf.nn.space_to_depth(tf.cast(x, tf.float32), 4)
    got = networks.frames_to_float(x, tf.float32, block_size=4)
    assert got.shape == (2, 2, 3, 48)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_space_to_depth_torso_equals_the_conv_one_on_any_frame_size():
  """The two conv_impls, on frames whose sides are not multiples of the
  strides (84 + 2, 84 + 3: the cropped rows and columns are never in a
  window), give the same output and gradients, eagerly and in a graph."""
  rng = np.random.default_rng(3)
  frames = rng.integers(0, 256, (2, 86, 87, 4), dtype=np.uint8)
  conv = networks.ShallowAtariTorso(conv_impl='conv')
  s2d = networks.ShallowAtariTorso(conv_impl='space_to_depth')
  conv(frames), s2d(frames)
  for a, b in zip(conv.variables, s2d.variables):
    a.assign(a + rng.normal(size=a.shape).astype(np.float32) * 0.05)
    b.assign(a)
  dy = tf.constant(rng.normal(size=(2, 256)), tf.float32)

  def value_and_grads(torso):
    with tf.GradientTape() as tape:
      out = torso(frames)
      loss = tf.reduce_sum(out * dy)
    return [out] + list(tape.gradient(loss, torso.trainable_variables))

  for run in (value_and_grads, tf.function(value_and_grads)):
    want, got = run(conv), run(s2d)
    assert float(tf.reduce_mean(tf.cast(want[0] > 0, tf.float32))) > 0.1
    for w, g, v in zip(want, got, [None] + list(conv.trainable_variables)):
      np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5,
                                 err_msg=getattr(v, 'name', 'output'))


def test_torso_conv_impl_follows_onednn_and_is_checked(monkeypatch):
  """conv_impl=None: TensorFlow's convolutions where oneDNN is on, the
  space-to-depth matmuls where it is off; a bad value is refused, named."""
  for value, want in (('1', False), ('0', True)):
    monkeypatch.setenv('TF_ENABLE_ONEDNN_OPTS', value)
    torso = networks.ShallowAtariTorso('float32')
    assert torso._space_to_depth is want  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="conv_impl='im2col'"):
    networks.ShallowAtariTorso(conv_impl='im2col')
  with pytest.raises(ValueError, match=r'kernel \[4, 4\] with stride 1'):
    networks.space_to_depth_conv2d_bias_relu(
        tf.zeros([1, 4, 4, 3]), tf.zeros([4, 4, 3, 2]), tf.zeros([2]), 1)


def test_importing_acme_impala_pools_memory_where_onednn_is_off():
  """With oneDNN off, a fresh interpreter that imports acme_impala gets
  TensorFlow's BFC allocator (TF_CPU_ALLOCATOR_USE_BFC=true); with oneDNN
  on (oneDNN's allocator pools already) the variable is left unset; a
  user's own value wins."""
  script = ('import os, acme_impala; '
            'print(os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "unset"))')
  base = {k: v for k, v in os.environ.items()
          if k not in ('TF_CPU_ALLOCATOR_USE_BFC', 'TF_ENABLE_ONEDNN_OPTS')}
  for extra, want in (({'TF_ENABLE_ONEDNN_OPTS': '0'}, 'true'),
                      ({}, 'unset'),
                      ({'TF_ENABLE_ONEDNN_OPTS': '0',
                        'TF_CPU_ALLOCATOR_USE_BFC': 'false'}, 'false')):
    out = subprocess.run([sys.executable, '-c', script],
                         env=dict(base, **extra), check=True,
                         capture_output=True, text=True, timeout=120).stdout
    assert out.strip() == want, (extra, out)


def test_bfloat16_torso_needs_onednn(monkeypatch):
  """TF 2.8's bfloat16 convolutions on CPU are oneDNN's: without them the
  torso is refused at construction, naming the setting."""
  monkeypatch.setenv('TF_ENABLE_ONEDNN_OPTS', '0')
  with pytest.raises(ValueError, match="TF_ENABLE_ONEDNN_OPTS='0'"):
    networks.ShallowAtariTorso('bfloat16')
  networks.validate_torso_dtype('float32')
  networks.validate_torso_dtype('auto')
  with pytest.raises(ValueError, match="torso_dtype='float16'"):
    networks.validate_torso_dtype('float16')
  monkeypatch.setenv('TF_ENABLE_ONEDNN_OPTS', '1')
  monkeypatch.setattr(networks, 'bfloat16_probe', lambda: None)
  networks.validate_torso_dtype('bfloat16')


@pytest.mark.parametrize('flags,units', [
    ('avx2 fma', 'has no avx512_bf16 or amx_bf16 units'),
    ('avx512f avx512_bf16', 'reports avx512_bf16'),
])
def test_bfloat16_is_refused_where_tensorflow_gets_it_wrong(
    monkeypatch, tmp_path, flags, units):
  """Where the probe finds TensorFlow's bfloat16 kernels wrong, asking for
  them is refused in one line naming the CPU, its bfloat16 units (missing,
  or present with broken kernels: the flags alone do not decide) and the
  float32 alternative; 'auto' then resolves to float32 even with the units.
  Runs on every CPU: the probe's verdict is given here; that the real probe
  finds a broken TensorFlow is tested below."""
  cpuinfo = _cpuinfo(tmp_path, flags, model='Test CPU 9000')
  monkeypatch.setattr(networks.hardware, 'CPUINFO', cpuinfo)
  monkeypatch.setattr(networks, 'cpu_has_bfloat16_units',
                      lambda: 'avx512_bf16' in flags)
  monkeypatch.setenv('TF_ENABLE_ONEDNN_OPTS', '1')
  monkeypatch.setattr(
      networks, 'bfloat16_probe', lambda: 'a bfloat16 convolution gives a '
      'float32 tensor of shape [0], expected bfloat16 of shape [2, 3, 3, 4]')
  for make in (networks.validate_torso_dtype, networks.ShallowAtariTorso):
    with pytest.raises(ValueError) as raised:
      make('bfloat16')
    message = str(raised.value)
    assert '\n' not in message
    assert message.startswith("torso_dtype='bfloat16' cannot run on this CPU "
                              f'(Test CPU 9000, {units}): ')
    assert 'shape [0]' in message
    assert message.endswith("use torso_dtype='float32', or 'auto', which "
                            'picks bfloat16 only where it runs.')
  assert networks.resolve_torso_dtype('auto', 'shallow') == 'float32'
  networks.validate_torso_dtype('auto')


@pytest.mark.parametrize('flags,isa,allowed', [
    ('avx512_bf16 amx_bf16 amx_tile', 'ALL', True),
    ('avx512_bf16 amx_bf16 amx_tile', None, True),  # oneDNN's default: all.
    ('avx512_bf16 amx_bf16 amx_tile', 'avx512_core_amx', True),
    ('avx512_bf16 amx_bf16 amx_tile', 'AVX512_CORE_BF16', False),
    ('avx512_bf16', 'ALL', False),  # No AMX units to deadlock on.
])
def test_bfloat16_is_refused_where_onednn_would_run_it_on_amx(
    monkeypatch, tmp_path, flags, isa, allowed):
  """TF 2.8's oneDNN AMX convolution gradient deadlocks the learner
  (acme_impala/__init__.py): a bfloat16 torso is refused, in one line naming
  the setting and the way out, where AMX units would run it, and 'auto'
  resolves to float32 there. Runs on every CPU: the flags are given."""
  monkeypatch.setattr(networks.hardware, 'CPUINFO',
                      _cpuinfo(tmp_path, flags, model='Test CPU 9000'))
  monkeypatch.setattr(networks, 'cpu_has_bfloat16_units', lambda: True)
  monkeypatch.setattr(networks, 'bfloat16_probe', lambda: None)
  monkeypatch.setenv('TF_ENABLE_ONEDNN_OPTS', '1')
  if isa is None:
    monkeypatch.delenv('ONEDNN_MAX_CPU_ISA', raising=False)
  else:
    monkeypatch.setenv('ONEDNN_MAX_CPU_ISA', isa)
  assert networks.amx_allowed() is allowed
  if not allowed:
    networks.validate_torso_dtype('bfloat16')
    # Kept off AMX, the AVX-512 BF16 kernels were slower than float32 on
    # the Intel CPU: 'auto' takes bfloat16 only on CPUs without AMX.
    assert networks.resolve_torso_dtype('auto', 'shallow') == (
        'float32' if 'amx_bf16' in flags else 'bfloat16')
    return
  with pytest.raises(ValueError) as raised:
    networks.ShallowAtariTorso('bfloat16')
  message = str(raised.value)
  assert '\n' not in message
  assert message.startswith(
      f"torso_dtype='bfloat16' with ONEDNN_MAX_CPU_ISA={isa!r} on a CPU with "
      'AMX (Test CPU 9000): '), message
  assert message.endswith("expected ONEDNN_MAX_CPU_ISA='AVX512_CORE_BF16' "
                          "(acme_impala's default) or torso_dtype='float32'.")
  assert networks.resolve_torso_dtype('auto', 'shallow') == 'float32'
  networks.validate_torso_dtype('auto')


def test_importing_acme_impala_keeps_onednn_off_amx():
  """A fresh interpreter that imports acme_impala before TensorFlow gets
  ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, and oneDNN, at its first
  convolution, reports an ISA without AMX (on a CPU with AMX it would name
  it); a user's own value wins."""
  script = ('import os, acme_impala, tensorflow as tf; '
            'print("ISA=" + os.environ["ONEDNN_MAX_CPU_ISA"]); '
            'tf.nn.conv2d(tf.ones([1, 4, 4, 2]), tf.ones([2, 2, 2, 2]), 1, '
            '"VALID")')
  env = {k: v for k, v in os.environ.items() if k != 'ONEDNN_MAX_CPU_ISA'}
  env.update(ONEDNN_VERBOSE='1', TF_ENABLE_ONEDNN_OPTS='1',
             TF_CPP_MIN_LOG_LEVEL='3')
  out = subprocess.run([sys.executable, '-c', script], env=env, check=True,
                       capture_output=True, text=True, timeout=120).stdout
  assert 'ISA=AVX512_CORE_BF16' in out, out
  isa_lines = [line for line in out.splitlines()
               if line.startswith('onednn_verbose,info,cpu,isa:')]
  assert isa_lines and 'AMX' not in isa_lines[0], out
  env['ONEDNN_MAX_CPU_ISA'] = 'AVX2'
  out = subprocess.run([sys.executable, '-c', script], env=env, check=True,
                       capture_output=True, text=True, timeout=120).stdout
  assert 'ISA=AVX2' in out, out
  assert any(line.startswith('onednn_verbose,info,cpu,isa:Intel AVX2')
             for line in out.splitlines()), out


def test_bfloat16_probe_finds_a_tensorflow_without_the_kernels(monkeypatch):
  """The real probe, in a new interpreter, on TensorFlow loaded without
  oneDNN (which has no working bfloat16 convolution on any CPU): it reports
  what went wrong rather than passing, and passes float32. Where bfloat16
  runs, the same probe with oneDNN on passes (the bfloat16 tests below then
  run)."""
  monkeypatch.setenv('TF_ENABLE_ONEDNN_OPTS', '0')
  problem, conclusive = networks.run_bfloat16_probe()
  assert conclusive and problem and 'bfloat16' in problem, problem
  # The probe itself works: in float32 (compared with float32) it passes.
  # Its gradients once came out None for every dtype (the sum was taken
  # outside the tape), so it refused bfloat16 on every CPU.
  assert networks.run_bfloat16_probe(dtype='float32') == (None, True)
  # What a passed probe tells the processes it starts is tied to the
  # oneDNN setting it passed with.
  monkeypatch.setenv(networks.BFLOAT16_PROBE_ENV, '1')
  monkeypatch.setitem(networks._probe_results, '0', problem)  # pylint: disable=protected-access
  assert networks.bfloat16_probe() == problem
  monkeypatch.setenv(networks.BFLOAT16_PROBE_ENV, '0')
  assert networks.bfloat16_probe() is None


def test_bfloat16_torso_keeps_the_float32_variables_and_paths(bfloat16_runs):
  """bfloat16 changes the computation only: the same float32 variables under
  the same names, so checkpoints and actors' weights are interchangeable."""
  frames = np.zeros((2, 84, 84, 4), np.uint8)
  names = {}
  for dtype in config_lib.TORSO_DTYPES:
    config = config_lib.IMPALAConfig(network='shallow', lstm_size=8,
                                     torso_dtype=dtype)
    net = networks.make_network(config, num_actions=4)
    net(_oar(frames, [2]), net.initial_state(2))
    names[dtype] = [(v.name, v.shape, v.dtype) for v in net.variables]
  assert names['bfloat16'] == names['float32']
  assert all(dtype == tf.float32 for _, _, dtype in names['float32'])


def _lstm_stepped(core, inputs, state, start):
  """The reference: Sonnet's own LSTM called one step at a time, the state
  replaced by the initial state where an episode starts (autodiff gradients)."""
  zero = core.initial_state(inputs.shape[1])
  outputs = []
  for t in range(inputs.shape[0]):
    reset = tf.expand_dims(start[t], -1)
    state = tf.nest.map_structure(lambda z, s, r=reset: tf.where(r, z, s),
                                  zero, state)
    output, state = core(inputs[t], state)
    outputs.append(output)
  return tf.stack(outputs), state


@pytest.mark.parametrize('num_steps', [1, 7])
@pytest.mark.parametrize('run_as', ['eager', 'graph', 'xla'])
@pytest.mark.parametrize('use_final_state', [True, False])
def test_lstm_unroll_matches_sonnet_stepped_one_step_at_a_time(
    num_steps, run_as, use_final_state):
  """Values and every gradient (inputs, initial state, w_i, w_h, b) of the
  hand-written backward pass against autodiff through snt.LSTM's steps."""
  batch, input_size, hidden = 4, 5, 6
  rng = np.random.default_rng(num_steps)
  core = snt.LSTM(hidden)
  inputs = tf.constant(rng.normal(size=(num_steps, batch, input_size)),
                       tf.float32)
  state = snt.LSTMState(
      hidden=tf.constant(rng.normal(size=(batch, hidden)), tf.float32),
      cell=tf.constant(rng.normal(size=(batch, hidden)), tf.float32))
  start = np.zeros((num_steps, batch), bool)
  start[0, 0] = True  # Row 0 starts an episode: its initial state is unused.
  start[-1, 2] = True
  start = tf.constant(start)
  core(inputs[0], state)
  # A random linear loss on every output, so that no gradient is symmetric.
  out_w = tf.constant(rng.normal(size=(num_steps, batch, hidden)), tf.float32)
  state_w = [tf.constant(rng.normal(size=(batch, hidden)), tf.float32)
             for _ in range(2)]

  def loss_and_grads(unroll):
    with tf.GradientTape() as tape:
      tape.watch([inputs, state])
      outputs, final = unroll(core, inputs, state, start)
      loss = tf.reduce_sum(outputs * out_w)
      if use_final_state:
        loss += sum(tf.reduce_sum(s * w) for s, w in zip(final, state_w))
    sources = [inputs, state.hidden, state.cell, core.input_to_hidden,
               core.hidden_to_hidden, core.b]
    return (outputs, final), tape.gradient(loss, sources)

  if run_as != 'eager':
    loss_and_grads = tf.function(loss_and_grads, autograph=False,
                                 jit_compile=run_as == 'xla')
  (outputs, final), grads = loss_and_grads(networks.lstm_unroll)
  (want_outputs, want_final), want_grads = loss_and_grads(
      lambda core, x, s, r: _lstm_stepped(core, x, s, r))
  np.testing.assert_allclose(outputs.numpy(), want_outputs.numpy(),
                             rtol=1e-5, atol=1e-6)
  for got, want in zip(final, want_final):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5,
                               atol=1e-6)
  for got, want in zip(grads, want_grads):
    assert got is not None
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4,
                               atol=1e-5)
  # The reset cuts the gradient to row 0's initial state; others get one.
  assert not np.any(grads[1].numpy()[0]) and not np.any(grads[2].numpy()[0])
  assert np.all(np.abs(grads[1].numpy()[1]) > 0)


def test_lstm_unroll_split_in_two_equals_one_unroll_with_any_batch():
  """What the learner does (`_unroll_keeping_state`, burn-in): the state out
  of one unroll fed to the next gives the values and gradients of one
  unroll, also in a graph traced for an unknown batch size."""
  rng = np.random.default_rng(1)
  core = snt.LSTM(6)
  steps, batch = 7, 3
  inputs = tf.constant(rng.normal(size=(steps, batch, 5)), tf.float32)
  start = tf.constant(rng.random((steps, batch)) < 0.2)
  core(inputs[0], core.initial_state(batch))
  out_w = tf.constant(rng.normal(size=(steps, batch, 6)), tf.float32)

  def traced(split):
    @tf.function(autograph=False,
                 input_signature=[tf.TensorSpec([steps, None, 5]),
                                  tf.TensorSpec([steps, None], tf.bool),
                                  tf.TensorSpec([steps, None, 6])])
    def loss_and_grads(x, start, out_w):
      state = core.initial_state(tf.shape(x)[1])
      state = snt.LSTMState(state.hidden + 0.5, state.cell - 0.5)
      with tf.GradientTape() as tape:
        tape.watch(x)
        if split:
          head, state_4 = networks.lstm_unroll(core, x[:4], state, start[:4])
          tail, final = networks.lstm_unroll(core, x[4:], state_4, start[4:])
          outputs = tf.concat([head, tail], 0)
        else:
          outputs, final = networks.lstm_unroll(core, x, state, start)
        loss = tf.reduce_sum(outputs * out_w) + tf.reduce_sum(final.cell)
      return loss, tape.gradient(loss, [x] + list(core.trainable_variables))
    return loss_and_grads(inputs, start, out_w)

  whole, grads = traced(split=False)
  split, split_grads = traced(split=True)
  np.testing.assert_allclose(split.numpy(), whole.numpy(), rtol=1e-5)
  for got, want in zip(split_grads, grads):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4,
                               atol=1e-5)


def test_lstm_unroll_refuses_what_it_does_not_compute():
  core = snt.LSTM(4, projection_size=2)
  inputs = tf.zeros((3, 2, 5))
  core(inputs[0], core.initial_state(2))
  with pytest.raises(ValueError, match='projection_size=2'):
    networks.lstm_unroll(core, inputs, core.initial_state(2))
  plain = snt.LSTM(4)
  plain(inputs[0], plain.initial_state(2))
  unknown_length = tf.function(
      lambda x: networks.lstm_unroll(plain, x, plain.initial_state(2)),
      input_signature=[tf.TensorSpec([None, 2, 5], tf.float32)])
  with pytest.raises(ValueError, match='static time dimension'):
    unknown_length.get_concrete_function()


def _cpuinfo(tmp_path, flags, model='test'):
  path = tmp_path / 'cpuinfo'
  path.write_text(f'processor\t: 0\nmodel name\t: {model}\n'
                  f'flags\t\t: fpu sse2 avx512f {flags}\n\n')
  return str(path)


@pytest.mark.parametrize('flags,expected', [
    ('avx512_bf16', True), ('amx_bf16 amx_tile', True), ('avx2', False)])
def test_cpu_has_bfloat16_units_reads_the_cpu_flags(tmp_path, flags,
                                                    expected):
  assert networks.cpu_has_bfloat16_units(_cpuinfo(tmp_path, flags)) is (
      expected)
  assert not networks.cpu_has_bfloat16_units(str(tmp_path / 'missing'))


@pytest.mark.parametrize('network,onednn,units,amx,expected', [
    ('shallow', '1', True, False, 'bfloat16'),
    ('shallow', '0', True, False, 'float32'),  # No oneDNN: no kernels.
    ('shallow', '1', False, False, 'float32'),  # Emulated: not faster.
    # AMX kept off, AVX-512 BF16 was slower than float32 there.
    ('shallow', '1', True, True, 'float32'),
    ('deep', '1', True, False, 'float32'),
    ('mlp_lstm', '1', True, False, 'float32'),
])
def test_auto_torso_dtype_is_bfloat16_only_where_it_is_fast(
    monkeypatch, network, onednn, units, amx, expected):
  monkeypatch.setenv('TF_ENABLE_ONEDNN_OPTS', onednn)
  monkeypatch.setattr(networks, 'cpu_has_bfloat16_units', lambda: units)
  monkeypatch.setattr(networks, 'cpu_has_amx', lambda: amx)
  monkeypatch.setattr(networks, 'bfloat16_probe', lambda: None)
  assert networks.resolve_torso_dtype('auto', network) == expected
  networks.validate_torso_dtype('auto')
  # Explicit values are kept as they are, whatever the machine.
  for dtype in config_lib.TORSO_DTYPES:
    assert networks.resolve_torso_dtype(dtype, network) == dtype


def test_auto_torso_computes_in_the_resolved_dtype(monkeypatch,
                                                  bfloat16_runs):
  """An 'auto' shallow torso gives exactly what the torso of the dtype it
  resolves to gives on the same variables, and not what the other gives."""
  frames = tf.constant(np.random.default_rng(0).integers(
      0, 256, (2, 84, 84, 4)), tf.uint8)

  def output(torso, weights):
    torso(frames)
    for variable, value in zip(torso.variables, weights):
      variable.assign(value)
    return torso(frames).numpy()

  monkeypatch.setattr(networks, 'cpu_has_amx', lambda: False)
  for units, resolved, other in ((True, 'bfloat16', 'float32'),
                                 (False, 'float32', 'bfloat16')):
    monkeypatch.setattr(networks, 'cpu_has_bfloat16_units', lambda u=units: u)
    auto = networks.ShallowAtariTorso('auto')
    auto(frames)
    weights = [v.numpy() for v in auto.variables]
    got = output(auto, weights)
    np.testing.assert_array_equal(
        got, output(networks.ShallowAtariTorso(resolved), weights))
    assert not np.array_equal(
        got, output(networks.ShallowAtariTorso(other), weights))
