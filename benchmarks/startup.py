"""Start-up of the default program: launch to the learner's first step.

Runs `programs/impala_lp.py` (local_mp, the default CartPole program plus
`--program_flags`) with a small step budget, once per variant: each node
start method (`--node_start=fork`, the default, and `exec`, Launchpad's
process_entry command per node), and with `--warm_up=both` each with and
without the learner's warm-up (`--config.warm_up_update`), alternating,
`--repeats` times each; reads the output as it comes and times, from the
launch of the command:

  - every node's first output line (with exec, Launchpad's own line, printed
    before our modules and TensorFlow are imported; a forked node has
    everything imported already and first prints when it is constructed),
  - the learner constructed ("learner: starting at learner step ..."),
  - the learner's update traced and compiled before the first batch
    ("learner: update traced and compiled ...", with the warm-up only),
  - the learner's first step done ("learner: first step done ..."; trace and
    compile included without the warm-up),
  - the program's exit.

and prints a Markdown table of the medians per variant with the git commit,
the settings and each variant's ratio to the first.

  python benchmarks/startup.py [--repeats=3] [--methods=fork,exec]
      [--warm_up=on|off|both] [--program_flags=--noevaluator]
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
import program_runs  # pylint: disable=g-import-not-at-top
import provenance  # pylint: disable=g-import-not-at-top

flags.DEFINE_integer('repeats', 3, 'Program launches (medians reported).')
flags.DEFINE_integer('max_actor_steps', 20_000, 'Budget of each launch.')
flags.DEFINE_list('program_flags', [], 'Extra flags for every launch.')
flags.DEFINE_list('methods', ['fork', 'exec'], 'Node start methods.')
flags.DEFINE_enum('warm_up', 'on', ['on', 'off', 'both'],
                  "The learner's warm-up (--config.warm_up_update): as the "
                  'config has it (on), off, or each launch with and '
                  'without.')
flags.DEFINE_float('timeout_s', 300., 'Bound on one launch.')
FLAGS = flags.FLAGS

_NODE_LINE = re.compile(r'^\[([\w/]+)\] ')
_EVENTS = (('learner constructed', 'learner: starting at learner step'),
           ('update warmed up', 'learner: update traced and compiled'),
           ('first learner step', 'learner: first step done'))
# Events every launch must show (the warm-up's only where it is on).
_REQUIRED = ('learner constructed', 'first learner step')


def _launch(method: str, warm_up: bool) -> dict:
  """One launch: seconds from the command's start to each event."""
  logdir = tempfile.mkdtemp(prefix='impala_startup_')
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
         '--lp_launch_type=local_mp', f'--max_actor_steps={FLAGS.max_actor_steps}',
         f'--logdir={logdir}', f'--node_start={method}',
         f'--config.warm_up_update={str(warm_up).lower()}',
         '--verbose'] + list(
             FLAGS.program_flags)
  start = time.perf_counter()
  proc = program_runs.popen(cmd, stdout=subprocess.PIPE,
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
  missing = [e for e in _REQUIRED + (('update warmed up',) if warm_up else ())
             if e not in times]
  if proc.returncode != 0 or missing:
    raise SystemExit(f'launch failed (exit {proc.returncode}, events '
                     f'{sorted(times)}, missing {missing}):\n'
                     f'{"".join(tail)}')
  times['first output of every node'] = max(nodes.values())
  times['nodes'] = len(nodes)
  return times


_ROWS = ('first output of every node', 'learner constructed',
         'update warmed up', 'first learner step', 'exit')


def _variants():
  """(label, node start method, warm-up on) per variant, in launch order."""
  settings = {'on': (True,), 'off': (False,), 'both': (True, False)}[
      FLAGS.warm_up]
  return [(m if FLAGS.warm_up != 'both' else
           f'{m}, warm-up {"on" if w else "off"}', m, w)
          for m in FLAGS.methods for w in settings]


def main(argv):
  del argv
  variants = _variants()
  print(f'startup.py at {provenance.stamp()}: programs/impala_lp.py '
        f'--lp_launch_type=local_mp --max_actor_steps={FLAGS.max_actor_steps} '
        f'{" ".join(FLAGS.program_flags)}; variants '
        f'{"; ".join(label for label, _, _ in variants)} (--node_start, '
        f'--config.warm_up_update), alternating, {FLAGS.repeats} launches '
        f'each, one after the other; {os.cpu_count()} CPU(s).\n', flush=True)
  runs = {label: [] for label, _, _ in variants}
  for i in range(FLAGS.repeats):
    for label, method, warm_up in variants:
      runs[label].append(_launch(method, warm_up))
      print(f'launch {i} ({label}): ' + ', '.join(
          f'{k} {v:.1f} s' for k, v in runs[label][-1].items()
          if k != 'nodes'), flush=True)
  print(f'\nNode processes: {runs[variants[0][0]][0]["nodes"]}.\n')
  rows = [name for name in _ROWS
          if any(name in r for rs in runs.values() for r in rs)]
  medians = {label: {name: statistics.median(r[name] for r in rs)
                     for name in rows if all(name in r for r in rs)}
             for label, rs in runs.items()}
  first = variants[0][0]
  header = ' | '.join(f'{label}: median (min-max) s' for label in runs)
  ratios = [label for label in runs if label != first]
  print(f'| from launch to | {header} |' +
        ''.join(f' {label} / {first} |' for label in ratios))
  print('|---|' + '---:|' * (len(runs) + len(ratios)))
  for name in rows:
    cells = []
    for label, rs in runs.items():
      if name not in medians[label]:
        cells.append('-')
        continue
      values = [r[name] for r in rs]
      cells.append(f'{medians[label][name]:.1f} ({min(values):.1f}-'
                   f'{max(values):.1f})')
    line = f'| {name} | ' + ' | '.join(cells) + ' |'
    for label in ratios:
      a, b = medians[first].get(name), medians[label].get(name)
      line += f' {b / a:.2f}x |' if a and b else ' - |'
    print(line)


if __name__ == '__main__':
  app.run(main)
