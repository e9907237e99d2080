"""The commands the README and docs/ show work: each is run here at a small
budget, or by the test named for it, or is listed as run elsewhere and why.

A command added to the docs without an entry in `COVERAGE` fails
`test_every_documented_command_is_covered`, so a change of defaults cannot
silently break an example again (issue 35).
"""

import csv
import os
import re

import docs_commands
from docs_commands import ROOT

_KUBECTL_TEST = ('tests/test_k8s.py::test_kubectl_calls_select_by_app_and_'
                 'instance_and_use_no_shell')
# Where each documented command (keyed by the script or program it runs) is
# exercised: 'tests/<file>.py::<test>' entries are checked to exist.
COVERAGE = {
    'scripts/train.sh': 'tests/test_docs.py::test_default_train_command_learns',
    'programs/impala_lp.py':
        'tests/test_docs.py::test_default_train_command_learns',
    'scripts/test.sh': 'CI itself (.ci/run calls it)',
    '.ci/run': 'CI itself',
    'programs/evaluate.py':
        'tests/test_evaluate.py::test_evaluates_a_trained_run_and_exports_'
        'its_policy',
    'programs/plot.py': 'tests/test_curves.py::test_plot_program',
    'programs/impala_k8s.py render':
        'tests/test_k8s.py::test_render_atari_256_actors',
    # apply, status and stop run against a kubectl that records its calls
    # (no API server here): the selectors and arguments they send.
    'programs/impala_k8s.py apply': _KUBECTL_TEST,
    'programs/impala_k8s.py status': _KUBECTL_TEST,
    'programs/impala_k8s.py stop': _KUBECTL_TEST,
    'acme_impala.launch.k8s.node':
        'tests/test_k8s.py::test_pods_on_separate_hosts_run_to_the_budget',
    'programs/laser_sweep_lp.py':
        'tests/test_sweep.py::test_sweep_program_with_no_flags_reaches_its_'
        'budget',
}
# The LASER example is the README's train command with LASER's flags.
LASER_TEST = ('tests/test_sweep.py::test_readme_laser_command_on_the_default_'
              'config_reaches_its_budget')
# Benchmarks take minutes to hours by design; each documented benchmark
# command runs at a small budget in tests/test_benchmarks.py, and its flags
# are checked against its script here
# (test_benchmark_commands_use_flags_their_scripts_define).
BENCHMARKS = 'benchmarks/'
# Cloud and container tools of the GKE runbook: no cluster or registry here.
EXTERNAL = ('gcloud', 'kubectl', 'docker')


def _target(command: str) -> str:
  words = command.split()
  if words[0] in EXTERNAL:
    return words[0]
  if words[:2] == ['python', '-m']:
    return words[2]
  script = next(w for w in words[1:] if not w.startswith('-'))
  if script == 'programs/impala_k8s.py':  # Its subcommands differ.
    return f'{script} {words[words.index(script) + 1]}'
  return script


def test_every_documented_command_is_covered():
  commands = docs_commands.documented_commands()
  assert len(commands) > 30  # The extraction finds the docs' commands.
  uncovered = []
  for doc, command in commands:
    target = _target(command)
    if not (target in COVERAGE or target in EXTERNAL or
            target.startswith(BENCHMARKS)):
      uncovered.append(f'{doc}: {command}')
  assert not uncovered, ('documented commands no test runs (add them to '
                         'COVERAGE):\n' + '\n'.join(uncovered))
  for entry in list(COVERAGE.values()) + [LASER_TEST]:
    if not entry.startswith('tests/'):
      continue
    path, name = entry.split('::')
    with open(os.path.join(ROOT, path)) as f:
      assert f'def {name}(' in f.read(), entry


def _flags_of(script):
  """The flags `script` defines (absl DEFINE_* or argparse), read from its
  source, with absl's --no<bool> forms."""
  with open(os.path.join(ROOT, script)) as f:
    source = f.read()
  absl = re.findall(r"DEFINE_(\w+)\(\s*'(\w+)'", source)
  names = {name for _, name in absl}
  names |= {f'no{name}' for kind, name in absl if kind == 'bool'}
  names |= set(re.findall(r"add_argument\(\s*'--(\w+)'", source))
  if 'absl' in source:  # absl's own, e.g. --helpfull.
    names |= {'help', 'helpfull', 'flagfile'}
  return names


