"""The run's record: `<logdir>/config.json`.

Written by the launcher before any node starts, so a run directory always
says what made it: every agent's config as given (`configs`, the
hyperparameters), as it ran (`effective_configs`: the learning-rate
annealing horizon derived from the budget), the run options (budget, actors,
launcher flags), the package versions and the git commit of the checkout
when there is one.

`--restore` compares the configs given now with the recorded ones
(`check_restore`): a changed hyperparameter is refused, naming each field
with its old and new value, because the checkpoints (network shapes,
optimiser state, Reverb table signatures) and the run's curves belong to the
recorded values. Run options (the budget, the number of actors, the
launcher's flags) and the mechanics in `RESTORE_MUTABLE_FIELDS` may change.

`load_config(logdir)` gives the config back (`programs/evaluate.py`).
"""

import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import typing
from typing import Any, Dict, List, Mapping, Optional, Sequence

from acme_impala.agent import config as config_lib

CONFIG_FILE = 'config.json'
FORMAT_VERSION = 1
# Config fields that change how fast a run goes or how often it saves, not
# what it learns or what its checkpoints and tables hold.
RESTORE_MUTABLE_FIELDS = ('checkpoint_period_minutes', 'compile_mode',
                          'prefetch_size', 'env_threads', 'warm_up_update',
                          'learner_intra_op_threads', 'replica_check_steps')
# What a run's numbers depend on, for the record.
_PACKAGES = ('tensorflow', 'dm-acme', 'dm-reverb', 'dm-launchpad',
             'dm-sonnet', 'trfl', 'numpy', 'gymnasium', 'ale-py', 'minatar',
             'envpool')
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def config_to_dict(config: config_lib.IMPALAConfig) -> Dict[str, Any]:
  return dataclasses.asdict(config)


# Fields added after records began, with the value a record without them ran
# with (a later default must not be read into an older run).
_VALUES_BEFORE_FIELDS = {'env_engine': 'gymnasium', 'env_threads': 0,
                         'use_lstm': True, 'env_ids': ()}


def _with_older_values(values: Mapping[str, Any]) -> Dict[str, Any]:
  return {**_VALUES_BEFORE_FIELDS, **values}


def config_from_dict(values: Mapping[str, Any]) -> config_lib.IMPALAConfig:
  """The IMPALAConfig of a recorded dict (JSON lists back to tuples);
  ConfigError naming any field this version does not know."""
  values = _with_older_values(values)
  hints = typing.get_type_hints(config_lib.IMPALAConfig)
  known = {f.name for f in dataclasses.fields(config_lib.IMPALAConfig)}
  unknown = sorted(set(values) - known)
  if unknown:
    raise config_lib.ConfigError(
        f'recorded config field(s) {unknown} are unknown to this version of '
        f'acme_impala; known fields: {sorted(known)}.')
  fields = {}
  for name, value in values.items():
    if isinstance(value, list) and typing.get_origin(hints[name]) is tuple:
      value = tuple(value)
    fields[name] = value
  return config_lib.IMPALAConfig(**fields)


def package_versions() -> Dict[str, str]:
  versions = {'python': platform.python_version()}
  for name in _PACKAGES:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      pass
  return versions


def git_commit(path: str = _ROOT) -> Optional[str]:
  """The commit of the checkout holding `path` ('<sha>-dirty' with
  uncommitted changes to tracked files), None outside a git checkout.
  Changes under benchmarks/results/ do not count: they are the benchmarks'
  outputs (a summary rewrites them), not code a run could depend on."""
  try:
    sha = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=path,
                         capture_output=True, text=True, timeout=10)
    if sha.returncode != 0:
      return None
    dirty = subprocess.run(['git', 'status', '--porcelain',
                            '--untracked-files=no', '--', ':/',
                            ':(top,exclude)benchmarks/results'], cwd=path,
                           capture_output=True, text=True, timeout=10)
  except (OSError, subprocess.SubprocessError):
    return None
  return sha.stdout.strip() + ('-dirty' if dirty.stdout.strip() else '')


def make_record(configs: Sequence[config_lib.IMPALAConfig],
                effective_configs: Sequence[config_lib.IMPALAConfig],
                options: Mapping[str, Any]) -> Dict[str, Any]:
  """The JSON-able record of a run. `configs[0]` is also under `config`
  (a single agent's run has one)."""
  return {
      'format': FORMAT_VERSION,
      'config': config_to_dict(configs[0]),
      'configs': [config_to_dict(c) for c in configs],
      'effective_configs': [config_to_dict(c) for c in effective_configs],
      'options': dict(options),
      'versions': package_versions(),
      'git_commit': git_commit(),
      'argv': list(sys.argv),
      'written': datetime.datetime.now().astimezone().isoformat(
          timespec='seconds'),
  }


