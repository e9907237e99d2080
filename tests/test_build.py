"""BUILD stays in step with the files: every module, test, program and
benchmark has a target, every listed source exists, and each target's
`deps` are exactly the project modules its sources import. The package's
wings import only downwards (host < envs < agent < distributed < launch)."""

import ast
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _text():
  with open(os.path.join(ROOT, 'BUILD')) as f:
    return f.read()


def _targets():
  """name -> (srcs, deps) for every py_* rule of BUILD."""
  targets = {}
  for rule in re.finditer(r'py_\w+\((.*?)\)\n', _text(), re.S):
    body = rule.group(1)
    name = re.search(r'name = "([\w/]+)"', body).group(1)

    def listed(attr, body=body):
      found = re.search(attr + r' = \[(.*?)\]', body, re.S)
      return re.findall(r'"([^"]+)"', found.group(1)) if found else []
    targets[name] = (listed('srcs'), listed('deps'))
  return targets


def _module_target(path):
  """The BUILD target of a project source file (None for others): a wing's
  module is `<wing>/<module>`, a wing itself (its __init__) `<wing>`, the
  Kubernetes package one target `launch/k8s`, the presets `configs`."""
  if path == 'acme_impala/__init__.py':
    return 'acme_impala'
  if path.startswith('configs/'):
    return 'configs'
  if path.startswith('acme_impala/launch/k8s/'):
    return 'launch/k8s'
  if path.startswith('acme_impala/'):
    parts = path[len('acme_impala/'):-3].split('/')
    return parts[0] if parts[-1] == '__init__' else '/'.join(parts)
  if path.startswith('tests/'):
    return os.path.basename(path)[:-3]
  return None


def _module_name_target(module):
  """The target of an imported module name (`acme_impala.agent.config`,
  a wing `acme_impala.envs`, the package `acme_impala.launch.k8s`)."""
  parts = module.split('.')
  if parts[0] != 'acme_impala' or len(parts) < 2:
    return None  # `import acme_impala`: the lazy exports.
  if parts[1:3] == ['launch', 'k8s']:
    return 'launch/k8s'
  return '/'.join(parts[1:3])


def _imported_targets(path):
  """Targets of the project modules that `path` imports."""
  with open(os.path.join(ROOT, path)) as f:
    tree = ast.parse(f.read())
  found = set()
  for node in ast.walk(tree):
    names = []
    if isinstance(node, ast.ImportFrom) and node.module:
      if node.module.startswith('acme_impala'):
        # `from acme_impala.agent import config`: the module is a name; from
        # `acme_impala.agent.config import X`, the module itself.
        names = [f'{node.module}.{a.name}' for a in node.names]
        names = [n if os.path.exists(os.path.join(
            ROOT, n.replace('.', '/') + '.py')) or os.path.isdir(
                os.path.join(ROOT, n.replace('.', '/'))) else node.module
                 for n in names]
    elif isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    for name in names:
      target = _module_name_target(name)
      if target is not None:
        found.add(target)
        continue
      elif path.startswith(('tests/', 'benchmarks/', 'programs/')) and (
          len(name.split('.')) == 1) and os.path.exists(
          os.path.join(ROOT, os.path.dirname(path), name + '.py')
      ) and name != 'conftest':
        found.add(name)  # A helper module beside its importer (tests/,
        # benchmarks/).
  return found


def test_every_listed_source_exists():
  listed = set(re.findall(r'"([\w/]+\.py)"', _text()))
  missing = sorted(p for p in listed if not os.path.exists(
      os.path.join(ROOT, p)))
  assert not missing, f'BUILD lists missing files: {missing}'


def test_every_file_has_a_target():
  listed = set(re.findall(r'"([\w/]+\.py)"', _text()))
  files = (_package_sources() + glob.glob('configs/*.py', root_dir=ROOT) +
           glob.glob('programs/*.py', root_dir=ROOT) +
           glob.glob('benchmarks/*.py', root_dir=ROOT) +
           glob.glob('tests/*.py', root_dir=ROOT))
  unlisted = sorted(set(files) - listed)
  assert not unlisted, f'BUILD has no target for: {unlisted}'
  targets = _targets()
  for test in glob.glob('tests/test_*.py', root_dir=ROOT):
    assert os.path.basename(test)[:-3] in targets, test
  for prog in glob.glob('programs/*.py', root_dir=ROOT):
    assert os.path.basename(prog)[:-3] in targets, prog


def test_deps_are_the_imports():
  targets = _targets()
  wrong = []
  for name, (srcs, deps) in targets.items():
    imported = set()
    for src in srcs:
      imported |= _imported_targets(src)
    # A package's own modules (k8s/*) import each other freely.
    imported.discard(name)
    expected = sorted(f':{t}' for t in imported)
    if sorted(deps) != expected:
      wrong.append(f'{name}: deps {sorted(deps)}, imports {expected}')
    for dep in deps:
      assert dep[1:] in targets, f'{name}: unknown dep {dep}'
  assert not wrong, 'BUILD deps differ from the imports:\n' + '\n'.join(wrong)


