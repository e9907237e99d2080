"""Kubernetes names of a run's objects and the nodes' addresses.

Every Launchpad group `g` of run `r` is one Indexed Job and one headless
Service, both named `job_name(r, g)`; node i of the group is the Job's pod
of completion index i, whose hostname is `<job>-<i>` and whose DNS name,
through the Service as the pod's `subdomain`, is `<job>-<i>.<job>` within
the namespace (Kubernetes' search path completes it). Every node serves on
the same `PORT` (one pod each, so no port is shared).
"""

import hashlib
import re
from typing import Dict, Mapping

PORT = 8000
# The learner replicas' collective group (distributed/collective.py): one
# gRPC port per learner pod, opened only when the learner group has K > 1.
COLLECTIVE_PORT = 8470
MAX_LABEL = 63  # RFC 1123 label, the limit of every name used here.
_LABEL_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')


def is_dns_label(name: str) -> bool:
  return len(name) <= MAX_LABEL and bool(_LABEL_RE.match(name))


def dns_label(text: str, max_length: int = MAX_LABEL) -> str:
  """`text` as an RFC 1123 label of at most `max_length` characters.

  Lower case; every run of characters other than [a-z0-9] becomes one '-'
  ('agent_0/learner' -> 'agent-0-learner'). A name that is too long keeps
  its start and ends with 8 hex digits of a hash of the whole text, so two
  long names that differ only at the end stay distinct.
  """
  if max_length < 10:
    raise ValueError(f'max_length={max_length!r} is too short for a name; '
                     'expected >= 10.')
  name = re.sub(r'[^a-z0-9]+', '-', text.lower()).strip('-')
  if not name:
    raise ValueError(f'{text!r} has no letter or digit to make a name of.')
  if len(name) > max_length:
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    name = name[:max_length - 9].rstrip('-') + '-' + digest
  return name


def validate_run_name(run_name: str) -> None:
  """A run name is used as given, so it must already be a short label."""
  if not is_dns_label(run_name or '') or len(run_name) > 30:
    raise ValueError(
        f'run_name={run_name!r} is invalid: expected 1-30 characters of '
        'lower-case letters, digits and "-", starting and ending with a '
        'letter or digit (it prefixes every object name of the run).')


def job_name(run_name: str, group: str, num_nodes: int) -> str:
  """The Job and Service name of `group`; leaves room in 63 characters for
  the pod hostname's '-<index>' suffix."""
  suffix = len(f'-{max(num_nodes - 1, 0)}')
  return dns_label(f'{run_name}-{group}', MAX_LABEL - suffix)


def pod_dns_name(job: str, index: int) -> str:
  """Node `index`'s name, resolved through the namespace's search path."""
  return f'{job}-{index}.{job}'


def address_map(run_name: str, group_sizes: Mapping[str, int]
                ) -> Dict[str, list]:
  """group -> ['<job>-<i>.<job>:PORT' for each node]; raises ValueError if
  two groups would get the same Job name."""
  validate_run_name(run_name)
  jobs = {}
  for group, size in group_sizes.items():
    job = job_name(run_name, group, size)
    if job in jobs:
      raise ValueError(f'groups {jobs[job]!r} and {group!r} both map to the '
                       f'Kubernetes name {job!r}.')
    jobs[job] = group
  return {group: [f'{pod_dns_name(job_name(run_name, group, size), i)}:{PORT}'
                  for i in range(size)]
          for group, size in group_sizes.items()}
