"""--config.<field>=<value> parsing by the field's declared type."""

import pytest

from acme_impala.launch import config_flags


def test_split_and_parse_typed_overrides():
  argv, texts = config_flags.split_config_overrides(
      ['prog', '--num_actors=2', '--config.batch_size=16',
       '--config.learning_rate=1e-3', '--config.mlp_hidden_sizes=32,32',
       '--config.clip_rho_threshold=none', '--config.use_prev_action_reward=0',
       '--config.env_id=ALE/Pong-v5'])
  assert argv == ['prog', '--num_actors=2']
  overrides = config_flags.parse_overrides(texts)
  assert overrides == {
      'batch_size': 16, 'learning_rate': 1e-3, 'mlp_hidden_sizes': (32, 32),
      'clip_rho_threshold': None, 'use_prev_action_reward': False,
      'env_id': 'ALE/Pong-v5'}


@pytest.mark.parametrize('arg,match', [
    ('--config.bogus=1', "unknown config field 'bogus'"),
    ('--config.batch_size=big', "batch_size='big': expected an integer"),
    ('--config.discount=high', "discount='high': expected a number"),
    ('--config.use_prev_action_reward=maybe', 'expected true or false'),
    ('--config.batch_size', 'expected --config.<field>=<value>'),
])
def test_bad_overrides_name_the_argument(arg, match):
  with pytest.raises(ValueError, match=match):
    config_flags.parse_overrides([arg])
