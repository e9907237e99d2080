"""What every benchmark prints with its tables: the commit it ran on and the
CPU it ran on (figures differ several-fold between the CPU kinds of these
machines: Intel with AMX, AMD without AVX-512)."""

from acme_impala.distributed import run_record
from acme_impala.host import hardware


def git_commit() -> str:
  """The checkout's short commit ('<sha>-dirty' with uncommitted changes to
  tracked files, as in a run's config.json), or 'unknown' outside a git
  checkout."""
  commit = run_record.git_commit()
  if commit is None:
    return 'unknown'
  return commit[:7] + ('-dirty' if commit.endswith('-dirty') else '')


def cpu() -> str:
  """The CPU model, usable cores and the flags that matter here, e.g. 'AMD
  EPYC, 2 cores, has avx2 fma; lacks avx512f ... amx_bf16'."""
  return hardware.describe_cpu()


def stamp() -> str:
  """'commit <sha> on <cpu()>': what a table's heading line says."""
  return f'commit {git_commit()} on {cpu()}'
