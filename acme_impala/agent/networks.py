"""IMPALA networks: Sonnet RNNCores returning ((logits, value), state).

The architecture follows Figure 3 of the IMPALA paper: a torso (MLP for vector
observations, the shallow 2-conv net or the deep 15-conv ResNet for Atari
frames), whose output is concatenated with the one-hot previous action and the
clipped previous reward, fed to an LSTM, then to policy and value heads.

Observations follow Acme's convention: when wrapped by Acme's
`ObservationActionRewardWrapper`, they are `OAR(observation, action, reward)`
nests carrying the previous action and reward; a plain observation is also
accepted (the network then sees the torso output only).

`unroll` is what the learner uses: it folds time into batch for the torso
(one big convolution/MLP call instead of T small ones) and runs only the LSTM's
recurrence step by step (`lstm_unroll`, with a hand-written backward pass),
resetting its state where a new episode starts inside the sequence, which is
what the actor did when it generated the data.
"""

import hashlib
import json
import os
import subprocess
import sys
from typing import Callable, Optional, Sequence, Tuple

from acme.tf.networks import policy_value
from acme.tf.networks import vision
from acme.wrappers import observation_action_reward
import sonnet as snt
import tensorflow as tf

from acme_impala.agent.config import TORSO_DTYPE_CHOICES
from acme_impala.host import hardware

OAR = observation_action_reward.OAR
Logits = tf.Tensor
Value = tf.Tensor


def weights_digest(variables: Sequence[tf.Variable]) -> str:
  """A short fingerprint of variables' values and shapes, in their order.

  Names are left out: Sonnet numbers modules per process, so the same
  weights carry different names in two processes. Two networks with equal
  digests start from the same weights (a learner logs it at start).
  """
  digest = hashlib.sha256()
  for v in variables:
    value = v.numpy()
    digest.update(repr((value.dtype.str, value.shape)).encode())
    digest.update(value.tobytes())
  return digest.hexdigest()[:16]


def is_oar(inputs) -> bool:
  """Whether `inputs` (values or specs) is an OAR nest. Duck-typed: nests
  read back from a Reverb signature are namedtuples rebuilt by Reverb, not
  Acme's OAR class."""
  return all(hasattr(inputs, f) for f in OAR._fields)


def _cast_in_blocks(frames: tf.Tensor, dtype: tf.DType,
                    block_size: int) -> tf.Tensor:
  frames = tf.cast(frames, dtype)
  if block_size == 1:
    return frames
  return tf.nn.space_to_depth(frames, block_size)


# TF 2.8's own Cast kernel converts uint8 at ~0.6-0.9 ns per element on these
# CPUs, XLA's at ~0.2-0.3: an Atari learner batch (21 x 32 stacks of
# 84 x 84 x 4, 19 M elements) takes 11.7 ms one way and 4.3 ms the other.
_compiled_cast_in_blocks = tf.function(_cast_in_blocks, jit_compile=True,
                                       autograph=False)


def frames_to_float(frames: tf.Tensor, dtype: tf.DType = tf.float32,
                    block_size: int = 1) -> tf.Tensor:
  """[B, H, W, C] frames in `dtype` (float32 or bfloat16), values unscaled;
  with block_size > 1, tf.nn.space_to_depth of them, [B, H / block_size,
  W / block_size, block_size**2 * C].

  uint8 frames go through an XLA-compiled cast (a compiled cluster inside
  whatever graph calls it: the learner's step, the actor's policy); other
  dtypes through `tf.cast`.
  """
  frames = tf.convert_to_tensor(frames)
  cast = (_compiled_cast_in_blocks if frames.dtype == tf.uint8 else
          _cast_in_blocks)
  return cast(frames, dtype, block_size)


