"""Start-up of the default program: launch to the learner's first step.

Runs `programs/impala_lp.py` (local_mp, the default CartPole program unless
`--program_flags` say otherwise) `--repeats` times with a small step budget,
reads its output as it comes and times, from the launch of the command:

  - every node process's first output line (Launchpad's own, printed when
    the process starts, before our modules and TensorFlow are imported),
  - the learner constructed ("learner: starting at learner step ..."),
  - the learner's first step done ("learner: first step done ..."; trace and
    compile included),
  - the program's exit.

and prints a Markdown table of the medians with the git commit and the
settings.

  python benchmarks/startup.py [--repeats=3] [--program_flags=--noevaluator]
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import provenance  # pylint: disable=g-import-not-at-top

flags.DEFINE_integer('repeats', 3, 'Program launches (medians reported).')
flags.DEFINE_integer('max_actor_steps', 20_000, 'Budget of each launch.')
flags.DEFINE_list('program_flags', [], 'Extra flags for every launch.')
flags.DEFINE_float('timeout_s', 300., 'Bound on one launch.')
FLAGS = flags.FLAGS

_NODE_LINE = re.compile(r'^\[([\w/]+)\] ')
_EVENTS = (('learner constructed', 'learner: starting at learner step'),
           ('first learner step', 'learner: first step done'))


def _launch() -> dict:
  """One launch: seconds from the command's start to each event."""
  logdir = tempfile.mkdtemp(prefix='impala_startup_')
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
         '--lp_launch_type=local_mp', f'--max_actor_steps={FLAGS.max_actor_steps}',
         f'--logdir={logdir}'] + list(FLAGS.program_flags)
  start = time.perf_counter()
  proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  timer = threading.Timer(FLAGS.timeout_s, proc.kill)
  timer.start()
  times, nodes, tail = {}, {}, []
  try:
    for line in proc.stdout:
      now = time.perf_counter() - start
      tail = (tail + [line])[-30:]
      match = _NODE_LINE.match(line)
      if match:
        nodes.setdefault(match.group(1), now)
      for name, text in _EVENTS:
        if text in line:
          times.setdefault(name, now)
    proc.wait()
  finally:
    timer.cancel()
  times['exit'] = time.perf_counter() - start
  if proc.returncode != 0 or len(times) != len(_EVENTS) + 1:
    raise SystemExit(f'launch failed (exit {proc.returncode}, events '
                     f'{sorted(times)}):\n{"".join(tail)}')
  times['all node processes up'] = max(nodes.values())
  times['nodes'] = len(nodes)
  return times


def main(argv):
  del argv
  print(f'startup.py at commit {provenance.git_commit()}: programs/impala_lp.py '
        f'--lp_launch_type=local_mp --max_actor_steps={FLAGS.max_actor_steps} '
        f'{" ".join(FLAGS.program_flags)}; {FLAGS.repeats} launches, one after '
        f'the other; {os.cpu_count()} CPU(s).\n', flush=True)
  runs = []
  for i in range(FLAGS.repeats):
    runs.append(_launch())
    print(f'launch {i}: ' + ', '.join(
        f'{k} {v:.1f} s' for k, v in runs[-1].items() if k != 'nodes'),
          flush=True)
  print(f'\nNode processes: {runs[0]["nodes"]}.\n')
  print('| from launch to | median (s) | min (s) | max (s) |')
  print('|---|---:|---:|---:|')
  for name in ('all node processes up', 'learner constructed',
               'first learner step', 'exit'):
    values = [r[name] for r in runs]
    print(f'| {name} | {statistics.median(values):.1f} | {min(values):.1f} '
          f'| {max(values):.1f} |')


if __name__ == '__main__':
  app.run(main)