def test_targets_are_unique_and_data_names_targets():
  names = re.findall(r'py_\w+\(\s*name = "([\w/]+)"', _text())
  assert len(names) == len(set(names)), sorted(
      n for n in set(names) if names.count(n) > 1)
  for data in re.findall(r'data = \[(.*?)\]', _text(), re.S):
    for label in re.findall(r'"(:[\w/]+)"', data):
      assert label[1:] in names, f'data {label} is no target'


def test_design_doc_names_every_module():
  """docs/design.md's table of layers lists every module of every wing
  and every preset, so the map a newcomer reads is the territory."""
  with open(os.path.join(ROOT, 'docs', 'design.md')) as f:
    design = f.read()
  missing = []
  for path in _package_sources() + glob.glob('configs/*.py', root_dir=ROOT):
    name = os.path.basename(path)
    if name != '__init__.py' and f'`{name}`' not in design:
      missing.append(path)
  assert not missing, f'docs/design.md does not name {missing}'


def test_module_targets_are_named_after_their_module():
  for name, (srcs, _) in _targets().items():
    for src in srcs:
      target = _module_target(src)
      if target is not None:
        assert target == name, (name, src)


def _package_sources():
  return sorted(glob.glob('acme_impala/**/*.py', root_dir=ROOT,
                          recursive=True))


def _parse(path):
  with open(os.path.join(ROOT, path)) as f:
    return ast.parse(f.read())


# Public API of namedtuples despite the underscore.
NAMEDTUPLE_API = ('_fields', '_replace', '_asdict', '_make')


def test_no_module_reaches_into_private_attributes():
  """Only agent/compat.py (the Acme/Sonnet workarounds) may read `x._name`
  of an object that is not the module's own `self`/`cls`."""
  found = []
  for path in _package_sources():
    if path == 'acme_impala/agent/compat.py':
      continue
    for node in ast.walk(_parse(path)):
      if (isinstance(node, ast.Attribute) and node.attr.startswith('_') and
          not node.attr.startswith('__') and
          node.attr not in NAMEDTUPLE_API and
          not (isinstance(node.value, ast.Name) and
               node.value.id in ('self', 'cls', 'os', 'sys'))):
        found.append(f'{path}:{node.lineno} .{node.attr}')
  assert not found, found


def test_only_the_builder_makes_tables_and_names_them():
  """Reverb tables, table names and datasets appear in agent/builder.py
  and its data pipeline, agent/datasets.py, only (agent/types.py holds the
  names)."""
  found = []
  for path in _package_sources():
    if path in ('acme_impala/agent/builder.py', 'acme_impala/agent/datasets.py',
                'acme_impala/agent/types.py'):
      continue
    for node in ast.walk(_parse(path)):
      if isinstance(node, ast.Attribute) and (
          node.attr in ('QUEUE_TABLE', 'REPLAY_TABLE', 'Table',
                        'TrajectoryDataset', 'TimestepDataset')):
        found.append(f'{path}:{node.lineno} .{node.attr}')
  assert not found, found


# The wings, lowest first: a module may import its own wing and those below.
WINGS = ('host', 'envs', 'agent', 'distributed', 'launch')


def _wing(target):
  return target.split('/')[0]


def test_wings_import_only_downwards():
  """host < envs < agent < distributed < launch: the agent knows no
  Launchpad node or process, the environments no agent, and so on."""
  upward = []
  for path in _package_sources():
    if path == 'acme_impala/__init__.py':
      continue
    here = WINGS.index(_wing(_module_target(path)))
    for target in _imported_targets(path):
      if WINGS.index(_wing(target)) > here:
        upward.append(f'{path} imports {target}')
  assert not upward, upward
  for path in glob.glob('configs/*.py', root_dir=ROOT):
    assert {_wing(t) for t in _imported_targets(path)} <= {'agent'}, path


def test_agent_and_envs_import_no_launchpad():
  """What IMPALA is (agent/), the environments (envs/) and the host facts
  (host/) work in any process, in any Acme agent: none imports Launchpad."""
  found = []
  for path in _package_sources():
    if not path.startswith(('acme_impala/agent/', 'acme_impala/envs/',
                            'acme_impala/host/')):
      continue
    for node in ast.walk(_parse(path)):
      names = ([a.name for a in node.names] if isinstance(node, ast.Import)
               else [node.module or ''] if isinstance(node, ast.ImportFrom)
               else [])
      for name in names:
        if name.split('.')[0] == 'launchpad':
          found.append(f'{path}: {name}')
  assert not found, found