def check_logdir(logdir: str) -> None:
  """Raises ValueError naming `logdir` if a run cannot use it: an existing
  path that is not a directory, or one this user cannot write (the nearest
  existing ancestor of a new one). Nothing is created."""
  if not logdir:
    raise ValueError('--logdir is empty; expected a directory path.')
  path = os.path.abspath(logdir)
  if os.path.exists(path) and not os.path.isdir(path):
    raise ValueError(f'--logdir={logdir!r} is an existing file; expected a '
                     'directory (a new one, or a run\'s to --restore).')
  existing = path
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise ValueError(f'--logdir={logdir!r}: {existing!r} is a file, so the '
                     'directory cannot be made.')
  # A probe, not os.access: root passes access() where mkdir still fails
  # (read-only mounts, /proc).
  try:
    probe = tempfile.mkdtemp(prefix='.logdir-probe-', dir=existing)
  except OSError as error:
    raise ValueError(f'--logdir={logdir!r}: cannot create anything in '
                     f'{existing!r} ({error.strerror}).') from None
  os.rmdir(probe)


def path_of(logdir: str) -> str:
  return os.path.join(logdir, CONFIG_FILE)


def write_record(logdir: str, record: Mapping[str, Any]) -> str:
  path = path_of(logdir)
  os.makedirs(logdir, exist_ok=True)
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(record, f, indent=1, sort_keys=True)
    f.write('\n')
  os.replace(tmp, path)
  return path


def read_record(logdir: str) -> Optional[Dict[str, Any]]:
  """The recorded dict, None when the run has no config.json; ValueError
  naming the file when it is not a record."""
  path = path_of(logdir)
  try:
    with open(path) as f:
      record = json.load(f)
  except FileNotFoundError:
    return None
  except ValueError as error:
    raise ValueError(f'{path} is not valid JSON: {error}') from None
  if not isinstance(record, dict) or 'configs' not in record:
    raise ValueError(f'{path} holds no run record (no "configs" entry).')
  return record


def restore_differences(record: Mapping[str, Any],
                        configs: Sequence[config_lib.IMPALAConfig]
                        ) -> List[str]:
  """'config.<field>: <old> recorded, <new> given' for every hyperparameter
  that differs (with an `agent_<i>` prefix in a sweep)."""
  recorded = record['configs']
  if len(recorded) != len(configs):
    return [f'number of agents: {len(recorded)} recorded, {len(configs)} '
            'given']
  differences = []
  for i, (old, config) in enumerate(zip(recorded, configs)):
    old = _with_older_values(old)
    new = json.loads(json.dumps(config_to_dict(config)))
    prefix = f'agent_{i}: ' if len(configs) > 1 else ''
    for name in sorted(set(old) | set(new)):
      if name in RESTORE_MUTABLE_FIELDS or old.get(name) == new.get(name):
        continue
      differences.append(f'{prefix}config.{name}: {old.get(name)!r} recorded, '
                         f'{new.get(name)!r} given')
  return differences


def check_restore(logdir: str,
                  configs: Sequence[config_lib.IMPALAConfig]) -> None:
  """Raises ValueError naming every changed hyperparameter of a restored
  run; a run without a record (made before records existed) passes."""
  record = read_record(logdir)
  if record is None:
    return
  differences = restore_differences(record, configs)
  if differences:
    raise ValueError(
        f'--restore of {logdir!r} with changed hyperparameters: '
        + '; '.join(differences) + f'. The checkpoints belong to the values '
        f'in {path_of(logdir)}; restore with those, or start a new logdir. '
        'Run options (budget, actors) may change.')


def load_config(logdir: str, agent: int = 0) -> config_lib.IMPALAConfig:
  """The config agent `agent` of the run in `logdir` ran with (effective:
  annealing horizon included)."""
  record = read_record(logdir)
  if record is None:
    raise ValueError(f'{path_of(logdir)} does not exist: {logdir!r} is not a '
                     'run directory of programs/impala_lp.py.')
  configs = record.get('effective_configs') or record['configs']
  if not 0 <= agent < len(configs):
    raise ValueError(f'agent={agent} is out of range: the run in {logdir!r} '
                     f'has {len(configs)} agent(s).')
  return config_from_dict(configs[agent])
