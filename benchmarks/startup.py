"""Start-up of the default program: launch to the learner's first step.

Runs `programs/impala_lp.py` (local_mp, the default CartPole program plus
`--program_flags`) with a small step budget, once per node start method
(`--node_start=fork`, the default, and `exec`, Launchpad's process_entry
command per node), alternating, `--repeats` times each; reads the output as
it comes and times, from the launch of the command:

  - every node's first output line (with exec, Launchpad's own line, printed
    before our modules and TensorFlow are imported; a forked node has
    everything imported already and first prints when it is constructed),
  - the learner constructed ("learner: starting at learner step ..."),
  - the learner's first step done ("learner: first step done ..."; trace and
    compile included),
  - the program's exit.

and prints a Markdown table of the medians per method with the git commit,
the settings and the exec/fork ratio.

  python benchmarks/startup.py [--repeats=3] [--methods=fork,exec]
      [--program_flags=--noevaluator]
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
flags.DEFINE_list('methods', ['fork', 'exec'], 'Node start methods.')
flags.DEFINE_float('timeout_s', 300., 'Bound on one launch.')
FLAGS = flags.FLAGS

_NODE_LINE = re.compile(r'^\[([\w/]+)\] ')
_EVENTS = (('learner constructed', 'learner: starting at learner step'),
           ('first learner step', 'learner: first step done'))


def _launch(method: str) -> dict:
  """One launch: seconds from the command's start to each event."""
  logdir = tempfile.mkdtemp(prefix='impala_startup_')
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
         '--lp_launch_type=local_mp', f'--max_actor_steps={FLAGS.max_actor_steps}',
         f'--logdir={logdir}', f'--node_start={method}',
         '--verbose'] + list(
             FLAGS.program_flags)
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
  times['first output of every node'] = max(nodes.values())
  times['nodes'] = len(nodes)
  return times


_ROWS = ('first output of every node', 'learner constructed',
         'first learner step', 'exit')


def main(argv):
  del argv
  print(f'startup.py at {provenance.stamp()}: programs/impala_lp.py '
        f'--lp_launch_type=local_mp --max_actor_steps={FLAGS.max_actor_steps} '
        f'{" ".join(FLAGS.program_flags)}; --node_start in '
        f'{",".join(FLAGS.methods)}, alternating, {FLAGS.repeats} launches '
        f'each, one after the other; {os.cpu_count()} CPU(s).\n', flush=True)
  runs = {method: [] for method in FLAGS.methods}
  for i in range(FLAGS.repeats):
    for method in FLAGS.methods:
      runs[method].append(_launch(method))
      print(f'launch {i} ({method}): ' + ', '.join(
          f'{k} {v:.1f} s' for k, v in runs[method][-1].items()
          if k != 'nodes'), flush=True)
  print(f'\nNode processes: {runs[FLAGS.methods[0]][0]["nodes"]}.\n')
  medians = {m: {name: statistics.median(r[name] for r in rs)
                 for name in _ROWS} for m, rs in runs.items()}
  header = ' | '.join(f'--node_start={m}: median (min-max) s'
                      for m in FLAGS.methods)
  ratio = len(FLAGS.methods) == 2
  print(f'| from launch to | {header} |' + (
      f' {FLAGS.methods[1]} / {FLAGS.methods[0]} |' if ratio else ''))
  print('|---|' + '---:|' * (len(FLAGS.methods) + ratio))
  for name in _ROWS:
    cells = []
    for m, rs in runs.items():
      values = [r[name] for r in rs]
      cells.append(f'{medians[m][name]:.1f} ({min(values):.1f}-'
                   f'{max(values):.1f})')
    line = f'| {name} | ' + ' | '.join(cells) + ' |'
    if ratio:
      a, b = (medians[m][name] for m in FLAGS.methods)
      line += f' {b / a:.2f}x |'
    print(line)


if __name__ == '__main__':
  app.run(main)
