"""Fault benchmark: the default program under kill -9, beside an unfaulted run.

One invocation, two runs of `programs/impala_lp.py` (local_mp, default
`cartpole` config with its evaluator) with the same step budget, one after
the other:
  - `faulted`: an actor killed with SIGKILL every `--actor_kill_every_s`
    (alternating actors), the learner killed once at `--learner_kill_at_s`
    and the replay node once at `--replay_kill_at_s`;
  - `unfaulted`: the same run, left alone.
Every node's resident memory is sampled every `--sample_every_s` (through
the supervisor's `<logdir>/status/nodes.json`). Prints the git commit, the
settings and Markdown tables: per run, wall time, exit status, restarts,
environment steps, the trajectory balance from the counter's final totals
(produced / learned from / left in the queue at the end / unaccounted =
produced - learned - left: positive when trajectories were lost, negative when
a replay restored from its checkpoint served some twice), learner-step
continuity at the learner's restart, final evaluator return; per node, its
resident memory at the start and end of its last life and the growth in
MB/min after a warm-up.

  python benchmarks/faults.py [--max_actor_steps=2400000] [--seed=0]
"""

import ast
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import node_memory  # pylint: disable=g-import-not-at-top
import program_runs
import provenance

flags.DEFINE_integer('max_actor_steps', 2_400_000,
                     'Budget of each run (about 20 min on 2 cores).')
flags.DEFINE_integer('seed', 0, 'Seed of both runs.')
flags.DEFINE_float('actor_kill_every_s', 60., 'Seconds between actor kills.')
flags.DEFINE_float('learner_kill_at_s', 300., 'When the learner is killed.')
flags.DEFINE_float('replay_kill_at_s', 600., 'When the replay is killed.')
flags.DEFINE_float('sample_every_s', 30., 'Memory sampling period.')
flags.DEFINE_float('warmup_s', 120., 'Memory growth is measured after this.')
flags.DEFINE_list('program_flags', ['--config.checkpoint_period_minutes=1'],
                  'Extra flags for both runs.')
FLAGS = flags.FLAGS


def _rows(logdir, label):
  path = os.path.join(logdir, 'logs', label, 'logs.csv')
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return list(csv.DictReader(f))


def run(name, faulted):
  logdir = tempfile.mkdtemp(prefix=f'impala_faults_{name}_')
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
         f'--seed={FLAGS.seed}', f'--logdir={logdir}',
         f'--max_actor_steps={FLAGS.max_actor_steps}',
         # The nodes' lines in program.log: summarize() reads them there.
         '--verbose'] + list(FLAGS.program_flags)
  if faulted:
    # Two actors killed in turn every minute: more than the default 3 per
    # 10 minutes each.
    cmd.append('--restarts=actor=20/600')
  out_path = os.path.join(logdir, 'program.log')
  memory = {}  # title -> [(t, pid, MB)]
  kills = []  # (t, title, learner step at the kill)
  start = time.time()
  next_sample = 0.
  next_actor_kill = FLAGS.actor_kill_every_s
  pending = {'learner/0': FLAGS.learner_kill_at_s,
             'replay/0': FLAGS.replay_kill_at_s} if faulted else {}
  actor_turn = 0
  with open(out_path, 'w') as out:
    proc = program_runs.popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    while proc.poll() is None:
      t = time.time() - start
      nodes = node_memory.nodes(logdir)
      if t >= next_sample:
        next_sample += FLAGS.sample_every_s
        node_memory.sample(logdir, t, memory)
      victims = []
      if faulted and t >= next_actor_kill:
        next_actor_kill += FLAGS.actor_kill_every_s
        victims.append(f'actor/{actor_turn % 2}')
        actor_turn += 1
      for title, at in list(pending.items()):
        if t >= at:
          victims.append(title)
          del pending[title]
      for title in victims:
        if title in nodes:
          learner = _rows(logdir, 'learner')
          step = float(learner[-1]['learner_steps']) if learner else 0.
          try:
            os.kill(nodes[title]['pid'], signal.SIGKILL)
            kills.append((t, title, step))
          except ProcessLookupError:
            pass
      time.sleep(1.)
  wall = time.time() - start
  with open(out_path, errors='replace') as f:
    output = f.read()
  return dict(name=name, logdir=logdir, rc=proc.returncode, wall=wall,
              output=output, memory=memory, kills=kills)