def test_benchmark_commands_use_flags_their_scripts_define():
  """Benchmarks take minutes to hours and are not run here; each documented
  benchmark command's flags must at least be ones its script defines, so a
  renamed or removed flag cannot leave a dead command in the docs."""
  bad = []
  for doc, command in docs_commands.documented_commands():
    for part in command.split('&&'):
      words = part.split()
      scripts = [w for w in words if w.startswith(BENCHMARKS) and
                 w.endswith('.py')]
      if not scripts:
        continue
      defined = _flags_of(scripts[0])
      for word in words[words.index(scripts[0]) + 1:]:
        name = word.lstrip('-').split('=')[0]
        if word.startswith('--') and name not in defined:
          bad.append(f'{doc}: {scripts[0]} has no --{name}')
  assert not bad, bad


def _evaluator_best_mean(logdir, episodes=10):
  with open(os.path.join(logdir, 'logs', 'evaluator', 'logs.csv')) as f:
    returns = [float(r['episode_return']) for r in csv.DictReader(f)]
  assert len(returns) >= episodes, returns
  return max(sum(returns[i:i + episodes]) / episodes
             for i in range(len(returns) - episodes + 1))


def test_default_train_command_learns(tmp_path):
  """The README's train command at a small budget learns: an evaluator
  10-episode mean of 100 within 100k env steps (a random policy averages
  about 22; the default run's mean was 157 at 49k and 346 at 107k on an AMD
  EPYC)."""
  logdir = str(tmp_path / 'default')
  command = docs_commands.readme_command(r'bash scripts/train\.sh')
  rc, out = docs_commands.run(docs_commands.small(
      command, max_actor_steps=100_000, logdir=logdir))
  assert rc == 0, out[-4000:]
  assert 'stopping: the budget is reached' in out, out[-3000:]
  assert _evaluator_best_mean(logdir) >= 100, out[-3000:]


def test_four_actor_run_and_its_restore(readme_run):
  """The README's four-actor run and its --restore (run once for the
  session by conftest.readme_run; test_evaluate.py evaluates the result)
  reach their budgets, the second from the first's checkpoint."""
  logdir, first, again = readme_run
  assert 'num_actors=4' in first
  assert 'stopping: the budget is reached' in again, again[-3000:]
  # Node output goes to <logdir>/nodes/, a file per node, every life of it.
  with open(os.path.join(logdir, 'nodes', 'learner-0.log')) as f:
    starts = [int(s) for s in re.findall(
        r'learner: starting at learner step (\d+)', f.read())]
  assert len(starts) == 2 and starts[0] == 0 and starts[1] > 0, starts
  # The learner's log goes on from its checkpoint: the restored life's
  # first row comes after the first life's last logged step (the
  # checkpoint is written at stop, after it).
  with open(os.path.join(logdir, 'logs', 'learner', 'logs.csv')) as f:
    steps = [float(r['learner_steps']) for r in csv.DictReader(f)]
  first_life = [step for step in steps if step <= starts[1]]
  second_life = [step for step in steps if step > starts[1]]
  assert first_life and second_life, (steps, starts)
  assert steps == first_life + second_life, (steps, starts)


def test_atari_train_command(tmp_path):
  """The README's Atari example (8 actors, Breakout, the shallow torso in
  the dtype 'auto' picks here) runs to a small budget: every node built and
  stopped at the budget. (At this budget the actors finish before the
  learner's first Atari step compiles; the learner's Atari steps are
  tested in test_learning.py and test_networks.py.)"""
  logdir = str(tmp_path / 'breakout')
  command = docs_commands.readme_command(
      r'bash scripts/train\.sh --config=atari .*')
  rc, out = docs_commands.run(docs_commands.small(
      command, max_actor_steps=4000, logdir=logdir))
  assert rc == 0, out[-4000:]
  assert 'stopping: the budget is reached' in out, out[-3000:]
  assert 'impala: all nodes stopped; restarts: none; exiting with status 0.' \
      in out
  nodes = sorted(os.listdir(os.path.join(logdir, 'nodes')))
  assert nodes == sorted(['coordinator-0.log', 'counter-0.log',
                          'evaluator-0.log', 'learner-0.log', 'replay-0.log']
                         + [f'actor-{i}.log' for i in range(8)])
  with open(os.path.join(logdir, 'nodes', 'learner-0.log')) as f:
    assert 'learner: starting at learner step 0' in f.read()
  with open(os.path.join(logdir, 'config.json')) as f:
    assert '"ALE/Breakout-v5"' in f.read()
