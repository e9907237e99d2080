"""Resident memory of a running program's node processes, and its growth.

A local_mp program's launcher keeps every node's current pid in
`<logdir>/status/nodes.json`; `sample` reads it and each process's RSS.
`growth` fits MB/min over one node's last life, after a warm-up (TensorFlow
allocates its pools, forked pages are touched, the replay fills). Shared by
benchmarks/soak.py and benchmarks/faults.py.
"""

import json
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import psutil

# title -> [(seconds since start, pid, RSS MB)]
Samples = Dict[str, List[Tuple[float, int, float]]]


def nodes(logdir: str) -> Dict[str, dict]:
  """{'actor/0': {'pid': ..., 'restarts': ...}, ...}; {} before launch."""
  try:
    with open(os.path.join(logdir, 'status', 'nodes.json')) as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


def rss_mb(pid) -> Optional[float]:
  try:
    return psutil.Process(pid).memory_info().rss / 2**20
  except (psutil.Error, TypeError, ValueError):
    return None


def sample(logdir: str, t: float, samples: Samples) -> None:
  """Appends (t, pid, RSS) of every live node to `samples`."""
  for title, node in nodes(logdir).items():
    mb = rss_mb(node.get('pid'))
    if mb is not None:
      samples.setdefault(title, []).append((t, node['pid'], mb))


def last_life(samples: List[Tuple[float, int, float]]
              ) -> List[Tuple[float, float]]:
  """(t, MB) of the samples of the node's latest process."""
  last_pid = samples[-1][1]
  return [(t, mb) for t, pid, mb in samples if pid == last_pid]


def growth(samples: List[Tuple[float, int, float]],
           warmup_s: float) -> Optional[float]:
  """MB/min (least-squares slope) over the last life after `warmup_s`;
  None with fewer than 3 samples there."""
  life = last_life(samples)
  warm = [(t, mb) for t, mb in life if t >= life[0][0] + warmup_s]
  if len(warm) < 3:
    return None
  ts, mbs = np.array(warm).T
  return float(np.polyfit(ts / 60., mbs, 1)[0])