def summarize(result):
  logdir, output = result['logdir'], result['output']
  learner = _rows(logdir, 'learner')
  evaluator = _rows(logdir, 'evaluator')
  last = learner[-1] if learner else {}
  env_steps = max([float(r['actor_steps']) for r in learner + evaluator
                   if r.get('actor_steps')] or [0.])
  # The counter's final totals are not rolled back by a learner restart;
  # every learner step took num_online trajectories from the queue, and what
  # the queue still held at the end was never going to be learned from.
  from acme_impala.agent import presets  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import types  # pylint: disable=g-import-not-at-top
  config = presets.get_config('cartpole')
  totals = re.findall(r'counter: final counts (\{[^}]*\})', output)
  counts = ast.literal_eval(totals[-1]) if totals else {}
  ends = re.findall(r'sizes when it ended: (\{[^}]*\})', output)
  left = ast.literal_eval(ends[-1]).get(types.QUEUE_TABLE, 0) if ends else 0
  # Items that died with a killed replay server, as its next life counted.
  lost = sum(int(n) for found in re.findall(
      r'were lost with it: \{([^}]*)\}', output)
             for table, n in re.findall(r"'(\w+)': (-?\d+)", found)
             if table == types.QUEUE_TABLE)
  produced = counts.get('actor_steps', env_steps) / config.unroll_length
  learned = counts.get('learner_steps', 0) * config.num_online
  summary = re.findall(r'^impala: all nodes stopped; (restarts: [^\n]*?); '
                       r'exiting', output, re.M)
  starts = [int(s) for s in re.findall(
      r'learner: starting at learner step (\d+)', output)]
  learner_kills = [k for k in result['kills'] if k[1] == 'learner/0']
  continuity = '-'
  if learner_kills and len(starts) > 1:
    continuity = (f'{learner_kills[0][2]:.0f} at the kill -> restarted at '
                  f'{starts[1]}')
  returns = [float(r['episode_return']) for r in evaluator]
  final = (f'{np.mean(returns[-10:]):.1f}' if returns else '-')
  return dict(
      wall=f'{result["wall"] / 60:.1f} min', rc=result['rc'],
      kills=len(result['kills']),
      restarts=summary[-1] if summary else 'no summary line',
      env_steps=f'{env_steps:,.0f}',
      balance=(f'{produced:,.0f} / {learned:,.0f} / {left:,.0f} / '
               f'{produced - learned - left:+,.0f} / {lost:,}' if counts else
               'no final counts logged'),
      continuity=continuity, final=final,
      learner_steps=last.get('learner_steps', '-'))


def memory_rows(result):
  rows = []
  for title, samples in sorted(result['memory'].items()):
    life = node_memory.last_life(samples)
    slope = node_memory.growth(samples, FLAGS.warmup_s)
    rows.append((result['name'], title, len(set(p for _, p, _ in samples)),
                 f'{life[0][1]:.0f}', f'{life[-1][1]:.0f}',
                 f'{(life[-1][0] - life[0][0]) / 60:.1f}',
                 '-' if slope is None else f'{slope:+.2f}'))
  return rows


def main(argv):
  del argv
  commit = provenance.git_commit()
  print(f'faults.py at commit {commit} '
        f'on {provenance.cpu()}: '
        f'max_actor_steps='
        f'{FLAGS.max_actor_steps} seed={FLAGS.seed} actor kill every '
        f'{FLAGS.actor_kill_every_s:.0f} s, learner kill at '
        f'{FLAGS.learner_kill_at_s:.0f} s, replay kill at '
        f'{FLAGS.replay_kill_at_s:.0f} s, program flags '
        f'{" ".join(FLAGS.program_flags)}', flush=True)
  results = [run('faulted', True), run('unfaulted', False)]
  # Kept so that the tables can be printed again from the logdirs.
  for result in results:
    with open(os.path.join(result['logdir'], 'faults_result.json'), 'w') as f:
      json.dump(dict({k: v for k, v in result.items() if k != 'output'},
                     commit=commit, cpu=provenance.cpu()), f)
  print('\n| run | wall time | exit | kills | restarts (launcher summary) | '
        'env steps | trajectories produced / learned / left / unaccounted / '
        'counted lost with the replay | '
        'learner step at its '
        'restart | final learner step | final evaluator return (last 10) |')
  print('|---|---|---:|---:|---|---:|---:|---|---:|---:|')
  for result in results:
    s = summarize(result)
    print(f'| {result["name"]} | {s["wall"]} | {s["rc"]} | {s["kills"]} | '
          f'{s["restarts"]} | {s["env_steps"]} | {s["balance"]} | '
          f'{s["continuity"]} | {s["learner_steps"]} | {s["final"]} |')
  print('\n| run | node | processes | RSS start of last life (MB) | RSS end '
        '(MB) | last life (min) | growth after warm-up (MB/min) |')
  print('|---|---|---:|---:|---:|---:|---:|')
  for result in results:
    for row in memory_rows(result):
      print('| ' + ' | '.join(str(x) for x in row) + ' |')
  for result in results:
    print(f'\n{result["name"]}: logs in {result["logdir"]}')
  return 0 if all(r['rc'] == 0 for r in results) else 1


if __name__ == '__main__':
  app.run(main)
