"""A local run's servers are reachable on loopback only (issue 38 item 1):
acme_impala/launch/isolation.py, and a real program's node ports probed
from outside while it runs."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
import reverb

from acme_impala.launch import isolation

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MODULE = os.path.join(ROOT, 'acme_impala', 'launch', 'isolation.py')
# Isolates itself with the module loaded from its file (stdlib only, so any
# Python 3 runs it), then reports its namespace, interfaces and whether a
# server on [::] is reachable on localhost.
_PROBE = f'''
import importlib.util, json, os, socket
spec = importlib.util.spec_from_file_location('isolation', {_MODULE!r})
isolation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(isolation)
before = os.readlink('/proc/self/ns/net')
isolation.isolate()
server = socket.socket(socket.AF_INET6)
server.bind(('::', 0))
server.listen()
socket.create_connection(('localhost', server.getsockname()[1]), timeout=5)
print(json.dumps(dict(before=before, after=os.readlink('/proc/self/ns/net'),
                      interfaces=[n for _, n in socket.if_nameindex()],
                      uid=os.getuid())))
'''


def _probe(argv):
  proc = subprocess.run(argv + ['-c', _PROBE], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=60)
  assert proc.returncode == 0, proc.stdout
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_isolate_leaves_the_process_only_loopback():
  got = _probe([sys.executable])
  assert got['after'] != got['before']
  assert got['interfaces'] == ['lo']  # And a server on [::] answered on it.


def test_an_unprivileged_user_gets_a_namespace_of_its_own():
  """Without root the module makes a user namespace too, mapping the user
  to itself (files keep their owner)."""
  if os.geteuid() != 0:
    argv = [sys.executable]
  else:  # As root, run the probe as nobody with a Python nobody can read.
    python = shutil.which('python3', path='/usr/bin:/bin')
    if not (shutil.which('setpriv') and python):
      pytest.skip('needs setpriv and a system python3 to run as nobody')
    argv = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',
            python]
  got = _probe(argv)
  assert got['after'] != got['before']
  assert got['interfaces'] == ['lo']
  assert got['uid'] == (65534 if os.geteuid() == 0 else os.getuid())


@pytest.mark.parametrize('argv,exposed', [
    ([], False), (['--expose_ports'], True), (['--expose_ports=true'], True),
    (['--expose_ports=false'], False), (['--noexpose_ports'], False),
    (['--expose_ports', '--noexpose_ports'], False),
    (['--', '--expose_ports'], False)])
def test_wants_exposure_reads_absl_spellings(argv, exposed):
  assert isolation.wants_exposure(['prog'] + argv) is exposed


def test_a_kernel_without_namespaces_stops_the_program_with_one_line(
    monkeypatch, capsys):
  monkeypatch.setattr(isolation, '_state', None)

  def refuse(flags):
    raise PermissionError(1, 'Operation not permitted')
  monkeypatch.setattr(isolation, '_unshare', refuse)
  monkeypatch.setattr(os, 'geteuid', lambda: 1000)
  with pytest.raises(SystemExit) as stop:
    isolation.isolate_unless_exposed('impala_lp', ['impala_lp'])
  assert stop.value.code == 2
  err = capsys.readouterr().err
  assert len(err.strip().splitlines()) == 1, err
  assert err.startswith('impala_lp: error: cannot give the run a network '
                        'namespace of its own (Operation not permitted')
  assert '--expose_ports' in err
  # Asked for, exposure needs no namespace; help needs nothing.
  isolation.isolate_unless_exposed('impala_lp', ['impala_lp', '--expose_ports'])
  assert isolation.describe().startswith('ports: every interface')
  isolation.isolate_unless_exposed('impala_lp', ['impala_lp', '--help'])


def test_the_program_accepts_expose_ports(tmp_path):
  """The flag is the program's own: a run asked with it gets past the
  isolation step to the flags' checks (a bad budget, refused there)."""
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'programs', 'impala_lp.py'),
       '--expose_ports', '--max_actor_steps=-1',
       f'--logdir={tmp_path / "run"}'], cwd=ROOT, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, timeout=120)
  assert proc.returncode == 2, proc.stdout
  assert 'max_actor_steps' in proc.stdout and 'expose' not in proc.stdout


