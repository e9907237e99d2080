"""Named configurations: `acme_impala.configs.get_config(name)` returns an IMPALAConfig."""

import importlib

from acme_impala import config as config_lib

CONFIG_NAMES = ('cartpole', 'atari')


def get_config(name: str) -> config_lib.IMPALAConfig:
  """Returns the IMPALAConfig of the config module `configs/<name>.py`."""
  if name not in CONFIG_NAMES:
    raise config_lib.ConfigError(
        f'Unknown config {name!r}; known configs: {list(CONFIG_NAMES)}.')
  module = importlib.import_module(f'acme_impala.configs.{name}')
  return module.get_config()
