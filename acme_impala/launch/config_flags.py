"""`--config.<field>=<value>` command-line overrides of IMPALAConfig fields.

Values are parsed by the field's declared type (int, float, bool, str,
Optional[...] with 'none', tuples as comma-separated lists), and an unknown
field or unparsable value raises ValueError naming it, before anything runs.
"""

import dataclasses
import typing
from typing import Any, Dict, List, Sequence, Tuple

from acme_impala.agent import config as config_lib

PREFIX = '--config.'


def split_config_overrides(argv: Sequence[str]
                           ) -> Tuple[List[str], List[str]]:
  """Separates `--config.x=v` arguments (absl cannot declare them)."""
  rest, overrides = [], []
  for arg in argv:
    (overrides if arg.startswith(PREFIX) else rest).append(arg)
  return rest, overrides


def _parse_value(name: str, text: str, tp) -> Any:
  origin = typing.get_origin(tp)
  args = typing.get_args(tp)
  if origin is typing.Union and type(None) in args:
    if text.lower() in ('none', 'null', ''):
      return None
    inner = [a for a in args if a is not type(None)][0]
    return _parse_value(name, text, inner)
  if origin in (tuple, Tuple):
    items = [t for t in text.split(',') if t.strip()]
    return tuple(_parse_value(name, t.strip(), args[0]) for t in items)
  if tp is bool:
    lowered = text.lower()
    if lowered in ('true', '1', 'yes'):
      return True
    if lowered in ('false', '0', 'no'):
      return False
    raise ValueError(f'--config.{name}={text!r}: expected true or false.')
  if tp is int:
    try:
      return int(text.replace('_', ''))
    except ValueError:
      raise ValueError(f'--config.{name}={text!r}: expected an integer.'
                       ) from None
  if tp is float:
    try:
      return float(text)
    except ValueError:
      raise ValueError(f'--config.{name}={text!r}: expected a number.'
                       ) from None
  return text


def parse_overrides(args: Sequence[str]) -> Dict[str, Any]:
  """['--config.batch_size=16', ...] -> {'batch_size': 16, ...}."""
  hints = typing.get_type_hints(config_lib.IMPALAConfig)
  known = {f.name for f in dataclasses.fields(config_lib.IMPALAConfig)}
  overrides = {}
  for arg in args:
    body = arg[len(PREFIX):]
    if '=' not in body:
      raise ValueError(f'{arg!r}: expected --config.<field>=<value>.')
    name, text = body.split('=', 1)
    if name not in known:
      raise ValueError(f'{arg!r}: unknown config field {name!r}; known '
                       f'fields: {sorted(known)}.')
    overrides[name] = _parse_value(name, text, hints[name])
  return overrides


def _format_value(value: Any) -> str:
  if value is None:
    return 'none'
  if isinstance(value, bool):
    return 'true' if value else 'false'
  if isinstance(value, tuple):
    return ','.join(_format_value(v) for v in value)
  return str(value)


def format_overrides(overrides: Dict[str, Any]) -> List[str]:
  """{'batch_size': 16, ...} -> ['--config.batch_size=16', ...], the inverse
  of `parse_overrides` (what a launcher passes on to node processes)."""
  return [f'{PREFIX}{name}={_format_value(value)}'
          for name, value in sorted(overrides.items())]
