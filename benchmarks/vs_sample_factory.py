"""The default program against Sample Factory 2.1.1 on CartPole-v1, side by side.

Runs, one after the other on this machine, `--repeats` times each and
alternating:
  - Sample Factory's APPO with an RNN (its CartPole example through
    `benchmarks/sf_cartpole.py`, 2 rollout workers x 20 environments: the
    setting its users pick for speed on one machine), with V-trace as IMPALA
    and with its defaults (GAE), in its own Python 3.11 venv with the CPU
    build of PyTorch (`bash benchmarks/setup_sample_factory.sh` makes
    `.venv-sf`);
  - our default program, `programs/impala_lp.py --lp_launch_type=local_mp`
    (default flags and config).
Each run lasts `--seconds` of wall time from its launch and is then stopped
with SIGINT (a user's Ctrl-C). From each run's output, timestamped as it
arrives, the benchmark takes:
  - env steps/s: environment steps counted by the run (Sample Factory's
    "Total num frames", our counter's `actor_steps`) over the window from
    `--warmup_s` after launch to the run's last report;
  - seconds from launch to the run's first average return >= `--target`:
    Sample Factory's "Avg episode reward" (a trailing average over its last
    100 training episodes) and our evaluator's trailing mean over 10
    evaluation episodes, as the issue compares them.
Prints a Markdown table with the git commit, the settings and our/their
ratios, and writes the raw per-run rows as JSON with `--json_out`.

  bash benchmarks/setup_sample_factory.sh
  python benchmarks/vs_sample_factory.py [--repeats=2] [--seconds=150]
"""

import csv
import json
import os
import re
import signal
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
import psutil

flags.DEFINE_integer('repeats', 2, 'Runs of each system (alternating).')
flags.DEFINE_float('seconds', 150., 'Wall time of each run from its launch.')
flags.DEFINE_float('warmup_s', 30., 'Start of the env steps/s window.')
flags.DEFINE_float('target', 475., 'Average return to time.')
flags.DEFINE_integer('stop_after_reports', 0,
                     'End a run once it has reported this many different '
                     'env step counts from --warmup_s on (0: every run lasts '
                     '--seconds). For smoke runs: the rate needs 2.',
                     lower_bound=0)
flags.DEFINE_string('sf_python', os.path.join(_ROOT, '.venv-sf', 'bin',
                                              'python'),
                    "Python of Sample Factory's venv.")
flags.DEFINE_integer('sf_workers', 2, 'Sample Factory rollout workers.')
flags.DEFINE_list('sf_variants', ['vtrace', 'gae'],
                  'Sample Factory settings: vtrace (APPO with V-trace, as '
                  'IMPALA) and gae (its defaults).')
flags.DEFINE_integer('sf_envs_per_worker', 20,
                     'Sample Factory environments per worker.')
flags.DEFINE_list('program_flags', [], 'Extra flags for our program.')
flags.DEFINE_string('json_out', None, 'Write the per-run rows here.')
flags.DEFINE_bool('require_idle', True, 'Refuse to start while processes of '
                  'another run (ours or Sample Factory) are alive; false '
                  'for a check that the script runs, whose rates will be '
                  'skewed.')
FLAGS = flags.FLAGS

_SF_FRAMES = re.compile(r'Total num frames: (\d+)')
_SF_REWARD = re.compile(r"Avg episode reward: \[\(0, '(-?[\d.]+)'\)\]")
_EVAL_WINDOW = 10


# Sample Factory's settings compared: V-trace as the issue asks (2.1.1
# refuses its default return normalisation with V-trace), and its own
# defaults for an RNN (GAE, normalised returns).
_SF_VARIANTS = {
    'vtrace': ['--with_vtrace=True', '--normalize_returns=False'],
    'gae': ['--with_vtrace=False'],
}


def sf_command(train_dir: str, variant: str):
  return [FLAGS.sf_python, os.path.join(_ROOT, 'benchmarks', 'sf_cartpole.py'),
          '--env=CartPole-v1', '--algo=APPO', '--use_rnn=True'] + _SF_VARIANTS[
              variant] + ['--device=cpu',
          f'--num_workers={FLAGS.sf_workers}',
          f'--num_envs_per_worker={FLAGS.sf_envs_per_worker}',
          f'--train_dir={train_dir}', '--experiment=cartpole',
          '--save_every_sec=600', '--train_for_env_steps=100000000']


def our_command(logdir: str):
  return [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
          '--lp_launch_type=local_mp', f'--logdir={logdir}',
          '--max_actor_steps=100000000',
          # The nodes' lines in stdout: the evaluator's returns are read there.
          '--verbose'] + list(FLAGS.program_flags)


