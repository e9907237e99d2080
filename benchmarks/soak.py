"""Soak check: the default program for a while, every node's memory over time.

Runs `programs/impala_lp.py` (local_mp, default CartPole program with its
evaluator, an unreachable step budget) for `--minutes`, samples every node
process's resident memory every `--sample_every_s` (pids from the
supervisor's `<logdir>/status/nodes.json`), then stops it with Ctrl-C (SIGINT)
and checks it exits 0. Prints the git commit, the settings and a Markdown
table per node: RSS at the start, after the warm-up and at the end, and the
growth in MB/min after the warm-up (least-squares slope). Exits 1, naming
the nodes, when any node grows faster than `--tolerance_mb_per_min` after
the warm-up, when a node process was restarted, or when the program did not
exit 0.

  python benchmarks/soak.py [--minutes=20] [--tolerance_mb_per_min=1.0]

A leak of the size issue 16 measured (actors +7.5 MB/min, evaluator +4.6,
learner +2.0) is several times the tolerance; what remains after the
warm-up on a healthy run is allocator noise (well under 1 MB/min here).
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import node_memory
import program_runs
import provenance

flags.DEFINE_float('minutes', 20., 'How long the program runs.')
flags.DEFINE_float('sample_every_s', 30., 'Memory sampling period.')
flags.DEFINE_float('warmup_minutes', 4., 'Growth is measured after this.')
flags.DEFINE_float('tolerance_mb_per_min', 1.0,
                   'Largest growth after the warm-up that passes, per node.')
flags.DEFINE_string('logdir', None, 'Run directory (default: a new tmp dir).')
flags.DEFINE_list('program_flags', [],
                  'Extra flags for programs/impala_lp.py, e.g. '
                  '--program_flags=--num_actors=4')
FLAGS = flags.FLAGS


def run_program(logdir: str):
  """Runs the program for FLAGS.minutes; (samples, exit status, output)."""
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
         '--lp_launch_type=local_mp', f'--logdir={logdir}',
         '--max_actor_steps=1000000000000',
         '--progress_interval_s=60'] + list(FLAGS.program_flags)
  out_path = os.path.join(logdir, 'program.log')
  samples: node_memory.Samples = {}
  start = time.time()
  with open(out_path, 'w') as out:
    proc = program_runs.popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
      next_sample = 0.
      while proc.poll() is None and time.time() - start < FLAGS.minutes * 60:
        t = time.time() - start
        if t >= next_sample:
          next_sample += FLAGS.sample_every_s
          node_memory.sample(logdir, t, samples)
          done = ', '.join(f'{title} {s[-1][2]:.0f}'
                           for title, s in sorted(samples.items()))
          print(f'  {t / 60:5.1f} min: RSS MB {done}', flush=True)
        time.sleep(1.)
      if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the normal user stop.
        proc.wait(timeout=120)
    finally:
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
  with open(out_path, errors='replace') as f:
    return samples, proc.returncode, f.read()


def main(argv):
  del argv
  program_runs.exit_on_sigterm()  # Its `finally` blocks stop what it starts.
  logdir = FLAGS.logdir or tempfile.mkdtemp(prefix='impala_soak_')
  os.makedirs(logdir, exist_ok=True)  # A --logdir not made yet.
  print(f'soak.py at {provenance.stamp()}: programs/impala_lp.py '
        f'local_mp {" ".join(FLAGS.program_flags) or "(defaults)"}, '
        f'{FLAGS.minutes:g} min, RSS every {FLAGS.sample_every_s:g} s, '
        f'growth after {FLAGS.warmup_minutes:g} min, tolerance '
        f'{FLAGS.tolerance_mb_per_min:g} MB/min; logdir {logdir}', flush=True)
  samples, rc, output = run_program(logdir)
  warmup_s = FLAGS.warmup_minutes * 60
  print('\n| node | RSS start (MB) | after warm-up (MB) | end (MB) | growth '
        'after warm-up (MB/min) | processes |')
  print('|---|---:|---:|---:|---:|---:|')
  failures = []
  for title, node_samples in sorted(samples.items()):
    life = node_memory.last_life(node_samples)
    warm = [mb for t, mb in life if t >= life[0][0] + warmup_s]
    slope = node_memory.growth(node_samples, warmup_s)
    processes = len({pid for _, pid, _ in node_samples})
    print(f'| {title} | {life[0][1]:.0f} | '
          f'{warm[0] if warm else float("nan"):.0f} | {life[-1][1]:.0f} | '
          f'{"-" if slope is None else f"{slope:+.2f}"} | {processes} |')
    if slope is None:
      failures.append(f'{title}: too few samples after the warm-up')
    elif slope > FLAGS.tolerance_mb_per_min:
      failures.append(f'{title} grew {slope:+.2f} MB/min > '
                      f'{FLAGS.tolerance_mb_per_min:g}')
    if processes > 1:
      failures.append(f'{title} was restarted ({processes} processes)')
  if not samples:
    failures.append('no node was ever sampled')
  if rc != 0:
    failures.append(f'the program exited {rc}:\n{output[-3000:]}')
  if failures:
    print('\nsoak: FAILED: ' + '; '.join(failures), flush=True)
    return 1
  print(f'\nsoak: passed: every node within '
        f'{FLAGS.tolerance_mb_per_min:g} MB/min after the warm-up.')
  return 0


if __name__ == '__main__':
  app.run(lambda argv: sys.exit(main(argv)))
