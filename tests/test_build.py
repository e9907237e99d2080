"""BUILD stays in step with the files: every module, test, program and
benchmark has a target, and every listed source exists."""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _listed():
  with open(os.path.join(ROOT, 'BUILD')) as f:
    text = f.read()
  return set(re.findall(r'"([\w/]+\.py)"', text)), text


def test_every_listed_source_exists():
  listed, _ = _listed()
  missing = sorted(p for p in listed if not os.path.exists(
      os.path.join(ROOT, p)))
  assert not missing, f'BUILD lists missing files: {missing}'


def test_every_file_has_a_target():
  listed, text = _listed()
  files = (glob.glob('acme_impala/*.py', root_dir=ROOT) +
           glob.glob('acme_impala/configs/*.py', root_dir=ROOT) +
           glob.glob('programs/*.py', root_dir=ROOT) +
           glob.glob('benchmarks/*.py', root_dir=ROOT) +
           glob.glob('tests/test_*.py', root_dir=ROOT))
  files = [f for f in files if not f.endswith('__init__.py') or
           f.startswith('acme_impala/configs/')]
  unlisted = sorted(set(files) - listed)
  assert not unlisted, f'BUILD has no target for: {unlisted}'
  for test in glob.glob('tests/test_*.py', root_dir=ROOT):
    name = os.path.basename(test)[:-3]
    assert f'py_test(name = "{name}"' in text or (
        f'name = "{name}"' in text), name
  for prog in glob.glob('programs/*.py', root_dir=ROOT):
    name = os.path.basename(prog)[:-3]
    assert re.search(r'py_binary\(\s*name = "%s"' % name, text), name