def _stop(proc: subprocess.Popen, group: bool) -> object:
  """SIGINT (Ctrl-C) to the run's main process, or to its process group as
  a terminal's Ctrl-C does (Sample Factory's main process alone does not
  stop its workers); SIGKILL to the group after 30 s."""
  try:
    if group:
      os.killpg(proc.pid, signal.SIGINT)
    else:
      proc.send_signal(signal.SIGINT)
    return proc.wait(timeout=30)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return "killed after 30 s"
  except ProcessLookupError:
    return proc.wait()


def _kill_session(sid: int) -> int:
  """SIGKILLs what is left in session `sid` (a run's worker processes must
  not eat the next run's CPU); returns how many there were."""
  left = []
  for process in psutil.process_iter():
    try:
      if os.getsid(process.pid) == sid and process.status() != (
          psutil.STATUS_ZOMBIE):
        left.append(process)
    except (OSError, psutil.Error):
      pass
  for process in left:
    try:
      process.kill()
    except psutil.Error:
      pass
  psutil.wait_procs(left, timeout=10)
  return len(left)


def _busy_processes() -> list:
  """Processes of an earlier run still alive (they would skew the rates)."""
  return [p.info['cmdline'][:3] for p in psutil.process_iter(['cmdline'])
          if p.info['cmdline'] and any(
              ('.venv-sf' in part or 'impala_lp.py' in part)
              for part in p.info['cmdline'][:3]) and p.pid != os.getpid()]


