"""oneDNN's verbose log (ONEDNN_VERBOSE=1): what a benchmark's child process
ran on oneDNN's primitives, and their arithmetic.

A child marks the stretches it times with `mark('begin', name)` and
`mark('end', name, steps, seconds)`; `parse` reads its stdout back into
per-stretch primitive calls, and `primitive_gflop` gives the multiply-adds
of one call from its problem descriptor. No TensorFlow here: the parsing is
tested on hand-written lines (tests/test_onednn_verbose.py).
"""

import ctypes
import math
import os
import re
import sys
from typing import Optional

MARK = '=====onednn_verbose mark'


def primitive_gflop(kind: str, problem: str) -> Optional[float]:
  """GFLOP (multiply-adds x 2) of one oneDNN primitive call, from the
  `kind` and `problem` fields of its ONEDNN_VERBOSE line; None for a kind
  that does no multiply-adds (reorders, eltwise) or a problem not parsed.

  convolution: 'mb672_ic4oc16_ih84oh20kh8sh4dh0ph0_iw84ow20kw8sw4dw0pw0'
  (forward, backward_data and backward_weights alike: 2 mb ic oc oh ow kh
  kw, with groups g: ic and oc are totals, so divided by g);
  inner_product: 'mb672ic2592oc256' (spatial ih, iw multiply ic);
  matmul: 'A1xA2:B1xB2:C1xC2' (src:weights:dst, batch dims before the
  last two, broadcast: the work is dst's elements times the shared K)."""
  fields = dict(re.findall(r'([a-z]+)(\d+)', problem))
  get = lambda k, default=1: int(fields.get(k, default))
  if kind == 'convolution':
    if not all(k in fields for k in ('mb', 'ic', 'oc')):
      return None
    spatial = 1
    for axis in 'dhw':
      spatial *= get(f'o{axis}') * get(f'k{axis}')
    return 2 * get('mb') * get('ic') * get('oc') * spatial / get('g') / 1e9
  if kind == 'inner_product':
    if not all(k in fields for k in ('mb', 'ic', 'oc')):
      return None
    inputs = get('ic') * get('id') * get('ih') * get('iw')
    return 2 * get('mb') * inputs * get('oc') / 1e9
  if kind == 'matmul':
    try:
      src, _, dst = (list(map(int, part.split('x')))
                     for part in problem.split(':'))
    except ValueError:
      return None
    return 2 * math.prod(dst) * src[-1] / 1e9
  return None


def parse(stdout: str) -> dict:
  """{segment: {'seconds': wall s, 'steps': n, 'calls': {(kind, impl,
  propagation, problem): [ms per call]}}} from a child's stdout: the
  ONEDNN_VERBOSE 'exec' lines between each pair of marks the child
  printed ('<mark> begin <segment>', '<mark> end <segment> <n> <s>')."""
  segments, current = {}, None
  for line in stdout.splitlines():
    if line.startswith(MARK):
      words = line[len(MARK):].split('\t')[1:]
      name = words[1]
      if words[0] == 'begin':
        if current is not None or name in segments:
          raise ValueError(f'onednn_verbose.parse: segment {name!r} begins '
                           'while one is open or after one of that name; '
                           'expected each name once, begin then end.')
        current = segments[name] = {'calls': {}}
      else:
        if current is None or current is not segments.get(name):
          raise ValueError(f'onednn_verbose.parse: segment {name!r} ends '
                           'without having begun.')
        current.update(steps=int(words[2]), seconds=float(words[3]))
        current = None
    elif current is not None and line.startswith('onednn_verbose,exec,'):
      fields = line.split(',')
      # exec, engine, kind, implementation, propagation, formats, attributes,
      # auxiliary, problem, time (ms); the attributes may hold commas.
      key = (fields[3], fields[4], fields[5], fields[-2])
      current['calls'].setdefault(key, []).append(float(fields[-1]))
  if current is not None:
    raise ValueError(f'onednn_verbose.parse: the output ends inside a '
                     f'segment ({list(segments)[-1]!r}); expected its end '
                     'mark (did the child die?).')
  return segments


def mark(*words):
  """A mark in stdout, in order with oneDNN's printf lines (C stdio's
  buffer is flushed first, Python's too)."""
  sys.stdout.flush()
  ctypes.CDLL(None).fflush(None)
  os.write(1, ('\t'.join((MARK,) + words) + '\n').encode())
