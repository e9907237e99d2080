"""BUILD stays in step with the files: every module, test, program and
benchmark has a target, every listed source exists, and each target's
`deps` are exactly the project modules its sources import."""

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
    name = re.search(r'name = "([\w]+)"', body).group(1)

    def listed(attr, body=body):
      found = re.search(attr + r' = \[(.*?)\]', body, re.S)
      return re.findall(r'"([^"]+)"', found.group(1)) if found else []
    targets[name] = (listed('srcs'), listed('deps'))
  return targets


def _module_target(path):
  """The BUILD target of a project source file (None for others)."""
  if path == 'acme_impala/__init__.py':
    return 'acme_impala'
  if path.startswith('acme_impala/configs/'):
    return 'configs'
  if path.startswith('acme_impala/k8s/'):
    return 'k8s'
  if path.startswith(('acme_impala/', 'tests/')):
    return os.path.basename(path)[:-3]
  return None


def _imported_targets(path):
  """Targets of the project modules that `path` imports."""
  with open(os.path.join(ROOT, path)) as f:
    tree = ast.parse(f.read())
  found = set()
  for node in ast.walk(tree):
    names = []
    if isinstance(node, ast.ImportFrom) and node.module:
      if node.module == 'acme_impala':
        names = [f'acme_impala.{a.name}' for a in node.names]
      elif node.module.startswith('acme_impala.'):
        names = [node.module]
    elif isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    for name in names:
      parts = name.split('.')
      if parts[0] == 'acme_impala' and len(parts) > 1:
        found.add(parts[1])  # A package (configs, k8s) is one target.
      elif len(parts) == 1 and os.path.exists(
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
  files = (glob.glob('acme_impala/*.py', root_dir=ROOT) +
           glob.glob('acme_impala/configs/*.py', root_dir=ROOT) +
           glob.glob('acme_impala/k8s/*.py', root_dir=ROOT) +
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
    # A package's own modules (configs/*, k8s/*) import each other freely.
    imported.discard(name)
    expected = sorted(f':{t}' for t in imported)
    if sorted(deps) != expected:
      wrong.append(f'{name}: deps {sorted(deps)}, imports {expected}')
    for dep in deps:
      assert dep[1:] in targets, f'{name}: unknown dep {dep}'
  assert not wrong, 'BUILD deps differ from the imports:\n' + '\n'.join(wrong)


def test_module_targets_are_named_after_their_module():
  for name, (srcs, _) in _targets().items():
    for src in srcs:
      target = _module_target(src)
      if target is not None:
        assert target == name, (name, src)


def _package_sources():
  return sorted(glob.glob('acme_impala/*.py', root_dir=ROOT) +
                glob.glob('acme_impala/configs/*.py', root_dir=ROOT) +
                glob.glob('acme_impala/k8s/*.py', root_dir=ROOT))


def _parse(path):
  with open(os.path.join(ROOT, path)) as f:
    return ast.parse(f.read())


# Public API of namedtuples despite the underscore.
NAMEDTUPLE_API = ('_fields', '_replace', '_asdict', '_make')


def test_no_module_reaches_into_private_attributes():
  """Only compat.py (the Acme/Sonnet workarounds) may read `x._name` of an
  object that is not the module's own `self`/`cls`."""
  found = []
  for path in _package_sources():
    if path == 'acme_impala/compat.py':
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
  """Reverb tables, table names and datasets appear in builder.py only
  (types.py holds the names)."""
  found = []
  for path in _package_sources():
    if path in ('acme_impala/builder.py', 'acme_impala/types.py'):
      continue
    for node in ast.walk(_parse(path)):
      if isinstance(node, ast.Attribute) and (
          node.attr in ('QUEUE_TABLE', 'REPLAY_TABLE', 'Table',
                        'TrajectoryDataset')):
        found.append(f'{path}:{node.lineno} .{node.attr}')
  assert not found, found


def test_readme_layout_lists_every_module():
  with open(os.path.join(ROOT, 'README.md')) as f:
    readme = f.read()
  layout = readme[readme.index('## Layout'):]
  layout = layout[:layout.index('\n## ', 1)]
  missing = [path for path in glob.glob('acme_impala/*.py', root_dir=ROOT)
             if not path.endswith('__init__.py') and f'`{path}`' not in layout]
  assert not missing, f'README layout table lacks {sorted(missing)}'