def _outside_addresses():
  """This machine's addresses other than loopback, as the host sees them."""
  found = []
  for addresses in psutil.net_if_addrs().values():
    for a in addresses:
      if a.family in (socket.AF_INET, socket.AF_INET6):
        host = a.address.split('%')[0]
        if not (host.startswith('127.') or host == '::1' or
                host.startswith('fe80')):
          found.append(host)
  return found


def _listening_ports(pid):
  """TCP ports process `pid` listens on, read in its own namespace."""
  inodes = set()
  for fd in os.listdir(f'/proc/{pid}/fd'):
    try:
      target = os.readlink(f'/proc/{pid}/fd/{fd}')
    except OSError:
      continue
    if target.startswith('socket:['):
      inodes.add(target[8:-1])
  ports = set()
  for table in ('tcp', 'tcp6'):
    with open(f'/proc/{pid}/net/{table}') as f:
      for line in f.readlines()[1:]:
        fields = line.split()
        if fields[3] == '0A' and fields[9] in inodes:  # LISTEN, this pid's.
          ports.add(int(fields[1].rsplit(':', 1)[1], 16))
  return ports


def _reachable(host, port):
  try:
    with socket.create_connection((host, port), timeout=2):
      return True
  except OSError:
    return False


def test_a_running_programs_ports_are_unreachable_off_loopback(tmp_path):
  hosts = _outside_addresses()
  assert hosts, 'this machine has no address but loopback to probe'
  # The probe finds a server of this (unisolated) process on [::] ...
  server = reverb.Server(tables=[reverb.Table.queue('probe', 1)])
  try:
    assert all(_reachable(h, server.port) for h in hosts), hosts
  finally:
    server.stop()
  # ... and none of a running program's.
  logdir = str(tmp_path / 'run')
  out = open(tmp_path / 'out.txt', 'w')
  proc = subprocess.Popen(
      [sys.executable, os.path.join(ROOT, 'programs', 'impala_lp.py'),
       f'--logdir={logdir}', '--num_actors=1', '--max_actor_steps=10000000',
       '--config.envs_per_actor=2'], stdout=out, stderr=subprocess.STDOUT,
      cwd=ROOT, start_new_session=True)
  try:
    ports, deadline = {}, time.time() + 120
    while time.time() < deadline and len(ports) < 5:
      assert proc.poll() is None, open(tmp_path / 'out.txt').read()[-3000:]
      try:
        with open(os.path.join(logdir, 'status', 'nodes.json')) as f:
          nodes = json.load(f)
        ports = {title: _listening_ports(node['pid'])
                 for title, node in nodes.items() if node['pid']}
        ports = {t: p for t, p in ports.items() if p}
      except (OSError, ValueError, KeyError):
        pass
      time.sleep(0.5)
    # replay, counter, learner, actor, coordinator and evaluator serve.
    assert len(ports) >= 5, (ports, open(tmp_path / 'out.txt').read()[-3000:])
    exposed = [(title, host, port) for title, node_ports in ports.items()
               for port in node_ports for host in hosts
               if _reachable(host, port)]
    assert not exposed, exposed
    ours = os.readlink('/proc/self/ns/net')
    assert all(os.readlink(f'/proc/{node["pid"]}/ns/net') != ours
               for node in nodes.values() if node['pid'])
  finally:
    os.killpg(proc.pid, signal.SIGINT)
    try:
      proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
    out.close()
  output = open(tmp_path / 'out.txt').read()
  assert 'impala_lp: ports: loopback only' in output, output[-3000:]
