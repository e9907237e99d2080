"""What CPU this process runs on: model, feature flags, usable cores.

Figures measured here differ several-fold between the CPU kinds these
machines come in (Intel with AMX, AMD without AVX-512), and which TensorFlow
kernels work does too, so benchmarks record `describe_cpu()` beside their
commit and the torso's dtype checks read `cpu_flags()`.
"""

import math
import os
from typing import FrozenSet, Optional

CPUINFO = '/proc/cpuinfo'

# The flags that decide what these machines' figures mean: vector width
# (AVX2, AVX-512) and the bfloat16 units oneDNN uses (AVX-512 BF16, AMX).
RELEVANT_FLAGS = ('avx2', 'fma', 'avx512f', 'avx512_vnni', 'avx512_bf16',
                  'amx_tile', 'amx_bf16')


def _cpuinfo_field(name: str, cpuinfo: Optional[str]) -> str:
  """The value of the first `name : value` line of `cpuinfo` (default
  `CPUINFO`; '' when the file cannot be read or has no such line)."""
  try:
    with open(cpuinfo or CPUINFO) as f:
      for line in f:
        key, sep, value = line.partition(':')
        if sep and key.strip() == name:
          return value.strip()
  except OSError:
    pass
  return ''


def cpu_model(cpuinfo: Optional[str] = None) -> str:
  """The CPU's model name as Linux reports it ('unknown CPU' elsewhere)."""
  return _cpuinfo_field('model name', cpuinfo) or 'unknown CPU'


def cpu_flags(cpuinfo: Optional[str] = None) -> FrozenSet[str]:
  """The CPU's feature flags (empty where /proc/cpuinfo cannot be read)."""
  return frozenset(_cpuinfo_field('flags', cpuinfo).split())


def describe_cpu(cpuinfo: Optional[str] = None) -> str:
  """One line naming the CPU, its usable cores and which of
  `RELEVANT_FLAGS` it has and lacks, e.g. 'AMD EPYC, 2 cores, has avx2 fma;
  lacks avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16'."""
  flags = cpu_flags(cpuinfo)
  head = f'{cpu_model(cpuinfo)}, {usable_cores()} cores'
  if not flags:
    return head + ', flags unknown'
  has = ' '.join(f for f in RELEVANT_FLAGS if f in flags)
  lacks = ' '.join(f for f in RELEVANT_FLAGS if f not in flags)
  return ', '.join([head] + [f'has {has}'] * bool(has)) + (
      f'{";" if has else ","} lacks {lacks}' if lacks else '')


def usable_cores() -> int:
  """The cores this process may use: its CPU affinity, capped by a cgroup
  CPU quota (a Kubernetes pod's CPU limit, which affinity does not show)."""
  cores = len(os.sched_getaffinity(0))
  for path, parse in (
      # cgroup v2: "<quota> <period>" or "max <period>".
      ('/sys/fs/cgroup/cpu.max', lambda t: t.split()),
      # cgroup v1: quota (-1: none) and period in two files.
      ('/sys/fs/cgroup/cpu/cpu.cfs_quota_us', lambda t: [
          t.strip(), _read('/sys/fs/cgroup/cpu/cpu.cfs_period_us')])):
    try:
      quota, period = parse(_read(path))
      if quota not in ('max', '-1'):
        return max(1, min(cores, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
      continue
  return cores


def _read(path: str) -> str:
  with open(path) as f:
    return f.read()
