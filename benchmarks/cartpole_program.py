"""Learning benchmark of the default distributed program on CartPole-v1.

Launches `programs/impala_lp.py` (local_mp, default `cartpole` config, with
its evaluator), follows the evaluator's CSV, and as soon as the average
return over 20 consecutive evaluation episodes reaches the target, records
the environment steps (the counter's `actor_steps` in that row) and the wall
time since launch, then stops the program with SIGINT, as a user's Ctrl-C
would, and checks that it exits 0. Prints a Markdown table.

  python benchmarks/cartpole_program.py [--seeds=0] [--target=450]
      [--max_actor_steps=N]  (default: the program's own default budget)
"""

import csv
import os
import signal
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import program_runs  # pylint: disable=g-import-not-at-top
import provenance  # pylint: disable=g-import-not-at-top

flags.DEFINE_list('seeds', ['0'], 'Seeds (one program run each).')
flags.DEFINE_float('target', 450., 'Target 20-episode evaluator average.')
flags.DEFINE_integer('max_actor_steps', None,
                     "Step budget per run; default: the program's default.")
flags.DEFINE_list('program_flags', [], 'Extra flags for the program.')
FLAGS = flags.FLAGS


def _evaluator_rows(path):
  if not os.path.exists(path):
    return []
  with open(path) as f:
    rows = []
    for row in csv.DictReader(f):
      try:
        rows.append((float(row['actor_steps']), float(row['episode_return'])))
      except (KeyError, TypeError, ValueError):
        continue
    return rows


def run_seed(seed):
  logdir = tempfile.mkdtemp(prefix='impala_cartpole_')
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
         '--lp_launch_type=local_mp', f'--seed={seed}', f'--logdir={logdir}']
  if FLAGS.max_actor_steps is not None:
    cmd.append(f'--max_actor_steps={FLAGS.max_actor_steps}')
  cmd += list(FLAGS.program_flags)
  log_path = os.path.join(logdir, 'program.log')
  csv_path = os.path.join(logdir, 'logs', 'evaluator', 'logs.csv')
  start = time.time()
  with open(log_path, 'w') as log:
    proc = program_runs.popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    reached, best, last_print = None, float('-inf'), start
    while proc.poll() is None:
      time.sleep(2.)
      rows = _evaluator_rows(csv_path)
      returns = np.array([r for _, r in rows])
      for i in range(20, len(returns) + 1):
        avg = returns[i - 20:i].mean()
        best = max(best, avg)
        if avg >= FLAGS.target:
          reached = (int(rows[i - 1][0]), time.time() - start)
          break
      if reached:
        proc.send_signal(signal.SIGINT)
        break
      if time.time() - last_print > 30:
        last_print = time.time()
        steps = int(rows[-1][0]) if rows else 0
        print(f'  seed {seed}: {time.time() - start:.0f} s, evaluator at '
              f'{steps} actor steps, best avg20 {best:.1f}', flush=True)
    try:
      code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
      proc.kill()
      code = 'killed after 120 s'
  return dict(seed=seed, reached=reached, best=best, exit=code,
              logdir=logdir, seconds=time.time() - start)


def main(argv):
  del argv
  commit = provenance.git_commit()
  budget = FLAGS.max_actor_steps or "the program's default"
  onednn = os.environ.get('TF_ENABLE_ONEDNN_OPTS', '1 (acme_impala default)')
  print(f'cartpole_program.py at commit {commit} '
        f'on {provenance.cpu()}: '
        f'programs/impala_lp.py with '
        f'default flags {" ".join(FLAGS.program_flags)}; seeds '
        f'{",".join(FLAGS.seeds)}, one after the other; budget {budget} env '
        f'steps; target: evaluator avg20 >= {FLAGS.target:g}; '
        f'TF_ENABLE_ONEDNN_OPTS={onednn}.', flush=True)
  results = [run_seed(int(s)) for s in FLAGS.seeds]
  print(f'\n| seed | env steps to evaluator avg20 >= {FLAGS.target:g} | '
        'wall time from launch | best avg20 | exit status |')
  print('|---|---:|---:|---:|---|')
  for r in results:
    if r['reached']:
      steps, secs = f"{r['reached'][0]:,}", r['reached'][1]
    else:
      steps, secs = 'not reached in budget', r['seconds']
    print(f"| {r['seed']} | {steps} | {secs / 60:.1f} min | "
          f"{r['best']:.1f} | {r['exit']} |")
  hits = sorted(r['reached'][0] for r in results if r['reached'])
  print(f'\n{len(hits)}/{len(results)} seeds reached {FLAGS.target:g}' +
        (f'; median env steps {int(np.median(hits)):,}' if hits else ''))
  failed = [r for r in results if r['exit'] != 0]
  if failed:
    print(f'Program runs that did not exit 0: {failed}')
    sys.exit(1)


if __name__ == '__main__':
  app.run(main)
