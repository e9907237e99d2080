"""Runs one node of a built Launchpad program in the current process.

Launchpad 0.5.2 has no public call for "run node i of group g here, the
other nodes are there". Its pieces are public, and this module puts them
together the way `lp.launch` and `process_entry.py` do:

  1. `initialize_program`: every node's launch context gets a launch type
     and a program stopper (what `lp.stop()` calls), and the input handles
     are connected to the nodes that hold them;
  2. `bind_address_map`: every node's addresses are bound to where that node
     is served (`host:port` per node, from an `AddressMap`), instead of
     Launchpad's local port picking;
  3. `run_node`: the node's function runs under Launchpad's `WorkerManager`,
     which turns SIGTERM into `lp.wait_for_stop()` and gives the node its
     termination notice, as in `process_entry.py`.

The local supervisor (`supervisor.py`) uses step 1 and Launchpad's own
binding and per-node commands; the Kubernetes pod entry (`k8s/node.py`) uses
all three, with an address map of DNS names. A program built twice by the
pure `program.build_program` has the same groups in the same order, so every
process computes the same map.
"""

from typing import Callable, Dict, Mapping, Optional, Sequence

import launchpad as lp
from launchpad import context as lp_context
from launchpad.launch import worker_manager

# group -> one `host:port` per node of the group, in the group's order.
AddressMap = Mapping[str, Sequence[str]]


class FixedAddress(lp.AbstractAddressBuilder):
  """An address decided before launch (a DNS name and a port)."""

  def __init__(self, address: str):
    self._address = address

  def build(self) -> str:
    return self._address


def initialize_program(program: lp.Program,
                       launch_type: lp_context.LaunchType,
                       stopper: Callable[[], None]) -> None:
  """Launch contexts with `stopper` and connected input handles, as
  `lp.launch` prepares a program before starting anything."""
  for nodes in program.groups.values():
    for node in nodes:
      node.launch_context.initialize(launch_type, launch_config=None,
                                     program_stopper=stopper)
  for label, nodes in program.groups.items():
    for node in nodes:
      for handle in node.input_handles:
        handle.connect(node, label)


def group_sizes(program: lp.Program) -> Dict[str, int]:
  """Nodes per group, in the program's group order."""
  return {group: len(nodes) for group, nodes in program.groups.items()}


def check_address_map(program: lp.Program, addresses: AddressMap) -> None:
  """Raises ValueError unless `addresses` has one address per node, and
  each node has exactly one address to bind (true of Courier and Reverb
  nodes, the only kinds this project's programs hold)."""
  sizes = group_sizes(program)
  if set(addresses) != set(sizes):
    raise ValueError(f'address map groups {sorted(addresses)} do not match '
                     f'the program\'s groups {sorted(sizes)}.')
  for group, size in sizes.items():
    if len(addresses[group]) != size:
      raise ValueError(f'address map has {len(addresses[group])} address(es) '
                       f'for group {group!r}, which has {size} node(s).')
    for address in addresses[group]:
      host, _, port = str(address).rpartition(':')
      if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'address {address!r} of group {group!r} is not '
                         'host:port with a port in 1..65535.')
  for group, nodes in program.groups.items():
    for node in nodes:
      if len(node.addresses) != 1:
        raise ValueError(f'a node of group {group!r} has '
                         f'{len(node.addresses)} addresses; one expected.')


def bind_address_map(program: lp.Program, addresses: AddressMap) -> None:
  """Binds node i of group g to `addresses[g][i]`."""
  check_address_map(program, addresses)
  for group, nodes in program.groups.items():
    for node, address in zip(nodes, addresses[group]):
      node.addresses[0].bind(FixedAddress(str(address)))


def run_node(program: lp.Program, group: str, index: int,
             on_start: Optional[Callable[[], None]] = None) -> None:
  """Runs node `index` of `group` here until it returns.

  The program must be initialised and bound. Stops when the process gets
  SIGTERM (Launchpad's worker manager sets the stop event that
  `lp.wait_for_stop()` reads). `on_start` is called once the worker manager
  handles SIGTERM, just before the node runs.
  """
  if group not in program.groups:
    raise ValueError(f'group={group!r} is not a group of program '
                     f'{program.name!r}: {sorted(program.groups)}.')
  nodes = program.groups[group]
  if not 0 <= index < len(nodes):
    raise ValueError(f'index={index!r} is out of range for group {group!r} '
                     f'of {len(nodes)} node(s).')
  worker_manager.WorkerManager(register_in_thread=True)
  if on_start is not None:
    on_start()
  nodes[index].function()

