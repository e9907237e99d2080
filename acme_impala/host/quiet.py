"""Silences third-party start-up noise at its source, in every node process.

A program's processes each import TensorFlow, Acme (which imports gym) and
Launchpad; by default each prints TensorFlow's CUDA-library warnings
("Could not load dynamic library libcudart...", cuInit), tf.nest's "Sets are
not currently considered sequences" and gym 0.26's "Gym has been
unmaintained" notice. None of them says anything about the run. `silence()`
switches each off where it is made:

  - TensorFlow's C++ log below ERROR (`TF_CPP_MIN_LOG_LEVEL=2`, read when
    TensorFlow loads; the CUDA and tf.nest lines are C++ warnings): a user's
    own setting wins (`TF_CPP_MIN_LOG_LEVEL=0` brings them back);
  - gym's notice: gym 0.26 prints it unconditionally on import, from the
    `gym_notices` table, with no switch; its entry for the installed gym is
    dropped before gym is imported;
  - MinAtar's import-time warnings that seaborn is missing (only its own
    rendering uses it): a filter on the root logger drops them;
  - `ACME_IMPALA_QUIET=1` in the environment, so that a node process started
    by exec (Launchpad's process_entry, a Kubernetes pod) silences itself
    when it imports acme_impala, before it imports TensorFlow.

It must run before TensorFlow and gym are imported: programs call it first;
forked node processes inherit its effects.
"""

import logging
import os
import sys

QUIET_ENV = 'ACME_IMPALA_QUIET'
_MINATAR_NOTICES = ('Cannot import matplotlib and/or seaborn',
                    'Cannot import seaborn')


def _drop_gym_notice() -> None:
  if 'gym' in sys.modules:
    return  # Too late: the notice was printed on import.
  try:
    import importlib.metadata  # pylint: disable=g-import-not-at-top
    import gym_notices.notices  # pylint: disable=g-import-not-at-top
    gym_notices.notices.notices.pop(importlib.metadata.version('gym'), None)
  except Exception:  # pylint: disable=broad-except
    pass  # No gym, or another layout: nothing printed, or nothing to drop.


class _MinAtarNotice(logging.Filter):
  """MinAtar warns on import, through the root logger, that it cannot
  import seaborn (only its own rendering needs it)."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_MINATAR_NOTICES)


def _drop_minatar_notice() -> None:
  root = logging.getLogger()
  if not any(isinstance(f, _MinAtarNotice) for f in root.filters):
    root.addFilter(_MinAtarNotice())


def silence() -> None:
  """Switches off TensorFlow's C++ warnings and gym's and MinAtar's
  notices in this process and the processes it starts."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  os.environ[QUIET_ENV] = '1'
  _drop_gym_notice()
  _drop_minatar_notice()

