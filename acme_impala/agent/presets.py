"""The configs users pick with `--config`: a preset by name or a file by path.

The presets are the files of the top-level `configs/` folder, one per preset
(`configs/cartpole.py`, `configs/atari.py`, ...), each with a
`get_config() -> IMPALAConfig`, as DeepMind projects keep theirs. `--config`
takes a preset's name (`atari`) or the path of any such file
(`configs/atari.py`, `~/my_sweep/breakout.py`).

From a checkout the folder is found beside the package; a non-editable
install carries it inside the package as `acme_impala/configs/` (setup.py
maps it there), so either way `get_config('atari')` finds it.
"""

import importlib.util
import os
from typing import List, Optional

from acme_impala.agent import config as config_lib

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A checkout's top-level configs/, then an installed package's copy of it.
_SEARCH = (os.path.join(os.path.dirname(_PACKAGE), 'configs'),
           os.path.join(_PACKAGE, 'configs'))


def config_dir() -> Optional[str]:
  """The folder holding the presets (None if neither place has one)."""
  for folder in _SEARCH:
    if os.path.isfile(os.path.join(folder, 'cartpole.py')):
      return folder
  return None


def names() -> List[str]:
  """The presets' names, sorted: the `.py` files of `config_dir()`."""
  folder = config_dir()
  if folder is None:
    return []
  return sorted(f[:-3] for f in os.listdir(folder)
                if f.endswith('.py') and not f.startswith('_'))


def _is_path(name_or_path: str) -> bool:
  return name_or_path.endswith('.py') or os.sep in name_or_path


def _load(path: str, what: str) -> config_lib.IMPALAConfig:
  spec = importlib.util.spec_from_file_location(
      f'acme_impala_config_{abs(hash(path))}', path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except Exception as error:  # pylint: disable=broad-except
    raise config_lib.ConfigError(
        f'Config file {what} failed to load: {type(error).__name__}: '
        f'{error}') from error
  get = getattr(module, 'get_config', None)
  if not callable(get):
    raise config_lib.ConfigError(
        f'Config file {what} has no get_config() function; a config file '
        'defines get_config() returning an IMPALAConfig.')
  try:
    config = get()
  except config_lib.ConfigError:
    raise
  except Exception as error:  # pylint: disable=broad-except
    raise config_lib.ConfigError(
        f'get_config() of {what} raised {type(error).__name__}: '
        f'{error}') from error
  if not isinstance(config, config_lib.IMPALAConfig):
    raise config_lib.ConfigError(
        f'get_config() of {what} returned {type(config).__name__}, expected '
        'an IMPALAConfig.')
  return config


def preset_name(name_or_path: str) -> Optional[str]:
  """The preset a `--config` value means (a name, or the path of a preset's
  file, e.g. configs/atari.py), or None for a file that is not a preset."""
  if not _is_path(name_or_path):
    return name_or_path
  folder = config_dir()
  path = os.path.abspath(os.path.expanduser(name_or_path))
  if folder and os.path.dirname(path) == os.path.abspath(folder):
    name = os.path.basename(path)[:-len('.py')]
    return name if name in names() else None
  return None


def get_config(name_or_path: str) -> config_lib.IMPALAConfig:
  """The IMPALAConfig of a preset (`'atari'`) or of a config file (a path
  ending in `.py`); raises ConfigError naming the bad value and the choices."""
  if not isinstance(name_or_path, str) or not name_or_path:
    raise config_lib.ConfigError(
        f'--config={name_or_path!r}: expected a preset name, one of '
        f'{names()}, or the path of a config file (*.py).')
  if _is_path(name_or_path):
    path = os.path.abspath(os.path.expanduser(name_or_path))
    if not os.path.isfile(path):
      raise config_lib.ConfigError(
          f'--config={name_or_path!r}: no such config file; expected a '
          f'preset name, one of {names()}, or the path of an existing '
          'config file (*.py).')
    return _load(path, repr(name_or_path))
  if name_or_path not in names():
    raise config_lib.ConfigError(
        f'Unknown config {name_or_path!r}; known configs: {names()} (or the '
        'path of a config file, e.g. configs/atari.py).')
  return _load(os.path.join(config_dir(), name_or_path + '.py'),
               repr(name_or_path))