def _run(cmd, poll, stop_group: bool = False) -> dict:
  """Runs `cmd` for FLAGS.seconds; `poll(line or None, t)` is called with
  each output line and every 0.5 s, and returns (frames, return) reports."""
  workdir = tempfile.mkdtemp(prefix='vs_sf_')
  log_path = os.path.join(workdir, 'output.log')
  frames, returns = [], []  # (t, value)
  start = time.perf_counter()
  with open(log_path, 'w') as log:
    proc = program_runs.popen(cmd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              errors='replace', start_new_session=True,
                              cwd=workdir)
    lines = []
    lock = threading.Lock()

    def read():
      for line in proc.stdout:
        log.write(line)
        with lock:
          lines.append((time.perf_counter() - start, line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
      while time.perf_counter() - start < FLAGS.seconds:
        if proc.poll() is not None:
          break
        time.sleep(0.5)
        with lock:
          batch, lines[:] = list(lines), []
        t = time.perf_counter() - start
        for t_line, line in batch:
          poll(line, t_line, frames, returns)
        poll(None, t, frames, returns)
        if FLAGS.stop_after_reports and len(
            {n for _, n in window(frames, FLAGS.warmup_s)}) >= (
                FLAGS.stop_after_reports):
          break
      early = proc.poll()
      code = (_stop(proc, stop_group) if early is None
              else f'ended early ({early})')
    finally:
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
      left = _kill_session(proc.pid)
    reader.join(timeout=5)
    if left:
      code = f'{code}; {left} process(es) left in its session, killed'
    log.write(f'[vs_sample_factory] exit: {code}\n')
  return dict(frames=frames, returns=returns, exit=code, log=log_path)


def run_sample_factory(variant: str) -> dict:
  def poll(line, t, frames, returns):
    if line is None:
      return
    match = _SF_FRAMES.search(line)
    if match:
      frames.append((t, int(match.group(1))))
    match = _SF_REWARD.search(line)
    if match:
      returns.append((t, float(match.group(1))))
  train_dir = os.path.join(tempfile.mkdtemp(prefix='vs_sf_train_'), 'train')
  return _run(sf_command(train_dir, variant), poll, stop_group=True)


def run_ours() -> dict:
  logdir = tempfile.mkdtemp(prefix='vs_sf_ours_')
  path = os.path.join(logdir, 'logs', 'evaluator', 'logs.csv')
  seen = [0]

  def poll(line, t, frames, returns):
    if line is not None or not os.path.exists(path):
      return
    with open(path) as f:
      rows = list(csv.DictReader(f))
    for i in range(seen[0], len(rows)):
      try:
        steps = int(float(rows[i]['actor_steps']))
      except (KeyError, TypeError, ValueError):
        continue
      frames.append((t, steps))
      window = [float(r['episode_return'])
                for r in rows[max(0, i + 1 - _EVAL_WINDOW):i + 1]]
      if len(window) == _EVAL_WINDOW:
        returns.append((t, statistics.fmean(window)))
    seen[0] = len(rows)
  return _run(our_command(logdir), poll)


def window(frames, warmup_s: float):
  """[(t, env steps)] from `warmup_s` on, one per report time (its last
  count: rows read in one poll share its time)."""
  return list({t: n for t, n in frames if t >= warmup_s}.items())


def window_rate(frames, warmup_s: float):
  """Env steps/s from the first to the last report of `window`; None
  without two different counts (a run that reports before its actors step,
  as ours' evaluator does on a loaded machine, has no rate: not 0)."""
  reports = window(frames, warmup_s)
  if len(reports) < 2 or reports[-1][1] <= reports[0][1]:
    return None
  (t0, n0), (t1, n1) = reports[0], reports[-1]
  return (n1 - n0) / (t1 - t0)


def summarise(run: dict) -> dict:
  rate = window_rate(run['frames'], FLAGS.warmup_s)
  hit = next((t for t, r in run['returns'] if r >= FLAGS.target), None)
  best = max((r for _, r in run['returns']), default=float('nan'))
  last_frames = run['frames'][-1][1] if run['frames'] else 0
  return dict(steps_per_s=rate, seconds_to_target=hit, best_return=best,
              env_steps=last_frames, exit=run['exit'], log=run['log'])


def _fmt(x, spec):
  return 'n/a' if x is None else format(x, spec)


def main(argv):
  del argv
  program_runs.exit_on_sigterm()  # Its `finally` blocks stop what it starts.
  if not os.path.exists(FLAGS.sf_python):
    raise SystemExit(f'--sf_python={FLAGS.sf_python!r} does not exist: run '
                     '`bash benchmarks/setup_sample_factory.sh` first.')
  busy = _busy_processes() if FLAGS.require_idle else []
  if busy:
    raise SystemExit(f'processes of an earlier run are still alive and would '
                     f'share the cores: {busy}')
  commit = provenance.git_commit()
  length = f'{FLAGS.seconds:g} s each'
  if FLAGS.stop_after_reports:
    length += f' or {FLAGS.stop_after_reports} reports'
  print(f'vs_sample_factory.py at commit {commit} '
        f'on {provenance.cpu()}; '
        f'CartPole-v1; '
        f'{FLAGS.repeats} run(s) of each, alternating, {length}; '
        f'env steps/s from {FLAGS.warmup_s:g} s to the last report; '
        f'target average return {FLAGS.target:g}; {os.cpu_count()} CPU(s).')
  for variant in FLAGS.sf_variants:
    print(f'Sample Factory 2.1.1 ({variant}): ' + ' '.join(
        sf_command('TMP', variant)[1:]))
  print('ours: ' + ' '.join(our_command('TMP')[1:]), flush=True)
  rows = []
  for repeat in range(FLAGS.repeats):
    systems = [(f'Sample Factory ({v})', lambda v=v: run_sample_factory(v))
               for v in FLAGS.sf_variants] + [('acme_impala', run_ours)]
    for name, fn in systems:
      summary = summarise(fn())
      summary.update(system=name, repeat=repeat)
      rows.append(summary)
      print(f"  {name} run {repeat}: {_fmt(summary['steps_per_s'], '.0f')} "
            f"env steps/s, {summary['env_steps']:,} env steps, target at "
            f"{_fmt(summary['seconds_to_target'], '.0f')} s, best "
            f"{summary['best_return']:.1f}, exit {summary['exit']} "
            f"({summary['log']})", flush=True)
  print('\n| system | run | env steps/s | s from launch to return >= '
        f'{FLAGS.target:g} | best average return | exit |')
  print('|---|---:|---:|---:|---:|---|')
  for r in rows:
    print(f"| {r['system']} | {r['repeat']} | "
          f"{_fmt(r['steps_per_s'], ',.0f')} | "
          f"{_fmt(r['seconds_to_target'], '.0f')} | "
          f"{r['best_return']:.1f} | {r['exit']} |")

  def median(system, key):
    values = [r[key] for r in rows if r['system'] == system
              and r[key] is not None]
    return statistics.median(values) if values else None

  ours_rate = median('acme_impala', 'steps_per_s')
  ours_t = median('acme_impala', 'seconds_to_target')
  print()
  for variant in FLAGS.sf_variants:
    name = f'Sample Factory ({variant})'
    sf_rate, sf_t = median(name, 'steps_per_s'), median(name, 'seconds_to_target')
    ratio = ours_rate / sf_rate if ours_rate and sf_rate else None
    print(f'Medians vs {name}: env steps/s ours {_fmt(ours_rate, ",.0f")} vs '
          f'{_fmt(sf_rate, ",.0f")} (ratio {_fmt(ratio, ".2f")}x); to return '
          f'{FLAGS.target:g}: ours {_fmt(ours_t, ".0f")} s vs '
          f'{_fmt(sf_t, ".0f")} s.')
  if FLAGS.json_out:
    with open(FLAGS.json_out, 'w') as f:
      json.dump(dict(commit=commit, cpu=provenance.cpu(), rows=rows), f,
                indent=1)
  unmeasured = [f"{r['system']} run {r['repeat']} ({r['log']})"
                for r in rows if r['steps_per_s'] is None]
  if unmeasured:
    # Its table row says n/a: no two different step counts reported after
    # the warm-up.
    raise SystemExit('vs_sample_factory.py: no env steps/s measured for '
                     + ', '.join(unmeasured) + f'; --seconds={FLAGS.seconds:g}'
                     ' may be too short for it to start')


if __name__ == '__main__':
  app.run(main)
