"""A benchmark's program run, done once: a finished run leaves
`benchmark_run.json` in its logdir and is not run again, so an interrupted
benchmark resumes where it stopped (`benchmarks/minatar.py`,
`benchmarks/multitask.py`)."""

import json
import os
import subprocess
import time

import provenance

DONE = 'benchmark_run.json'


def run_once(label: str, cmd, logdir: str, **record) -> dict:
  """Runs `cmd` (whose logdir is `logdir`) to its end, or returns the record
  of an earlier finished run there. `label` names the run in messages
  ('minatar.py: Breakout seed 0'); `record` is written with the exit
  status, wall seconds, launch commit and CPU. Exits naming the run when it
  fails or when `logdir` holds an unfinished run."""
  done = os.path.join(logdir, DONE)
  if os.path.exists(done):
    with open(done) as f:
      return json.load(f)
  if os.path.exists(logdir):
    raise SystemExit(f'{logdir} holds an unfinished run; remove it (or '
                     'resume it by hand with --restore) first.')
  print(f'{label}: {" ".join(cmd[1:])}', flush=True)
  # The code the run starts with: the tree may change while it runs.
  commit = provenance.git_commit()
  start = time.time()
  code = subprocess.call(cmd)
  record = dict(record, exit=code, wall_seconds=time.time() - start,
                commit=commit, cpu=provenance.cpu())
  if code != 0:
    raise SystemExit(f'{label} exited {code}; see {logdir}/nodes/.')
  with open(done, 'w') as f:
    json.dump(record, f, indent=1)
  return record
