"""A few "hosts" on this machine: network namespaces on one bridge, with DNS.

For multi-host tests of the Kubernetes pod entry without a cluster. Each
pod gets its own network namespace and address in 198.18.0.0/24 (RFC 2544
benchmarking space: never a private or public network), joined by a veth
pair to a bridge in a "switch" namespace, where dnsmasq serves the pods'
names. Every pod's resolv.conf carries Kubernetes' search path and
`ndots:5`, so `<job>-<i>.<job>` resolves as in a cluster namespace. The root
namespace gets no address and no route. Everything made is removed by
`close()` (use the class as a context manager); needs root, `ip` and
`dnsmasq` (Debian `dnsmasq-base`).
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Dict, List, Optional, Sequence

SUBNET = '198.18.0'
DNS_IP = f'{SUBNET}.1'
NAMESPACE = 'impala'
SEARCH = (f'{NAMESPACE}.svc.cluster.local', 'svc.cluster.local',
          'cluster.local')


def available() -> Optional[str]:
  """None if this machine can run the cluster, else why not."""
  if os.geteuid() != 0:
    return 'needs root (network namespaces)'
  for tool in ("ip", "dnsmasq", "getent"):
    if shutil.which(tool) is None:
      return f'needs {tool!r} on PATH'
  return None


def _ip(*args: str) -> None:
  subprocess.run(['ip'] + list(args), check=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.PIPE, text=True)


class Cluster:
  """Pods as network namespaces; DNS by dnsmasq in the switch namespace."""

  def __init__(self):
    # Short unique names: interface names have at most 15 characters.
    self._tag = f'ai{os.getpid() % 100000}'
    self._switch = f'{self._tag}sw'
    self._namespaces: List[str] = []
    self._dirs: List[str] = []
    self._hosts: Dict[str, str] = {}  # FQDN -> address
    self._processes: List[subprocess.Popen] = []
    self._next = 10
    self._work = tempfile.mkdtemp(prefix='netns_cluster_')
    self._hosts_file = os.path.join(self._work, 'hosts')
    self._dnsmasq: Optional[subprocess.Popen] = None
    self._made_etc_netns = not os.path.exists('/etc/netns')
    try:
      self._make_switch()
    except BaseException:
      self.close()
      raise

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def _add_namespace(self, name: str) -> None:
    _ip('netns', 'add', name)
    self._namespaces.append(name)
    _ip('-n', name, 'link', 'set', 'lo', 'up')

  def _make_switch(self) -> None:
    self._add_namespace(self._switch)
    _ip('-n', self._switch, 'link', 'add', 'br0', 'type', 'bridge')
    _ip('-n', self._switch, 'addr', 'add', f'{DNS_IP}/24', 'dev', 'br0')
    _ip('-n', self._switch, 'link', 'set', 'br0', 'up')
    with open(self._hosts_file, 'w'):
      pass
    self._dnsmasq = subprocess.Popen(
        ['ip', 'netns', 'exec', self._switch, 'dnsmasq', '--keep-in-foreground',
         '--no-resolv', '--no-hosts', f'--addn-hosts={self._hosts_file}',
         f'--listen-address={DNS_IP}', '--bind-interfaces',
         '--domain-needed', '--local=/cluster.local/', '--local-ttl=1',
         '--pid-file=', '--user=root', '--log-facility=-'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Each add_pod sends SIGHUP, whose default action kills a dnsmasq that
    # has not yet installed its handler (SIGHUP 20 ms after its start killed
    # dnsmasq 2.90 on an idle machine), and without DNS every pod hangs on
    # names. A fixed 0.3 s wait was here; the multi-host pods test hung so
    # twice in a row once (cause not confirmed).
    deadline = time.monotonic() + 30
    while not self._dnsmasq_ready():
      if self._dnsmasq.poll() is not None:
        raise RuntimeError(f'dnsmasq exited with {self._dnsmasq.returncode}')
      if time.monotonic() > deadline:
        raise RuntimeError('dnsmasq did not start serving on '
                           f'{DNS_IP}:53 within 30 s')
      time.sleep(0.02)

  def _dnsmasq_ready(self) -> bool:
    """Whether dnsmasq (the process `ip netns exec` became) catches SIGHUP
    and has its UDP socket on DNS_IP:53."""
    proc = f'/proc/{self._dnsmasq.pid}'
    try:
      with open(f'{proc}/comm') as f:
        if f.read().strip() != 'dnsmasq':
          return False  # Still `ip`, before its exec.
      with open(f'{proc}/status') as f:
        caught = next(int(line.split()[1], 16) for line in f
                      if line.startswith('SigCgt:'))
      with open(f'{proc}/net/udp') as f:
        sockets = [line.split()[1] for line in f.readlines()[1:]]
    except (OSError, StopIteration):
      return False
    # /proc/net/udp: the address as a little-endian hex word, the port hex.
    address = ''.join(f'{int(b):02X}' for b in reversed(DNS_IP.split('.')))
    return bool(caught & (1 << (signal.SIGHUP - 1))) and (
        f'{address}:0035' in sockets)

  def add_pod(self, name: str, fqdn: str) -> str:
    """A namespace with its own address; `fqdn` resolves to it. Returns the
    namespace's name (for `start`). A name used before gets a new address,
    as a replacement pod does."""
    index = self._next
    self._next += 1
    if index > 250:
      raise RuntimeError('out of addresses in the /24')
    ns = f'{self._tag}p{index}'
    address = f'{SUBNET}.{index}'
    self._add_namespace(ns)
    outer, inner = f'{self._tag}v{index}', f'{self._tag}i{index}'
    _ip('link', 'add', outer, 'type', 'veth', 'peer', 'name', inner)
    try:
      _ip('link', 'set', inner, 'netns', ns)
      _ip('link', 'set', outer, 'netns', self._switch)
    except subprocess.CalledProcessError:
      subprocess.run(['ip', 'link', 'del', outer], check=False,
                     stderr=subprocess.DEVNULL)
      raise
    _ip('-n', self._switch, 'link', 'set', outer, 'master', 'br0')
    _ip('-n', self._switch, 'link', 'set', outer, 'up')
    _ip('-n', ns, 'link', 'set', inner, 'name', 'eth0')
    _ip('-n', ns, 'addr', 'add', f'{address}/24', 'dev', 'eth0')
    _ip('-n', ns, 'link', 'set', 'eth0', 'up')
    etc = f'/etc/netns/{ns}'
    os.makedirs(etc, exist_ok=True)
    self._dirs.append(etc)
    with open(os.path.join(etc, 'resolv.conf'), 'w') as f:
      f.write(f'nameserver {DNS_IP}\nsearch {" ".join(SEARCH)}\n'
              'options ndots:5\n')
    with open(os.path.join(etc, 'hosts'), 'w') as f:
      f.write(f'127.0.0.1 localhost\n{address} {name}\n')
    self._hosts[fqdn] = address
    with open(self._hosts_file, 'w') as f:
      f.writelines(f'{a} {h}\n' for h, a in self._hosts.items())
    self._dnsmasq.send_signal(signal.SIGHUP)  # Reloads the hosts file.
    return ns

  def start(self, ns: str, command: Sequence[str], env: Dict[str, str],
            log_path: str) -> subprocess.Popen:
    with open(log_path, 'ab') as log:
      process = subprocess.Popen(
          ['ip', 'netns', 'exec', ns] + list(command), env=env,
          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
          start_new_session=True)
    self._processes.append(process)
    return process

  def resolve(self, ns: str, name: str) -> str:
    """What `name` resolves to inside pod `ns` (getent, the libc resolver)."""
    result = subprocess.run(['ip', 'netns', 'exec', ns, 'getent', 'hosts',
                             name], stdout=subprocess.PIPE, text=True,
                            check=False)
    return result.stdout.split()[0] if result.stdout else ''

  def close(self) -> None:
    for process in self._processes:
      if process.poll() is None:
        try:
          os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
        process.wait()
    if self._dnsmasq is not None and self._dnsmasq.poll() is None:
      self._dnsmasq.kill()
      self._dnsmasq.wait()
    for ns in reversed(self._namespaces):
      # Any process left in a namespace is killed before it is deleted.
      pids = subprocess.run(['ip', 'netns', 'pids', ns],
                            stdout=subprocess.PIPE, text=True,
                            check=False).stdout.split()
      for pid in pids:
        try:
          os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
          pass
      subprocess.run(['ip', 'netns', 'del', ns], check=False,
                     stderr=subprocess.DEVNULL)
    self._namespaces.clear()
    for path in self._dirs:
      shutil.rmtree(path, ignore_errors=True)
    if self._made_etc_netns:
      try:
        os.rmdir('/etc/netns')
      except OSError:
        pass
    shutil.rmtree(self._work, ignore_errors=True)
