"""benchmarks/onednn_verbose.py: oneDNN's verbose log read back."""

import importlib.util
import os
import subprocess
import sys

import pytest

import docs_commands

_spec = importlib.util.spec_from_file_location(
    'onednn_verbose',
    os.path.join(docs_commands.ROOT, 'benchmarks', 'onednn_verbose.py'))
onednn_verbose = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(onednn_verbose)


@pytest.mark.parametrize('kind, problem, flops', [
    # The shallow torso's first layer on a learner batch: 2 x 672 images x
    # 4 x 16 channels x 20 x 20 outputs x 8 x 8 taps.
    ('convolution', 'mb672_ic4oc16_ih84oh20kh8sh4dh0ph0_iw84ow20kw8sw4dw0pw0',
     2 * 672 * 4 * 16 * 20 * 20 * 8 * 8),
    # Two groups (oneDNN 2.x writes g after mb): each output channel sees
    # ic / g = 2 input channels.
    ('convolution', 'mb1_g2ic4oc4_ih3oh1kh3sh1dh0ph0_iw3ow1kw3sw1dw0pw0',
     2 * 1 * 4 * 4 * 3 * 3 // 2),
    # A 3-D one: depth multiplies like height and width.
    ('convolution',
     'mb1_ic1oc2_id4od2kd3sd1dd0pd0_ih3oh1kh3sh1dh0ph0_iw3ow1kw3sw1dw0pw0',
     2 * 1 * 1 * 2 * (2 * 3) * (1 * 3) * (1 * 3)),
    ('inner_product', 'mb672ic2592oc256', 2 * 672 * 2592 * 256),
    # An inner product over a [2, 3, 4, 5] input: 60 inputs per row.
    ('inner_product', 'mb2ic3ih4iw5oc6', 2 * 2 * 60 * 6),
    ('matmul', '2x3x4:2x4x5:2x3x5', 2 * (2 * 3 * 4) * 5),
    # The source's batch dim broadcast over the weights': 2 products.
    ('matmul', '1x3x4:2x4x5:2x3x5', 2 * (2 * 3 * 5) * 4),
])
def test_primitive_gflop_counts_the_multiply_adds(kind, problem, flops):
  assert onednn_verbose.primitive_gflop(kind, problem) == pytest.approx(
      flops / 1e9, rel=1e-12)


@pytest.mark.parametrize('kind, problem', [
    ('reorder', '32x16x4x4'), ('eltwise', 'mb672ic16ih20iw20'),
    ('convolution', 'not a problem'), ('matmul', '3x4')])
def test_primitive_gflop_is_none_without_multiply_adds(kind, problem):
  assert onednn_verbose.primitive_gflop(kind, problem) is None


def _exec(kind, impl, problem, ms, attrs=''):
  return (f'onednn_verbose,exec,cpu,{kind},{impl},forward_training,'
          f'src_f32::blocked:acdb:f0 dst_f32::blocked:acdb:f0,{attrs},'
          f'alg:convolution_direct,{problem},{ms}')


def test_parse_keeps_each_marked_stretch_apart():
  mark = onednn_verbose.MARK
  conv = 'mb1_ic1oc1_ih1oh1kh1sh1dh0ph0_iw1ow1kw1sw1dw0pw0'
  stdout = '\n'.join([
      'onednn_verbose,info,oneDNN v2.5.0',
      _exec('convolution', 'brgconv:avx512_core', conv, 9.0),  # Unmarked.
      f'{mark}\tbegin\tours',
      _exec('convolution', 'brgconv:avx512_core', conv, 1.5,
            attrs='attr-post-ops:eltwise_relu'),
      'onednn_verbose,create:cache_miss,cpu,convolution,x,y,z,,,p,0.1',
      'a line of the program itself',
      # Attributes holding commas do not shift the problem and the time.
      _exec('convolution', 'brgconv:avx512_core', conv, 2.5,
            attrs='attr-scales:src0:0:0.5,wei:0:0.25'),
      _exec('reorder', 'jit:uni', '16x4x8x8', 0.25),
      f'{mark}\tend\tours\t2\t0.125',
      _exec('reorder', 'jit:uni', '16x4x8x8', 7.0),  # Between stretches.
      f'{mark}\tbegin\tacme: a name, with commas',
      _exec('inner_product', 'x64:gemm:jit', 'mb2ic3oc4', 0.5),
      f'{mark}\tend\tacme: a name, with commas\t1\t0.5',
  ])
  segments = onednn_verbose.parse(stdout)
  assert list(segments) == ['ours', 'acme: a name, with commas']
  ours = segments['ours']
  assert (ours['steps'], ours['seconds']) == (2, 0.125)
  assert ours['calls'] == {
      ('convolution', 'brgconv:avx512_core', 'forward_training', conv):
          [1.5, 2.5],
      ('reorder', 'jit:uni', 'forward_training', '16x4x8x8'): [0.25]}
  assert segments['acme: a name, with commas']['calls'] == {
      ('inner_product', 'x64:gemm:jit', 'forward_training', 'mb2ic3oc4'):
          [0.5]}


@pytest.mark.parametrize('marks, message', [
    (['end\tx\t1\t0.5'], "'x' ends without having begun"),
    (['begin\tx'], "ends inside a segment \\('x'\\)"),
    (['begin\tx', 'begin\ty'], "'y' begins while one is open"),
    (['begin\tx', 'end\tx\t1\t0.5', 'begin\tx'], "'x' begins .* after"),
])
def test_parse_refuses_marks_that_do_not_pair(marks, message):
  stdout = '\n'.join(f'{onednn_verbose.MARK}\t{m}' for m in marks)
  with pytest.raises(ValueError, match=message):
    onednn_verbose.parse(stdout)


def test_mark_is_ordered_with_c_stdio_output():
  # oneDNN prints with C's printf, buffered apart from Python's stdout: a
  # mark must flush both, or a pipe reorders the lines.
  code = f'''
import ctypes, importlib.util, sys
spec = importlib.util.spec_from_file_location('v', {_spec.origin!r})
v = importlib.util.module_from_spec(spec); spec.loader.exec_module(v)
libc = ctypes.CDLL(None)
libc.printf(b"from C before\\n")
print("from Python before")
v.mark("begin", "x")
libc.printf(b"from C inside\\n")
v.mark("end", "x", "1", "0.5")
'''
  # Buffered as a benchmark's child is (PYTHONUNBUFFERED would make C's
  # stdout unbuffered too, and the test pass without the flush).
  env = {k: v for k, v in os.environ.items() if k != 'PYTHONUNBUFFERED'}
  out = subprocess.run([sys.executable, '-c', code], stdout=subprocess.PIPE,
                       env=env, text=True, timeout=60,
                       check=True).stdout.splitlines()
  mark = onednn_verbose.MARK
  # Before a mark, either buffer's lines may come first; none after it.
  assert sorted(out[:2]) == ['from C before', 'from Python before'], out
  assert out[2:] == [f'{mark}\tbegin\tx', 'from C inside',
                     f'{mark}\tend\tx\t1\t0.5'], out