# TF 2.8's ReluGrad kernel runs at about half the speed of the same select
# compiled by XLA on the shallow torso's activations (a learner batch's first
# layer, [672, 20, 20, 16]: 3.0 against 1.6 ms here).
def _relu_mask(dy: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
  """dy where y = relu(.) > 0, 0 elsewhere (even where dy is not finite)."""
  return tf.where(y > 0, dy, tf.zeros_like(dy))


_relu_grad = tf.function(_relu_mask, jit_compile=True, autograph=False)


def _bias_grad(dz: tf.Tensor) -> tf.Tensor:
  """The bias gradient [C] of dz [..., C], in float32. TensorFlow's own
  bfloat16 gradient of a bias sums hundreds of thousands of terms in bfloat16
  (BiasAddGrad: 97 % off on a learner batch's first-layer activations where
  it is not fused into the convolution, 19 % on the linear layer)."""
  if dz.dtype == tf.float32:
    # Where it follows a convolution, oneDNN fuses it into the weight
    # gradient (Conv2DBackpropFilterWithBias).
    return tf.raw_ops.BiasAddGrad(out_backprop=dz)
  return tf.reduce_sum(tf.cast(dz, tf.float32),
                       axis=list(range(len(dz.shape) - 1)))


def _relu_layer(forward, backward, x, w, b):
  """relu(forward(x, w) + b) with its gradient written out.

  A custom gradient of the ReLU alone would cost oneDNN's fused
  convolution (or matmul) + bias + ReLU in every forward pass, the actors'
  included: the gradient's bookkeeping reads the activation's input, and
  grappler fuses only an op whose output nothing else reads. Around the
  whole layer, the fused forward stays, and the backward is TensorFlow's
  own gradients of `forward` after an XLA ReLU gradient (`_relu_grad`).
  The learner's float32 Pong update was 4-6 % faster than with autodiff's
  ReluGrad (docs/benchmarks.md, Learner).

  x, w in the compute dtype; b float32, cast to it (see `_bias_grad`).
  `backward(x, w, dz)` returns (dx, dw).
  """

  @tf.custom_gradient
  def layer(x, w, b):
    y = tf.nn.relu(tf.nn.bias_add(forward(x, w), tf.cast(b, x.dtype)))

    def grad(dy):
      dz = _relu_grad(dy, y)
      dx, dw = backward(x, w, dz)
      return dx, dw, _bias_grad(dz)

    return y, grad

  return layer(x, w, b)


def conv2d_bias_relu(x: tf.Tensor, w: tf.Tensor, b: tf.Tensor,
                     stride: int) -> tf.Tensor:
  """relu(conv2d(x, w, stride, 'VALID') + b).

  Args:
    x: [B, H, W, C] in the compute dtype (float32 or bfloat16).
    w: [kh, kw, C, O] in x's dtype.
    b: [O] float32; its gradient is summed in float32.
    stride: the same along height and width.

  Returns:
    [B, (H - kh) // stride + 1, (W - kw) // stride + 1, O] in x's dtype.
    Gradients flow to x, w and b; where y <= 0 the upstream gradient is
    dropped (0 even if it is not finite; ReluGrad's dy * 0 gives NaN there).
  """
  strides = [1, stride, stride, 1]

  def forward(x, w):
    return tf.nn.conv2d(x, w, strides, 'VALID')

  def backward(x, w, dz):
    dx = tf.raw_ops.Conv2DBackpropInput(
        input_sizes=tf.shape(x), filter=w, out_backprop=dz, strides=strides,
        padding='VALID')
    dw = tf.raw_ops.Conv2DBackpropFilter(
        input=x, filter_sizes=tf.shape(w), out_backprop=dz, strides=strides,
        padding='VALID')
    return dx, dw

  return _relu_layer(forward, backward, x, w, b)


def linear_bias_relu(x: tf.Tensor, w: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
  """relu(x w + b): x [B, D] and w [D, O] in the compute dtype, b [O]
  float32; output [B, O] in x's dtype. Gradients as `conv2d_bias_relu`."""

  def backward(x, w, dz):
    return (tf.matmul(dz, w, transpose_b=True),
            tf.matmul(x, dz, transpose_a=True))

  return _relu_layer(tf.matmul, backward, x, w, b)


# The shallow torso's two convolutions have kernels twice their stride (8/4,
# 4/2). On a space-to-depth view of the input (blocks of stride x stride) such
# a convolution is a 2 x 2 stride-1 one, i.e. one matmul of every block with
# the four kernel quarters, [B*Hs*Ws, s*s*C] x [s*s*C, 4*O], followed by a
# sum of four shifted [Ho, Wo] windows of its output. Where TensorFlow runs
# its own (Eigen) convolutions -- oneDNN off, TF 2.8's default -- these
# matmuls and their gradients are faster than the convolution kernels (the
# first layer's weight gradient ran at 15 GFLOP/s), see docs/benchmarks.md,
# Learner. With oneDNN on, its convolutions are the faster ones.


def _kernel_as_matrix(w: tf.Tensor, stride: int) -> tf.Tensor:
  """[2s, 2s, C, O] -> [s*s*C, 4*O]: rows (p, q, c) as in
  tf.nn.space_to_depth, columns (a, b, o) for the kernel quarter at block
  offset (a, b); w[a*s + p, b*s + q, c, o] sits at [(p, q, c), (a, b, o)]."""
  _, _, c, o = w.shape
  w = tf.reshape(w, [2, stride, 2, stride, c, o])
  return tf.reshape(tf.transpose(w, [1, 3, 4, 0, 2, 5]),
                    [stride * stride * c, 4 * o])


def _matrix_as_kernel(m: tf.Tensor, stride: int, c: int, o: int
                      ) -> tf.Tensor:
  """The inverse of `_kernel_as_matrix`: [s*s*C, 4*O] -> [2s, 2s, C, O]."""
  m = tf.reshape(m, [stride, stride, c, 2, 2, o])
  return tf.reshape(tf.transpose(m, [3, 0, 4, 1, 2, 5]),
                    [2 * stride, 2 * stride, c, o])


def _crop_to_multiple(x: tf.Tensor, block: int) -> tf.Tensor:
  """x [B, H, W, C] without the rows and columns past the last multiple of
  block (x itself where H and W are multiples)."""
  h, w = x.shape[1], x.shape[2]
  if h % block == 0 and w % block == 0:
    return x
  return x[:, :h - h % block, :w - w % block]


@tf.function(jit_compile=True, autograph=False)
def _quarters_sum_bias_relu(q: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
  """q [B, Hs, Ws, 2, 2, O] (each block times each kernel quarter) ->
  y = relu(sum of the quarters' shifted windows + b) [B, Hs-1, Ws-1, O]."""
  z = (q[:, :-1, :-1, 0, 0] + q[:, :-1, 1:, 0, 1] + q[:, 1:, :-1, 1, 0] +
       q[:, 1:, 1:, 1, 1])
  return tf.nn.relu(z + tf.cast(b, q.dtype))


# The layout changes between a layer's output and the next layer's blocks
# (space_to_depth and back), and the gradient's pads, are TensorFlow's
# kernels, outside the XLA calls: XLA CPU compiles them as transposes that
# are several times slower. The first layer's shifted sum with its
# space_to_depth in one XLA call took
# 20.5 ms on a learner batch, the sum alone 3.3 ms and TensorFlow's
# space_to_depth of its output 1.9 ms (AMD EPYC with AVX-512, oneDNN off;
# docs/benchmarks.md, Learner).


def _quarters_to_output(q: tf.Tensor, b: tf.Tensor,
                        out_block: int) -> tf.Tensor:
  """`_quarters_sum_bias_relu`, or with out_block > 1 tf.nn.space_to_depth
  of its output (cropped to multiples of out_block)."""
  y = _quarters_sum_bias_relu(q, b)
  if out_block == 1:
    return y
  return tf.nn.space_to_depth(_crop_to_multiple(y, out_block), out_block)


def _masked_rows(dy: tf.Tensor, y: tf.Tensor, out_block: int,
                 out_size: Tuple[int, int]) -> Tuple[tf.Tensor, tf.Tensor]:
  """The ReLU-masked dy as rows for `_quarters_grad`: (rows, db).

  dy, y in `_quarters_to_output`'s output layout; out_size: (Hs-1, Ws-1).
  rows [Ws + 1 + B * Hs * Ws, O]: Ws + 1 zero rows, then dz [B, Hs-1, Ws-1,
  O] padded with zeros to [B, Hs, Ws, O] (a last row and column, and what
  out_block's crop left out), flattened. db [O] is summed in float32.
  """
  dz = _relu_grad(dy, y)
  if out_block > 1:
    dz = tf.nn.depth_to_space(dz, out_block)
  padded = tf.pad(dz, [[0, 0], [0, out_size[0] + 1 - dz.shape[1]],
                       [0, out_size[1] + 1 - dz.shape[2]], [0, 0]])
  rows = tf.pad(tf.reshape(padded, [-1, dz.shape[-1]]),
                [[out_size[1] + 2, 0], [0, 0]])
  return rows, _bias_grad(dz)


def _quarters_grad(dy: tf.Tensor, y: tf.Tensor, out_block: int,
                   out_size: Tuple[int, int]) -> Tuple[tf.Tensor, tf.Tensor]:
  """The gradient of `_quarters_to_output` at its output y: (dq, db).

  dy, y in `_quarters_to_output`'s output layout; out_size: (Hs-1, Ws-1). dq
  [B * Hs * Ws, 4 * O] holds the ReLU-masked dy shifted to each quarter's
  window (zeros outside it); db [O] is summed in float32.

  Quarter (a, b) of block row r = (n, i, j) is dz[n, i - a, j - b]: in the
  flattened padded dz that is row r - (a * Ws + b), and where i - a or
  j - b is -1 that row is a zero (the padding's last row or column, or a
  leading zero row). So dq is one gather of whole rows. Building dq by
  shifted pads and a stack wrote its 64-byte pieces one by one: 42 against
  32 ms for the first layer's [296352, 64] on AMD EPYC, oneDNN off
  (docs/benchmarks.md, Learner).
  """
  rows, db = _masked_rows(dy, y, out_block, out_size)
  ws = out_size[1] + 1
  n = tf.shape(rows)[0] - (ws + 1)
  index = tf.range(n)[:, None] + tf.constant([ws + 1, ws, 1, 0])
  return tf.reshape(tf.gather(rows, index), [n, 4 * rows.shape[-1]]), db


def space_to_depth_conv2d_bias_relu(xs: tf.Tensor, w: tf.Tensor,
                                    b: tf.Tensor, stride: int,
                                    out_block: int = 1) -> tf.Tensor:
  """y = relu(conv2d(x, w, stride, 'VALID') + b) for a kernel of 2 x stride,
  computed as matmuls on xs = tf.nn.space_to_depth(x, stride).

  Args:
    xs: [B, Hs, Ws, stride*stride*C], x's blocks (H = Hs * stride, W = Ws *
      stride: the convolution's windows tile x exactly).
    w: [2*stride, 2*stride, C, O] in xs's dtype.
    b: [O] float32; its gradient is summed in float32.
    stride: the same along height and width.
    out_block: > 1: y in tf.nn.space_to_depth's layout by this block (rows
      and columns past its last multiple dropped), as the next such layer
      takes its input: TensorFlow's space_to_depth after the XLA sum.

  Returns:
    y [B, Hs - 1, Ws - 1, O] (or its blocks) in xs's dtype: equal to
    `conv2d_bias_relu(x, w, b, stride)` up to the order of the sums (tested
    in float32, where it runs: oneDNN off refuses bfloat16).
    Gradients flow to xs, w and b (where y is 0 the upstream gradient is
    dropped, as there).
  """
  k, _, c, o = w.shape
  if k != 2 * stride or w.shape[1] != 2 * stride:
    raise ValueError(f'space_to_depth_conv2d_bias_relu: kernel '
                     f'{w.shape[:2].as_list()} with stride {stride}; '
                     f'expected a {2 * stride} x {2 * stride} kernel')
  if xs.shape[-1] != stride * stride * c:
    raise ValueError(f'space_to_depth_conv2d_bias_relu: {xs.shape[-1]} '
                     f'channels in xs; expected {stride * stride * c} '
                     f'(space_to_depth by {stride} of {c} channels)')

  @tf.custom_gradient
  def layer(xs, w, b):
    rows = tf.reshape(xs, [-1, xs.shape[-1]])
    matrix = _kernel_as_matrix(w, stride)
    y = _quarters_to_output(
        tf.reshape(tf.matmul(rows, matrix),
                   tf.concat([tf.shape(xs)[:3], [2, 2, o]], 0)), b, out_block)

    def grad(dy):
      dq, db = _quarters_grad(dy, y, out_block,
                              (xs.shape[1] - 1, xs.shape[2] - 1))
      dw = _matrix_as_kernel(tf.matmul(rows, dq, transpose_a=True), stride,
                             c, o)
      dxs = tf.reshape(tf.matmul(dq, matrix, transpose_b=True), tf.shape(xs))
      return dxs, dw, db

    return y, grad

  return layer(xs, w, b)


def _onednn_on() -> bool:
  return os.environ.get('TF_ENABLE_ONEDNN_OPTS', '0').strip().lower() in (
      '1', 'true')


# The CPU units oneDNN runs bfloat16 convolutions on natively.
BFLOAT16_UNITS = ('avx512_bf16', 'amx_bf16')


def cpu_has_bfloat16_units(cpuinfo: Optional[str] = None) -> bool:
  """Whether the CPU reports AVX-512 BF16 or AMX-BF16 units (Linux's
  /proc/cpuinfo flags; False where it cannot be read)."""
  return bool(hardware.cpu_flags(cpuinfo) & set(BFLOAT16_UNITS))


# ONEDNN_MAX_CPU_ISA values under which oneDNN may use AMX (unset: all).
_AMX_ISAS = ('', 'ALL', 'AVX512_CORE_AMX')


def cpu_has_amx(cpuinfo: Optional[str] = None) -> bool:
  """Whether the CPU reports AMX-BF16 units (/proc/cpuinfo's amx_bf16)."""
  return 'amx_bf16' in hardware.cpu_flags(cpuinfo)


def amx_allowed(cpuinfo: Optional[str] = None) -> bool:
  """Whether oneDNN would run bfloat16 on AMX units in this process: the
  CPU reports amx_bf16 and ONEDNN_MAX_CPU_ISA (acme_impala sets
  AVX512_CORE_BF16, see __init__.py) does not cap oneDNN below AMX."""
  isa = os.environ.get('ONEDNN_MAX_CPU_ISA', '').strip().upper()
  return isa in _AMX_ISAS and cpu_has_amx(cpuinfo)


# The probe: the torso's own operations (convolution, bias add, matmul,
# their gradients, eagerly and in a graph, where oneDNN fuses them) on a
# 6 x 6 image, compared with float32. Run in a new interpreter: a broken
# kernel cannot take this process down, and a launcher that forks its nodes
# must run no TensorFlow op before the fork (launch/supervisor.py). The dtype
# probed is its argument: probed in float32 it must pass on every CPU (the
# test of the probe itself).
_PROBE = r"""
import json, sys
import numpy as np
import tensorflow as tf

DTYPE = tf.as_dtype(sys.argv[1])

def layers(x, w, b, v):
  h = tf.nn.convolution(x, w, strides=2, padding='VALID')
  h = tf.nn.relu(tf.nn.bias_add(h, b))
  return tf.matmul(tf.reshape(h, [tf.shape(h)[0], -1]), v)

def run(dtype, graph):
  rng = np.random.default_rng(0)
  args = [tf.constant(rng.uniform(0.5, 1.5, shape), dtype) for shape in
          ([2, 6, 6, 3], [2, 2, 3, 4], [4], [36, 2])]
  def f(*args):
    with tf.GradientTape() as tape:
      tape.watch(args)
      out = layers(*args)
      total = tf.reduce_sum(out)  # Recorded: a sum taken after is not.
    return [out] + tape.gradient(total, list(args))
  outs = (tf.function(f) if graph else f)(*args)
  return [tf.cast(o, tf.float32).numpy() for o in outs]

names = ['output', 'input gradient', 'filter gradient', 'bias gradient',
         'weight gradient']

def check():
  x, w = (tf.ones(shape, DTYPE) for shape in ([2, 6, 6, 3], [2, 2, 3, 4]))
  h = tf.nn.convolution(x, w, strides=2, padding='VALID')
  if h.dtype != DTYPE or h.shape != (2, 3, 3, 4):
    return (f'a {DTYPE.name} convolution gives a {h.dtype.name} tensor of '
            f'shape {h.shape.as_list()}, expected {DTYPE.name} of shape '
            '[2, 3, 3, 4]')
  for graph in (False, True):
    where = 'in a graph' if graph else 'eagerly'
    try:
      got = run(DTYPE, graph)
    except Exception as error:
      return (f'{DTYPE.name} torso operations fail {where}: '
              f'{type(error).__name__}: {str(error).splitlines()[0]}')
    want = run(tf.float32, graph)
    for name, g, w in zip(names, got, want):
      if g.shape != w.shape:
        return (f'{DTYPE.name} torso operations {where} give {name} of shape '
                f'{list(g.shape)}, expected {list(w.shape)}')
      if not np.allclose(g, w, rtol=0.03, atol=0.03 * np.abs(w).max()):
        return (f'{DTYPE.name} torso operations {where} give {name} off by '
                f'{np.abs(g - w).max():.3g} (float32 values up to '
                f'{np.abs(w).max():.3g})')
  return None

try:
  problem = check()
except Exception as error:
  problem = (f'a {DTYPE.name} convolution fails: {type(error).__name__}: '
             f'{str(error).splitlines()[0]}')
print(json.dumps({'problem': problem}))
"""


# Set by a process whose probe passed, for the processes it starts (a local
# program's nodes, forked or exec'd, run on the same CPU with the same
# TensorFlow): the TF_ENABLE_ONEDNN_OPTS it passed with. A Kubernetes pod
# does not inherit it and probes on its own node.
BFLOAT16_PROBE_ENV = 'ACME_IMPALA_BFLOAT16_PASSED'
_probe_results = {}


def bfloat16_probe() -> Optional[str]:
  """None when TensorFlow, as this process loads it (same interpreter, same
  TF_ENABLE_ONEDNN_OPTS), computes the shallow torso's operations in
  bfloat16 (forward and gradients, eagerly and in a graph) to within
  bfloat16's precision of float32; otherwise what it did instead, e.g.
  "a bfloat16 convolution gives a float32 tensor of shape [0], expected
  bfloat16 of shape [2, 3, 3, 4]" (TF 2.8 on an AMD EPYC without AVX-512).

  Asks what TensorFlow does rather than what the CPU's flags say, so a CPU
  whose flags promise bfloat16 units but whose kernels misbehave is caught
  too. Costs one interpreter importing TensorFlow (a few seconds), once per
  process and not again in the processes it starts once it passed; a probe
  that did not finish is not remembered (asked again next time).
  """
  onednn = os.environ.get('TF_ENABLE_ONEDNN_OPTS', '0')
  if os.environ.get(BFLOAT16_PROBE_ENV) == onednn:
    return None
  if onednn not in _probe_results:
    problem, conclusive = run_bfloat16_probe()
    if not conclusive:
      return problem
    _probe_results[onednn] = problem
    if problem is None:
      os.environ[BFLOAT16_PROBE_ENV] = onednn
  return _probe_results[onednn]


def run_bfloat16_probe(timeout_s: float = 120., dtype: str = 'bfloat16'
                       ) -> Tuple[Optional[str], bool]:
  """The probe itself, in a new interpreter: (what went wrong or None,
  whether the answer is conclusive: False when the probe timed out).
  `dtype` other than bfloat16 checks the probe: 'float32' passes anywhere."""
  try:
    done = subprocess.run(
        [sys.executable, '-c', _PROBE, dtype], stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout_s,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  except subprocess.TimeoutExpired:
    return (f'the bfloat16 probe did not finish within {timeout_s:.0f} s '
            '(a busy machine? try again)', False)
  if done.returncode != 0:
    # A kernel that kills its process is a kernel that cannot run.
    how = (f'signal {-done.returncode}' if done.returncode < 0 else
           f'exit status {done.returncode}')
    last = (done.stderr.strip().splitlines() or [''])[-1]
    return (f'the bfloat16 probe died ({how}){": " + last if last else ""}',
            True)
  try:
    return json.loads(done.stdout.strip().splitlines()[-1])['problem'], True
  except (IndexError, KeyError, ValueError):
    return f'the bfloat16 probe printed {done.stdout[-200:]!r}', True


def resolve_torso_dtype(torso_dtype: str, network: str) -> str:
  """The compute dtype a torso runs in: `torso_dtype` itself, or for 'auto'
  'bfloat16' when `network` is the shallow torso, oneDNN is on in this
  process, the CPU has AVX-512 BF16 units and no AMX (an AMD EPYC with
  AVX-512, where the learner measured 1.33-1.37x faster with it,
  docs/benchmarks.md#learner: on CPUs without the units oneDNN emulates
  bfloat16, slower, or TensorFlow has no kernel; on an Intel Xeon with AMX,
  whose AMX kernel deadlocks and is kept off (`amx_allowed`), AVX-512 BF16
  made the step 0.84x float32's speed) and `bfloat16_probe` finds
  TensorFlow's kernels right; else 'float32'."""
  if torso_dtype != 'auto':
    return torso_dtype
  if (network == 'shallow' and _onednn_on() and cpu_has_bfloat16_units()
      and not cpu_has_amx() and bfloat16_probe() is None):
    return 'bfloat16'
  return 'float32'


def validate_torso_dtype(torso_dtype: str) -> None:
  """Raises ValueError, in one line, unless this process can run the torso
  in `torso_dtype` ('auto' always can: it resolves to what runs).

  bfloat16 needs TensorFlow 2.8's oneDNN kernels (loaded only with
  TF_ENABLE_ONEDNN_OPTS=1, acme_impala's default, see __init__.py) and
  kernels that compute right on this CPU (`bfloat16_probe`; on CPUs without
  bfloat16 units TF 2.8's oneDNN convolution returns an empty tensor), not
  on AMX (`amx_allowed`: its weight gradient deadlocks).
  """
  if torso_dtype not in TORSO_DTYPE_CHOICES:
    raise ValueError(f'torso_dtype={torso_dtype!r}; expected one of '
                     f'{TORSO_DTYPE_CHOICES}.')
  if torso_dtype != 'bfloat16':
    return
  if not _onednn_on():
    onednn = os.environ.get('TF_ENABLE_ONEDNN_OPTS', '0')
    raise ValueError(
        f"torso_dtype='bfloat16' needs TensorFlow's oneDNN kernels, but "
        f'TF_ENABLE_ONEDNN_OPTS={onednn!r}; expected 1 (acme_impala\'s '
        "default) or torso_dtype='float32'.")
  if amx_allowed():
    isa = os.environ.get('ONEDNN_MAX_CPU_ISA')
    raise ValueError(
        f"torso_dtype='bfloat16' with ONEDNN_MAX_CPU_ISA={isa!r} on a CPU "
        f'with AMX ({hardware.cpu_model()}): TensorFlow {tf.__version__}\'s '
        'oneDNN AMX convolution gradient deadlocks the learner; expected '
        "ONEDNN_MAX_CPU_ISA='AVX512_CORE_BF16' (acme_impala's default) or "
        "torso_dtype='float32'.")
  problem = bfloat16_probe()
  if problem is None:
    return
  flags = hardware.cpu_flags()
  has = [unit for unit in BFLOAT16_UNITS if unit in flags]
  units = (f"reports {' and '.join(has)}" if has else
           f"has no {' or '.join(BFLOAT16_UNITS)} units")
  raise ValueError(
      f"torso_dtype='bfloat16' cannot run on this CPU ({hardware.cpu_model()}"
      f', {units}): in TensorFlow {tf.__version__} {problem}; use '
      "torso_dtype='float32', or 'auto', which picks bfloat16 only where it "
      'runs.')


# How ShallowAtariTorso runs its convolutions (its `conv_impl`).
CONV_IMPLS = ('conv', 'space_to_depth')


class ShallowAtariTorso(snt.Module):
  """The paper's shallow torso: conv 16×8×8/4, conv 32×4×4/2, linear 256.

  Input [B, H, W, C] (uint8 frames are scaled to [0, 1]); output [B, 256],
  float32.

  `compute_dtype='bfloat16'` (or 'auto' resolved to it, see
  `resolve_torso_dtype`) runs the three layers in bfloat16 (oneDNN's
  kernels for the CPU's AVX-512 BF16 or AMX units) on float32 variables cast
  per call: the optimiser, checkpoints and the actors' weights stay float32 and
  everything after the torso (LSTM, heads, V-trace, loss) runs in float32.
  """

  def __init__(self, compute_dtype: str = 'float32',
               conv_impl: Optional[str] = None,
               name: str = 'shallow_atari_torso'):
    """conv_impl: how the two convolutions run: 'conv' (TensorFlow's
    convolution kernels) or 'space_to_depth' (as matmuls, see
    `space_to_depth_conv2d_bias_relu`); None: 'conv' where TensorFlow's
    oneDNN kernels are on, 'space_to_depth' where they are off. The same
    function either way, up to the order of the sums."""
    super().__init__(name=name)
    validate_torso_dtype(compute_dtype)
    if conv_impl is None:
      conv_impl = 'conv' if _onednn_on() else 'space_to_depth'
    if conv_impl not in CONV_IMPLS:
      raise ValueError(f'ShallowAtariTorso: conv_impl={conv_impl!r}; '
                       f'expected one of {CONV_IMPLS} or None')
    self._space_to_depth = conv_impl == 'space_to_depth'
    self._dtype = tf.as_dtype(resolve_torso_dtype(compute_dtype, 'shallow'))
    layers = [
        snt.Conv2D(16, [8, 8], stride=[4, 4], padding='VALID'),
        tf.nn.relu,
        snt.Conv2D(32, [4, 4], stride=[2, 2], padding='VALID'),
        tf.nn.relu,
        snt.Flatten(),
        snt.Linear(256),
        tf.nn.relu,
    ]
    # `_net` makes the variables (and is their path in checkpoints);
    # `__call__` computes the same layers in the compute dtype.
    self._net = snt.Sequential(layers)
    self._parametrised = (layers[0], layers[2], layers[5])

  def __call__(self, inputs: tf.Tensor) -> tf.Tensor:
    inputs = tf.convert_to_tensor(inputs)
    conv1, conv2, linear = self._parametrised
    if 'w' not in vars(conv1):
      # Sonnet makes a layer's variables in the dtype of its first input:
      # float32 here, from one zero frame, whatever the compute dtype.
      self._net(tf.zeros([1] + inputs.shape[1:].as_list(), tf.float32))
    # Sonnet's Conv2D and Linear computations on the layers' own variables,
    # cast to the compute dtype; for uint8 frames conv(x / 255, w) is
    # computed as conv(x, w / 255): the scaling passes over the first layer's
    # 1,024 weights, not over the frames or the layer's output.
    conv1_w = conv1.w / 255. if inputs.dtype == tf.uint8 else conv1.w
    layers = ((conv1, conv1_w), (conv2, conv2.w))
    if self._space_to_depth:
      # A VALID convolution's windows end at the last multiple of the stride
      # (kernel = 2 x stride): rows and columns past it are never read.
      # Each layer's input is in blocks of its stride: the frames' from the
      # cast, the second layer's from the first.
      strides = [conv1.stride[0], conv2.stride[0], 1]
      h = frames_to_float(_crop_to_multiple(inputs, strides[0]),
                          self._dtype, block_size=strides[0])
      for i, (layer, w) in enumerate(layers):
        h = space_to_depth_conv2d_bias_relu(
            h, tf.cast(w, self._dtype), layer.b, strides[i],
            out_block=strides[i + 1])
    else:
      h = frames_to_float(inputs, self._dtype)
      for layer, w in layers:
        h = conv2d_bias_relu(h, tf.cast(w, self._dtype), layer.b,
                             layer.stride[0])
    h = tf.reshape(h, [tf.shape(h)[0], -1])
    h = linear_bias_relu(h, tf.cast(linear.w, self._dtype), linear.b)
    return tf.cast(h, tf.float32)


class DeepAtariTorso(vision.ResNetTorso):
  """The paper's deep torso: 3 ResNet sections (16, 32, 32 channels), 15 convs,
  then FC 256 and a ReLU.

  Acme implements the ResNet (`acme.tf.networks.ResNetTorso`), but its final
  `snt.nets.MLP` has no activation after its last layer, while Figure 3 of the
  IMPALA paper (right) ends the torso with "FC 256, ReLU" before the LSTM, as
  the shallow torso does. This subclass adds that ReLU and nothing else: same
  variables, same variable names and checkpoint paths as `ResNetTorso`.

  Input [B, H, W, C] (uint8 frames are scaled to [0, 1]); output [B, 256],
  non-negative.
  """

  def __init__(self, name: str = 'resnet_torso'):
    super().__init__(num_channels=(16, 32, 32), num_blocks=(2, 2, 2),
                     num_output_hidden=(256,), name=name)

  def __call__(self, inputs: tf.Tensor) -> tf.Tensor:
    return tf.nn.relu(super().__call__(inputs))


def deep_atari_torso() -> snt.Module:
  """The paper's deep torso (Figure 3, right); see `DeepAtariTorso`."""
  return DeepAtariTorso()


def mlp_torso(hidden_sizes: Sequence[int]) -> snt.Module:
  """MLP for vector observations. Input [B, ...] (flattened; any numeric
  dtype, e.g. MinAtar's uint8 0/1 channels, cast to float32 unscaled);
  output [B, hidden_sizes[-1]]."""
  return snt.Sequential([
      lambda x: tf.cast(x, tf.float32),
      snt.Flatten(),
      snt.nets.MLP(list(hidden_sizes), activate_final=True),
  ])


def minatar_torso() -> snt.Module:
  """The MinAtar paper's torso (Young and Tian 2019, section 4 and
  `kenjyoung/MinAtar`'s examples): conv 16 filters 3x3 stride 1 without
  padding, ReLU, FC 128, ReLU.

  Input [B, 10, 10, C] (MinAtar's 0/1 channels, any numeric dtype, cast to
  float32 unscaled); output [B, 128]. With C channels it has
  16 * (9 * C + 1) + 128 * (8 * 8 * 16 + 1) parameters.
  """
  return snt.Sequential([
      lambda x: tf.cast(x, tf.float32),
      snt.Conv2D(16, 3, stride=1, padding='VALID'),
      tf.nn.relu,
      snt.Flatten(),
      snt.Linear(128),
      tf.nn.relu,
  ], name='minatar_torso')


# Grappler folds an explicit Transpose into MatMul's transpose_b, and TF 2.8
# runs [B, 4H] x [H, 4H]^T that way at about a third of the speed of the same
# product on a transposed copy (0.44 vs 0.13-0.2 ms at B=32, H=256 here); a
# transpose made inside a compiled cluster is out of Grappler's reach.
_transpose_unfolded = tf.function(lambda w: tf.transpose(w),
                                  jit_compile=True, autograph=False)


def _sigmoid_grad(y: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
  """dy * y * (1 - y): the gradient through y = sigmoid(x)."""
  return tf.raw_ops.SigmoidGrad(y=y, dy=dy)


def _tanh_grad(y: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
  """dy * (1 - y^2): the gradient through y = tanh(x)."""
  return tf.raw_ops.TanhGrad(y=y, dy=dy)


def lstm_unroll(core: snt.LSTM, inputs: tf.Tensor, state: snt.LSTMState,
                start_of_episode: Optional[tf.Tensor] = None
                ) -> Tuple[tf.Tensor, snt.LSTMState]:
  """`core` (a float32 snt.LSTM without projection) over a sequence.

  Step t, from (h, c) = the state after step t-1, zeroed where
  start_of_episode[t] (Sonnet's initial state):
    [i, f, g, o] = inputs[t] w_i + h w_h + b
    c_t = σ(f) c + σ(i) tanh(g),   h_t = σ(o) tanh(c_t)
  which is `core(inputs[t], (h, c))` (b holds Sonnet's forget bias).

  Args:
    core: the LSTM whose variables (w_i [D, 4H], w_h [H, 4H], b [4H]) are
      used; they must exist.
    inputs: [T, B, D] float32, T static.
    state: hidden and cell [B, H] entering step 0.
    start_of_episode: optional [T, B] bool.

  Returns:
    (hidden states [T, B, H], state after step T-1).

  The backward pass is written out rather than left to autodiff of T
  `core` calls: the weights' gradients are one [T*B]-row matmul each instead
  of T small ones and an AddN, the input projection and its gradient are
  single matmuls, and the recurrent matmul of the backward pass runs on a
  transposed copy of w_h (see `_transpose_unfolded`). Gradients flow to the
  inputs, the weights and the initial state (not through a reset).
  """
  if core.projection is not None:
    raise ValueError('lstm_unroll supports snt.LSTM without projection; '
                     f'{core.name} has projection_size='
                     f'{core.projection.shape[-1]}.')
  num_steps = inputs.shape[0]
  if num_steps is None:
    raise ValueError('lstm_unroll needs a static time dimension.')
  keep = None
  if start_of_episode is not None:
    keep = tf.unstack(
        tf.expand_dims(1. - tf.cast(start_of_episode, tf.float32), -1),
        num=num_steps)  # T x [B, 1]: 0 where the state is reset.

  def kept(x, t):
    # A multiplication by 0/1 rather than tf.where: with TF 2.8's select the
    # resets took 22 % of this function's time on CartPole's LSTM(64), with the
    # multiplication 7 % (forward and backward, 21 steps; docs/benchmarks.md,
    # Learner). It differs only for a non-finite state or
    # gradient, which 0 does not clear; the network and its update are then
    # non-finite anyway.
    return x if keep is None else x * keep[t]

  @tf.custom_gradient
  def run(inputs, hidden_0, cell_0, w_i, w_h, b):
    batch_size = tf.shape(inputs)[1]
    input_size, gates_size = inputs.shape[-1], w_h.shape[-1]
    flat_inputs = tf.reshape(inputs, [-1, input_size])  # [T*B, D]
    input_gates = tf.unstack(tf.reshape(
        tf.matmul(flat_inputs, w_i) + b, [num_steps, batch_size, gates_size]),
                             num=num_steps)
    hidden, cell = hidden_0, cell_0
    saved, outputs = [], []
    for t in range(num_steps):
      h_in, c_in = kept(hidden, t), kept(cell, t)
      i, f, g, o = tf.split(input_gates[t] + tf.matmul(h_in, w_h), 4, axis=1)
      i, f, g, o = tf.sigmoid(i), tf.sigmoid(f), tf.tanh(g), tf.sigmoid(o)
      cell = f * c_in + i * g
      tanh_cell = tf.tanh(cell)
      hidden = o * tanh_cell
      saved.append((h_in, c_in, i, f, g, o, tanh_cell))
      outputs.append(hidden)

    def grad(d_outputs, d_hidden, d_cell):
      # Zeros for an output nobody used (TF 2.8 passes zeros already).
      d_hidden = tf.zeros_like(hidden) if d_hidden is None else d_hidden
      d_cell = tf.zeros_like(cell) if d_cell is None else d_cell
      if d_outputs is None:
        d_outputs = tf.zeros([num_steps, batch_size, hidden.shape[-1]])
      d_outputs = tf.unstack(d_outputs, num=num_steps)
      w_h_t = _transpose_unfolded(w_h)
      d_gates_t = [None] * num_steps
      for t in reversed(range(num_steps)):
        _, c_in, i, f, g, o, tanh_cell = saved[t]
        d_h = d_hidden + d_outputs[t]
        # TensorFlow's fused activation gradients (dy y (1 - y) and
        # dy (1 - y^2) in one op each): a third of the elementwise ops of
        # writing them out, on tensors small enough that each op's dispatch
        # costs more than its arithmetic.
        d_c = d_cell + _tanh_grad(tanh_cell, d_h * o)
        d_gates_t[t] = tf.concat([_sigmoid_grad(i, d_c * g),
                                  _sigmoid_grad(f, d_c * c_in),
                                  _tanh_grad(g, d_c * i),
                                  _sigmoid_grad(o, d_h * tanh_cell)], axis=1)
        d_hidden = kept(tf.matmul(d_gates_t[t], w_h_t), t)
        d_cell = kept(d_c * f, t)
      d_gates = tf.reshape(tf.stack(d_gates_t), [-1, gates_size])  # [T*B, 4H]
      hidden_in = tf.reshape(tf.stack([s[0] for s in saved]),
                             [-1, w_h.shape[0]])
      d_inputs = tf.reshape(
          tf.matmul(d_gates, _transpose_unfolded(w_i)),
          [num_steps, batch_size, input_size])
      return (d_inputs, d_hidden, d_cell,
              tf.matmul(flat_inputs, d_gates, transpose_a=True),
              tf.matmul(hidden_in, d_gates, transpose_a=True),
              tf.reduce_sum(d_gates, axis=0))

    return (tf.stack(outputs), hidden, cell), grad

  outputs, hidden, cell = run(inputs, state.hidden, state.cell,
                              core.input_to_hidden, core.hidden_to_hidden,
                              core.b)
  return outputs, snt.LSTMState(hidden=hidden, cell=cell)


class IMPALANetwork(snt.RNNCore):
  """Torso → [torso, one-hot a_{t-1}, clip(r_{t-1})] → LSTM → (logits, value).

  __call__: inputs [B, ...], state → ((logits [B, A], value [B]), state).
  unroll:   inputs [T, B, ...], state, start_of_episode [T, B] →
            ((logits [T, B, A], values [T, B]), final state);
            `embed_sequence` then `unroll_embedded`, the torso apart from
            the recurrence (the learner embeds its batch-major batches).

  `use_lstm=False` is the paper's feed-forward agent (its Atari agents, Figure
  3): the heads read the embedding directly. The state is then a [B, 1]
  placeholder carried unchanged, so actors, adders, replay, the learner and
  the export keep one layout.
  """

  def __init__(self,
               num_actions: int,
               torso: snt.Module,
               lstm_size: int = 256,
               use_prev_action_reward: bool = True,
               reward_clip: float = 1.0,
               use_lstm: bool = True,
               name: str = 'impala_network'):
    super().__init__(name=name)
    self._num_actions = num_actions
    self._torso = torso
    self._core = snt.LSTM(lstm_size) if use_lstm else None
    self._head = policy_value.PolicyValueHead(num_actions)
    self._use_prev_action_reward = use_prev_action_reward
    self._reward_clip = reward_clip

  @property
  def num_actions(self) -> int:
    return self._num_actions

  def _embed(self, inputs) -> tf.Tensor:
    """[B, ...] observation (or OAR) → [B, D] LSTM input."""
    if is_oar(inputs):
      features = self._torso(inputs.observation)
      if not self._use_prev_action_reward:
        return features
      action = tf.one_hot(tf.cast(inputs.action, tf.int32), self._num_actions)
      reward = tf.cast(inputs.reward, tf.float32)
      # The paper feeds the clipped reward: unclipped rewards of Atari games
      # span orders of magnitude and would dominate the LSTM input.
      reward = tf.clip_by_value(reward, -self._reward_clip, self._reward_clip)
      reward = tf.reshape(reward, [-1, 1])
      return tf.concat([features, action, reward], axis=-1)
    return self._torso(inputs)

  def __call__(self, inputs, state: snt.LSTMState
               ) -> Tuple[Tuple[Logits, Value], snt.LSTMState]:
    embedding = self._embed(inputs)
    if self._core is None:
      return self._head(embedding), state
    output, new_state = self._core(embedding, state)
    logits, value = self._head(output)
    return (logits, value), new_state

  def initial_state(self, batch_size: int, **unused_kwargs) -> snt.LSTMState:
    if self._core is None:
      zeros = tf.zeros([batch_size, 1])
      return snt.LSTMState(hidden=zeros, cell=zeros)
    return self._core.initial_state(batch_size)

  def unroll(self, inputs, state: snt.LSTMState,
             start_of_episode: Optional[tf.Tensor] = None
             ) -> Tuple[Tuple[Logits, Value], snt.LSTMState]:
    """Unrolls over a time-major sequence.

    Args:
      inputs: nest of [T, B, ...] observations (or OAR).
      state: LSTM state at the start of the sequence, each part [B, H].
      start_of_episode: optional [T, B] bool; where True the LSTM state is
        reset to the initial (zero) state before that step, as the actor did.

    Returns:
      ((logits [T, B, A], values [T, B]), final state).
    """
    return self.unroll_embedded(self.embed_sequence(inputs), state,
                                start_of_episode)

  def embed_sequence(self, inputs, batch_major: bool = False) -> tf.Tensor:
    """The recurrent core's inputs [T, B, D] for a sequence of observations.

    Args:
      inputs: nest of [T, B, ...] observations (or OAR); with `batch_major`,
        of [B, T, ...].
      batch_major: the torso sees each step alone, so batch-major inputs
        are embedded as they are and only the [B, T, D] embeddings are
        made time-major: a learner batch's frames are never transposed
        (4.4 ms of uint8 copying per Atari update here).

    Returns:
      [T, B, D] float32 embeddings for `unroll_embedded`.
    """
    embeddings = snt.BatchApply(self._embed)(inputs)
    if batch_major:
      embeddings = tf.transpose(embeddings, [1, 0, 2])
    return embeddings

  def unroll_embedded(self, embeddings: tf.Tensor, state: snt.LSTMState,
                      start_of_episode: Optional[tf.Tensor] = None
                      ) -> Tuple[Tuple[Logits, Value], snt.LSTMState]:
    """`unroll` after the torso: embeddings [T, B, D] from `embed_sequence`;
    the other arguments and the result as in `unroll`."""
    if self._core is None:
      return snt.BatchApply(self._head)(embeddings), state
    if embeddings.shape[0] is None:
      raise ValueError('IMPALANetwork.unroll needs a static time dimension.')
    if 'b' not in vars(self._core):
      self._core(embeddings[0], state)  # Sonnet makes them on a first call.
    outputs, state = lstm_unroll(self._core, embeddings, state,
                                 start_of_episode)  # [T, B, H]
    logits, values = snt.BatchApply(self._head)(outputs)
    return (logits, values), state


def make_network(config, num_actions: int) -> IMPALANetwork:
  """Builds the network named by `config.network` (an IMPALAConfig)."""
  torsos: dict = {
      'mlp_lstm': lambda: mlp_torso(config.mlp_hidden_sizes),
      'minatar': minatar_torso,
      'shallow': lambda: ShallowAtariTorso(config.torso_dtype),
      'deep': deep_atari_torso,
  }
  if config.network not in torsos:
    raise ValueError(f'Unknown network {config.network!r}; expected one of '
                     f'{sorted(torsos)}.')
  make_torso: Callable[[], snt.Module] = torsos[config.network]
  return IMPALANetwork(
      num_actions=num_actions,
      torso=make_torso(),
      lstm_size=config.lstm_size,
      use_prev_action_reward=config.use_prev_action_reward,
      use_lstm=config.use_lstm)
