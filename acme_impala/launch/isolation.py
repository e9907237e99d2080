"""Keeps a local run's servers off the network.

Reverb and courier bind `[::]:<port>` and offer no address option, and
neither authenticates; courier runs what it is sent. A local run therefore
moves itself, before it starts anything, into a network namespace of its own
whose only interface is loopback: its node processes (forked or exec'd, they
inherit the namespace) reach each other on `localhost` as before, and no
other machine, nor any other process of this one, can reach them. Files,
signals and the terminal are unaffected; the namespace goes away with the
run's last process.

As root, an unshared network namespace is enough. Otherwise an unprivileged
user namespace is made with it (the user's own uid and gid mapped to
themselves, so files keep their owner), where the kernel allows: some turn
them off (`kernel.unprivileged_userns_clone=0`, Ubuntu 24.04's AppArmor
restriction, a container's seccomp profile). Where it is not possible the
program stops before any process starts, saying why, and `--expose_ports`
runs it with its servers on every interface, as the user's explicit choice.
"""

import ctypes
import fcntl
import os
import socket
import struct
import sys
from typing import Optional, Sequence

EXPOSE_FLAG = 'expose_ports'
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1

# What isolate() did in this process: 'isolated', 'exposed' or None.
_state: Optional[str] = None


class IsolationError(OSError):
  """The run's network namespace could not be made."""


def _unshare(flags: int) -> None:
  libc = ctypes.CDLL(None, use_errno=True)
  if libc.unshare(ctypes.c_int(flags)) != 0:
    errno = ctypes.get_errno()
    raise OSError(errno, os.strerror(errno))


def _write(path: str, text: str) -> None:
  with open(path, 'w') as f:
    f.write(text)


def _loopback_up() -> None:
  """Brings `lo` up (a new network namespace starts with it down)."""
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    request = struct.pack('16sh', b'lo', 0)
    flags = struct.unpack('16sh', fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
    fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack('16sh', b'lo', flags | _IFF_UP))


def isolate() -> None:
  """Moves this process into a new network namespace with only loopback up.

  Call it while the process has one thread (a user namespace requires it),
  before any server starts; processes it starts later inherit the namespace.
  Raises IsolationError saying why when the kernel does not allow it.
  """
  global _state
  uid, gid = os.geteuid(), os.getegid()
  try:
    try:
      _unshare(_CLONE_NEWNET)
    except PermissionError:
      if uid == 0:
        raise  # Root without CAP_SYS_ADMIN: a user namespace will not help.
      _unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
      _write('/proc/self/setgroups', 'deny')
      _write('/proc/self/uid_map', f'{uid} {uid} 1')
      _write('/proc/self/gid_map', f'{gid} {gid} 1')
    _loopback_up()
  except OSError as error:
    raise IsolationError(
        error.errno, f'cannot give the run a network namespace of its own '
        f'({error.strerror}; user namespaces may be disabled here)') from None
  _state = 'isolated'


def wants_exposure(argv: Sequence[str]) -> bool:
  """Whether `argv` asks for --expose_ports (absl's spellings, last wins)."""
  exposed = False
  for arg in argv[1:]:
    if arg == '--':
      break
    name, _, value = arg.lstrip('-').partition('=')
    if name == EXPOSE_FLAG:
      exposed = value.lower() not in ('false', '0', 'no') if value else True
    elif name == 'no' + EXPOSE_FLAG:
      exposed = False
  return exposed


def isolate_unless_exposed(name: str, argv: Sequence[str]) -> None:
  """A program's first step: isolate(), unless argv asks for
  --expose_ports or only for help; exits 2 with one line if it fails."""
  global _state
  if any(a.lstrip('-').split('=')[0] in ('help', 'helpfull', 'helpshort')
         for a in argv[1:]):
    return
  if wants_exposure(argv):
    _state = 'exposed'
    return
  try:
    isolate()
  except IsolationError as error:
    print(f'{name}: error: {error.strerror}, so its Reverb and courier '
          'servers would listen on every interface, unauthenticated. Pass '
          f'--{EXPOSE_FLAG} to run anyway (on a machine no untrusted host '
          'can reach), or run where user namespaces are allowed.',
          file=sys.stderr)
    sys.exit(2)


def describe() -> str:
  """One line on what this run exposes."""
  if _state == 'isolated':
    return ('ports: loopback only (the run has a network namespace of its '
            'own)')
  if _state == 'exposed':
    return (f'ports: every interface (--{EXPOSE_FLAG}): its servers are '
            'unauthenticated')
  return 'ports: not isolated'
