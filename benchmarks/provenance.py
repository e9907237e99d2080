"""What every benchmark prints with its tables: the commit it ran on."""

import os
import subprocess

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_commit() -> str:
  """The checkout's short commit, or 'unknown' outside a git checkout."""
  proc = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=_ROOT,
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                        text=True)
  return proc.stdout.strip() or 'unknown'
