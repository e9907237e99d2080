"""Shared test set-up: run from the repo root so `configs` is importable."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# TensorFlow's process settings as a program has them (oneDNN on, TF2
# behaviour), before any test module imports TensorFlow.
import acme_impala  # pylint: disable=g-import-not-at-top,unused-import

import pytest  # pylint: disable=g-import-not-at-top


@pytest.fixture(scope='session')
def bfloat16_runs():
  """Skips a test of the bfloat16 torso where this CPU cannot run it, with
  the refusal a user would get (networks.validate_torso_dtype, whose probe
  asks TensorFlow itself); the refusal is tested on every CPU."""
  from acme_impala.agent import networks  # pylint: disable=g-import-not-at-top
  try:
    networks.validate_torso_dtype('bfloat16')
  except ValueError as error:
    pytest.skip(f'bfloat16 does not run here: {error}')


@pytest.fixture(scope='session')
def readme_run(tmp_path_factory):
  """The README's example run, once per session at small budgets:
  `bash scripts/train.sh --num_actors=4 ... --logdir=runs/cp` (20k env
  steps), then its `--restore` (to 40k). Returns (logdir, the first run's
  output, the restored run's output); test_docs.py checks both,
  test_evaluate.py evaluates and exports the trained policy."""
  import docs_commands  # pylint: disable=g-import-not-at-top
  logdir = str(tmp_path_factory.mktemp('readme') / 'cp')
  outputs = []
  for pattern, budget in (
      (r'bash scripts/train\.sh --num_actors=4 .*', 20_000),
      (r'bash scripts/train\.sh .*--restore.*', 40_000)):
    rc, out = docs_commands.run(docs_commands.small(
        docs_commands.readme_command(pattern), max_actor_steps=budget,
        logdir=logdir))
    assert rc == 0, out[-4000:]
    outputs.append(out)
  return (logdir, *outputs)


# Files whose tests share a session fixture run on the same xdist worker
# (scripts/test.sh runs two), so the fixture's program runs once.
_SHARED_WORKER = {'test_docs.py': 'readme_run',
                  'test_evaluate.py': 'readme_run'}
# Files whose tests share nothing (each run writes only under its tmp_path)
# and together take long: spread over both workers, test by test.
_SPREAD = ('test_benchmarks.py',)
# The files that take longest as one group (3-6 min each in CI), handed
# out first so that the spread tests and the short files fill the gaps and
# neither worker is left with a long file at the end.
# (test_k8s.py not first: its policy check waits for the checkov venv that
# scripts/test.sh makes in the background, after Sample Factory's.)
_LONGEST = ('test_supervisor.py', 'test_program.py', 'test_k8s.py',
            'test_sweep.py', 'test_docs.py', 'test_evaluate.py',
            'test_memory.py', 'test_learning.py', 'test_replicas.py')


# First: pytest-xdist's own hook reads the xdist_group markers added here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
  """Under `-n 2 --dist loadgroup` (scripts/test.sh), every test of a file
  runs on one worker: module fixtures start their programs once, and the
  multi-host tests of one file never share their network namespaces'
  names and addresses with another test at the same time. The tests of
  `_SPREAD` files go one by one to whichever worker is free."""
  del config
  rank = {}
  for item in items:
    name = os.path.basename(str(item.fspath))
    group = item.nodeid if name in _SPREAD else _SHARED_WORKER.get(name, name)
    item.add_marker(pytest.mark.xdist_group(group))
    # The longest files, then the spread runs (up to 2.5 min each), then
    # the short files.
    rank[item] = (_LONGEST.index(name) if name in _LONGEST else
                  len(_LONGEST) + (name not in _SPREAD))
  # Stable: each file's tests stay together and in their order.
  items.sort(key=rank.get)
