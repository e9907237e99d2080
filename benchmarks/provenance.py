"""What every benchmark prints with its tables: the commit it ran on."""

from acme_impala import run_record


def git_commit() -> str:
  """The checkout's short commit ('<sha>-dirty' with uncommitted changes to
  tracked files, as in a run's config.json), or 'unknown' outside a git
  checkout."""
  commit = run_record.git_commit()
  if commit is None:
    return 'unknown'
  return commit[:7] + ('-dirty' if commit.endswith('-dirty') else '')
