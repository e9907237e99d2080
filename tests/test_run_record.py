"""The run's record (`<logdir>/config.json`) and the --restore check."""

import json
import os
import re

import pytest

from acme_impala.agent import config as config_lib
from acme_impala.agent import presets
from acme_impala.distributed import run_record


def _record(logdir, *configs_):
  run_record.write_record(logdir, run_record.make_record(
      configs_, [c.with_annealing_horizon(1000) for c in configs_],
      {'max_actor_steps': 1000, 'num_actors': 2}))


@pytest.mark.parametrize('name', presets.names())
def test_configs_round_trip_through_json(tmp_path, name):
  config = presets.get_config(name).replace(mlp_hidden_sizes=(7, 5),
                                            kl_threshold=0.25)
  _record(str(tmp_path), config)
  with open(os.path.join(tmp_path, 'config.json')) as f:
    record = json.load(f)  # Plain JSON, readable without acme_impala.
  assert record['config']['mlp_hidden_sizes'] == [7, 5]
  restored = run_record.config_from_dict(record['config'])
  assert restored == config
  assert isinstance(restored.mlp_hidden_sizes, tuple)
  assert run_record.load_config(str(tmp_path)) == (
      config.with_annealing_horizon(1000))


def test_record_holds_options_versions_and_commit(tmp_path):
  _record(str(tmp_path), presets.get_config('cartpole'))
  record = run_record.read_record(str(tmp_path))
  assert record['options'] == {'max_actor_steps': 1000, 'num_actors': 2}
  assert record['versions']['tensorflow'] == '2.8.4'
  assert record['versions']['dm-acme'] == '0.4.0'
  assert re.fullmatch(r'\d+\.\d+\.\d+', record['versions']['python'])
  # This test runs in a git checkout (CI clones the repository).
  assert re.fullmatch(r'[0-9a-f]{40}(-dirty)?', record['git_commit'])
  assert run_record.git_commit(str(tmp_path)) is None  # Not a checkout.


def test_only_code_changes_make_a_checkout_dirty(tmp_path):
  """Benchmark outputs under benchmarks/results/ are rewritten by their
  summaries; a commit stamped after that must still read clean."""
  import subprocess  # pylint: disable=g-import-not-at-top
  def git(*args):
    subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@t',
                    *args], cwd=tmp_path, check=True, capture_output=True)
  (tmp_path / 'benchmarks' / 'results').mkdir(parents=True)
  (tmp_path / 'benchmarks' / 'results' / 'table.csv').write_text('1\n')
  (tmp_path / 'code.py').write_text('x = 1\n')
  git('init', '-q')
  git('add', '.')
  git('commit', '-q', '-m', 'first')
  sha = run_record.git_commit(str(tmp_path))
  assert re.fullmatch(r'[0-9a-f]{40}', sha)
  (tmp_path / 'benchmarks' / 'results' / 'table.csv').write_text('2\n')
  assert run_record.git_commit(str(tmp_path / 'benchmarks')) == sha
  (tmp_path / 'code.py').write_text('x = 2\n')
  assert run_record.git_commit(str(tmp_path)) == sha + '-dirty'


def test_restore_differences_name_each_changed_field(tmp_path):
  config = presets.get_config('cartpole')
  _record(str(tmp_path), config)
  record = run_record.read_record(str(tmp_path))
  changed = config.replace(learning_rate=0.01, network='mlp_lstm',
                           mlp_hidden_sizes=(32,), discount=0.5)
  assert run_record.restore_differences(record, [changed]) == [
      f'config.discount: {config.discount!r} recorded, 0.5 given',
      f'config.learning_rate: {config.learning_rate!r} recorded, 0.01 given',
      f'config.mlp_hidden_sizes: {list(config.mlp_hidden_sizes)!r} recorded, '
      '[32] given']
  with pytest.raises(ValueError, match=r'config\.learning_rate: .* 0\.01'):
    run_record.check_restore(str(tmp_path), [changed])


def test_restore_accepts_run_options_and_mechanics(tmp_path):
  config = presets.get_config('cartpole')
  _record(str(tmp_path), config)
  # The annealing horizon comes from the budget: the given (not effective)
  # configs are compared, so a new budget passes.
  run_record.check_restore(str(tmp_path), [config.replace(
      checkpoint_period_minutes=1.0, compile_mode='none', prefetch_size=4,
      env_threads=2)])


def test_records_older_than_the_engine_field_ran_gymnasium(tmp_path):
  """A record written before `env_engine` existed ran the gymnasium
  engine: it restores as such, whatever today's default, and a restore
  asking for EnvPool names the change."""
  config = presets.get_config('cartpole').replace(env_engine='gymnasium')
  _record(str(tmp_path), config)
  path = os.path.join(tmp_path, 'config.json')
  with open(path) as f:
    record = json.load(f)
  for key in ('configs', 'effective_configs'):
    for values in record[key]:
      del values['env_engine'], values['env_threads']
  with open(path, 'w') as f:
    json.dump(record, f)
  assert run_record.load_config(str(tmp_path)).env_engine == 'gymnasium'
  run_record.check_restore(str(tmp_path), [config])
  with pytest.raises(ValueError,
                     match="config.env_engine: 'gymnasium' recorded, "
                     "'envpool' given"):
    run_record.check_restore(str(tmp_path),
                             [config.replace(env_engine='envpool')])


def test_sweep_differences_name_the_agent(tmp_path):
  a = presets.get_config('cartpole').replace(replay_fraction=0.875)
  _record(str(tmp_path), a, a.replace(learning_rate=1e-3))
  record = run_record.read_record(str(tmp_path))
  assert run_record.restore_differences(
      record, [a, a.replace(learning_rate=2e-3)]) == [
          'agent_1: config.learning_rate: 0.001 recorded, 0.002 given']
  assert run_record.restore_differences(record, [a]) == [
      'number of agents: 2 recorded, 1 given']


def test_missing_and_bad_records(tmp_path):
  logdir = str(tmp_path)
  assert run_record.read_record(logdir) is None
  run_record.check_restore(logdir, [presets.get_config('cartpole')])
  with pytest.raises(ValueError, match='config.json does not exist'):
    run_record.load_config(logdir)
  with open(os.path.join(logdir, 'config.json'), 'w') as f:
    f.write('{"configs": [')
  with pytest.raises(ValueError, match='config.json is not valid JSON'):
    run_record.read_record(logdir)
  with pytest.raises(config_lib.ConfigError, match=r"\['no_such_field'\]"):
    run_record.config_from_dict({'no_such_field': 1})
