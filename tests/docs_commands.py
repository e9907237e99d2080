"""The shell commands the README and docs/ show, as tests find and run them
(tests/test_docs.py; the README's example run in conftest.py)."""

import glob
import os
import re
import shlex
import signal
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ['README.md'] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, 'docs',
                                                             '*.md')))


def documented_commands():
  """(file, command) for every shell command in the docs' code blocks and
  every inline `python ...` / `bash ...`, continuation lines joined."""
  found = []
  for doc in DOCS:
    with open(os.path.join(ROOT, doc)) as f:
      text = f.read()
    for block in re.findall(r'```[a-z]*\n(.*?)```', text, re.S):
      for line in block.replace('\\\n', ' ').splitlines():
        line = line.split('  #')[0].strip()
        if re.match(r'(bash|python|kubectl|gcloud|docker) ', line):
          found.append((doc, ' '.join(line.split())))
    for inline in re.findall(r'`((?:python|bash) [^`]+)`', text):
      found.append((doc, ' '.join(inline.split())))
  return found


def readme_command(pattern: str) -> list:
  """The README's command matching `pattern` (a full-match regex), as argv."""
  matches = [c for doc, c in documented_commands()
             if doc == 'README.md' and re.fullmatch(pattern, c)]
  assert matches, pattern
  return shlex.split(matches[0])


def small(argv, **flags):
  """`argv` with each `--<name>=...` in `flags` replaced (or added)."""
  out = [a for a in argv if a.split('=')[0].lstrip('-') not in flags]
  return out + [f'--{k}={v}' for k, v in flags.items()]


def run(argv, timeout=400):
  """Runs `argv` from the repository root; (exit status, output). Past
  `timeout` seconds its whole process group is killed and the output so
  far is returned with a last line saying so (status -9), so a failing
  test shows where the command stood."""
  proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True,
                          errors='replace', start_new_session=True)
  try:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    return -9, f'{out}\n[killed: still running after {timeout} s]'
