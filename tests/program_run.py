"""A program run in its own session that a test follows and kills nodes of:
its output goes to a file, its node processes are found through the
supervisor's `<logdir>/status/nodes.json`."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from acme_impala.launch import supervisor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Run:
  """A running program whose output goes to a file the test can follow."""

  def __init__(self, tmp_path, args, base_args, program='impala_lp.py'):
    self.logdir = str(tmp_path / 'run')
    self.out_path = str(tmp_path / 'out.txt')
    self._out = open(self.out_path, 'w')
    # --verbose: the tests follow the nodes' own lines in the terminal.
    self.proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, 'programs', program),
         f'--logdir={self.logdir}', '--verbose'] + base_args + args,
        stdout=self._out, stderr=subprocess.STDOUT, cwd=ROOT,
        start_new_session=True)

  def output(self) -> str:
    with open(self.out_path, errors='replace') as f:
      return f.read()

  def nodes(self):
    try:
      with open(os.path.join(self.logdir, 'status', supervisor.NODES_FILE)) as f:
        return json.load(f)
    except (OSError, ValueError):
      return {}

  def rows(self, label):
    try:
      with open(os.path.join(self.logdir, 'logs', label, 'logs.csv')) as f:
        return list(csv.DictReader(f))
    except OSError:
      return []

  def learner_step(self) -> float:
    rows = self.rows('learner')
    return float(rows[-1]['learner_steps']) if rows else 0.

  def wait(self, condition, what, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
      if self.proc.poll() is not None:
        pytest.fail(f'program ended (status {self.proc.returncode}) while '
                    f'waiting for {what}:\n{self.output()[-5000:]}')
      value = condition()
      if value:
        return value
      time.sleep(0.5)
    pytest.fail(f'timed out waiting for {what}:\n{self.output()[-5000:]}')

  def kill(self, title):
    pid = self.nodes()[title]['pid']
    os.kill(pid, signal.SIGKILL)
    return pid

  def restarted(self, title, pid):
    node = self.nodes().get(title, {})
    return node.get('pid') not in (None, pid) and node['pid']

  def finish(self, timeout=120):
    try:
      self.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      os.killpg(self.proc.pid, signal.SIGKILL)
      self.proc.wait()
      pytest.fail(f'program did not end:\n{self.output()[-5000:]}')
    finally:
      self._out.close()
    return self.proc.returncode

  def kill_if_running(self) -> None:
    """SIGKILL to the run's whole session if the launcher still runs: what
    every test's `finally` does, so that a failing test leaves nothing."""
    if self.proc.poll() is None:
      os.killpg(self.proc.pid, signal.SIGKILL)
      self.proc.wait()

  def leftovers(self):
    time.sleep(1)
    left = []
    for p in psutil.process_iter(['pid', 'cmdline']):
      try:
        if os.getsid(p.info['pid']) == self.proc.pid and (
            p.status() != psutil.STATUS_ZOMBIE):
          left.append(p.info)
      except (ProcessLookupError, psutil.Error, PermissionError):
        pass
    return left
