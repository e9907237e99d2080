"""Tests of acme_impala/envs/multitask.py and the multi-task agent's parts
(issue 39 item 1): tasks, compatible specs, task assignment, scores."""

import json
import os
import re
import subprocess
import sys

import dm_env
import numpy as np
import pytest

from acme_impala.agent import builder as builder_lib
from acme_impala.agent import config as config_lib
from acme_impala.distributed import program
from acme_impala.envs import minatar
from acme_impala.envs import multitask
from acme_impala.envs import registry
from acme_impala.launch import curves

# Channels of each game's own observation (MinAtar 1.0.15).
CHANNELS = {'Asterix': 4, 'Breakout': 4, 'Freeway': 7, 'Seaquest': 10,
            'SpaceInvaders': 6}


def test_a_suite_name_expands_in_place():
  assert multitask.task_ids(['minatar5']) == tuple(minatar.ids())
  assert multitask.task_ids(['MinAtar/Freeway-v1', 'minatar5'])[:2] == (
      'MinAtar/Freeway-v1', 'MinAtar/Asterix-v1')


@pytest.mark.parametrize('env_ids,message', [
    (('MinAtar/Breakout-v1',), 'at least 2 tasks'),
    (('MinAtar/Breakout-v1', 'MinAtar/Breakout-v1'),
     "['MinAtar/Breakout-v1'] given more than once"),
    (('minatar5', 'MinAtar/Seaquest-v1'), 'given more than once'),
    (('MinAtar/Breakout-v1', 'CartPole-v1'), "'CartPole-v1' cannot be a task"),
    (('minatar4',), "'minatar4' cannot be a task"),
])
def test_bad_task_lists_are_refused_naming_the_entry(env_ids, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    multitask.validate_task_ids(env_ids)


@pytest.mark.parametrize('game', sorted(CHANNELS))
def test_a_task_keeps_its_own_channels_and_pads_with_zeros(game):
  env_id = f'MinAtar/{game}-v1'
  own = registry.make_environment(env_id, seed=3, oar=False)
  padded = registry.make_environment(env_id, seed=3, oar=False,
                                     full_action_set=True, channels=10)
  assert own.observation_spec().shape == (10, 10, CHANNELS[game])
  assert padded.observation_spec().shape == (10, 10, 10)
  assert padded.observation_spec().dtype == own.observation_spec().dtype
  # Action 0 is the no-op in both sets: the same episode, step by step.
  a, b = own.reset(), padded.reset()
  for _ in range(60):
    np.testing.assert_array_equal(b.observation[..., :CHANNELS[game]],
                                  a.observation)
    assert not b.observation[..., CHANNELS[game]:].any()
    assert a.reward == b.reward and a.step_type == b.step_type
    if a.last():
      break
    a, b = own.step(0), padded.step(0)


def test_the_full_action_set_is_the_games_raw_actions():
  """Breakout's minimal set is (no-op, left, right) = raw 0, 1, 3: its
  action 2 is raw 3 (right); in the full set action 3 is right, 2 (up)
  does nothing."""
  def paddle_column(env, actions):
    timestep = env.reset()
    for action in actions:
      timestep = env.step(action)
    return int(np.argmax(timestep.observation[9, :, 0]))  # Paddle channel.
  minimal = registry.make_environment('MinAtar/Breakout-v1', seed=0, oar=False)
  full = registry.make_environment('MinAtar/Breakout-v1', seed=0, oar=False,
                                   full_action_set=True)
  assert minimal.action_spec().num_values == 3
  assert full.action_spec().num_values == minatar.NUM_FULL_ACTIONS
  start = paddle_column(full, [])
  assert paddle_column(full, [3, 3]) == paddle_column(minimal, [2, 2]) == (
      start + 2)
  assert paddle_column(full, [2, 2]) == start


def test_every_task_of_the_suite_has_one_spec():
  spec = registry.suite_environment_spec(['minatar5'])
  assert spec.observations.observation.shape == (10, 10, 10)
  assert spec.actions.num_values == minatar.NUM_FULL_ACTIONS
  kwargs = registry.task_kwargs(['minatar5'])
  assert kwargs == dict(full_action_set=True, channels=10)
  for env_id in minatar.ids():
    assert registry.environment_spec(env_id, **kwargs) == spec
  # A suite without Seaquest pads to its own largest (Freeway's 7).
  assert registry.task_kwargs(['MinAtar/Breakout-v1', 'MinAtar/Freeway-v1'])[
      'channels'] == 7


def test_actors_are_spread_over_the_tasks_in_fixed_numbers():
  config = config_lib.IMPALAConfig(env_ids=('minatar5',), network='minatar')
  builder = builder_lib.IMPALABuilder(
      config, registry.suite_environment_spec(config.env_ids))
  tasks = [builder.task_of_actor(i) for i in range(10)]
  assert tasks == list(minatar.ids()) * 2
  assert builder.environment_kwargs == dict(full_action_set=True, channels=10)
  single = builder_lib.IMPALABuilder(config_lib.IMPALAConfig(),
                                     registry.environment_spec('CartPole-v1'))
  assert single.tasks == ('CartPole-v1',) and single.environment_kwargs == {}


def test_a_run_needs_the_same_number_of_actors_per_task(tmp_path):
  config = config_lib.IMPALAConfig(env_ids=('minatar5',), network='minatar')
  with pytest.raises(ValueError, match=r'num_actors=7 .* multiple of 5'):
    program.prepare_run([config], str(tmp_path / 'run'), 1000, num_actors=7)
  assert not (tmp_path / 'run').exists()


def test_normalised_and_suite_scores_by_hand():
  breakout, invaders = 'MinAtar/Breakout-v1', 'MinAtar/SpaceInvaders-v1'
  r, ref = minatar.RANDOM_RETURNS['Breakout'], minatar.AC_LAMBDA_5M['Breakout']
  assert multitask.normalised_score(breakout, r) == 0
  assert multitask.normalised_score(breakout, ref) == pytest.approx(1)
  halfway = (r + ref) / 2
  assert multitask.normalised_score(breakout, halfway) == pytest.approx(0.5)
  # Above the reference counts as 1 (capped); below random, as it is.
  far = 10 * ref
  r2 = minatar.RANDOM_RETURNS['SpaceInvaders']
  assert multitask.suite_score({breakout: far, invaders: r2}) == (
      pytest.approx(0.5))
  assert multitask.suite_score({breakout: halfway, invaders: r2 - 1}) == (
      pytest.approx((0.5 - 1 / (185 - r2)) / 2))


def test_suite_score_curve_waits_for_every_task_and_uses_each_ones_last_mean():
  breakout, invaders = 'MinAtar/Breakout-v1', 'MinAtar/SpaceInvaders-v1'
  r_b, r_i = minatar.RANDOM_RETURNS['Breakout'], minatar.RANDOM_RETURNS[
      'SpaceInvaders']
  episodes = {
      breakout: (np.array([10., 30.]), np.array([r_b, 17.5])),
      invaders: (np.array([20.]), np.array([r_i])),
  }
  steps, scores = curves.suite_score_curve(episodes, window=1)
  np.testing.assert_array_equal(steps, [20., 30.])
  np.testing.assert_allclose(scores, [0., 0.5])
  # A window of 2 averages Breakout's two episodes at step 30.
  _, scores = curves.suite_score_curve(episodes, window=2)
  expected = multitask.normalised_score(breakout, (r_b + 17.5) / 2) / 2
  np.testing.assert_allclose(scores, [0., expected])
  assert curves.suite_score_curve({breakout: episodes[breakout],
                                   invaders: (np.zeros(0), np.zeros(0))}
                                  )[0].size == 0


def test_the_oar_observation_of_a_padded_task():
  env = registry.make_environment('MinAtar/Asterix-v1', seed=0,
                                  full_action_set=True, channels=10)
  timestep = env.reset()
  assert timestep.step_type == dm_env.StepType.FIRST
  assert timestep.observation.observation.shape == (10, 10, 10)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_multi_task_program_logs_each_task_and_the_suite_score(tmp_path):
  """One learner, two tasks, an actor and an evaluator per task: each
  evaluator logs its own task's episodes, the terminal shows the suite
  score, and the run draws its curves per task."""
  logdir = tmp_path / 'mt'
  tasks = ('MinAtar/Breakout-v1', 'MinAtar/Asterix-v1')
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'programs', 'impala_lp.py'),
       '--config=minatar', f'--config.env_ids={",".join(tasks)}',
       '--config.envs_per_actor=4', '--num_actors=2', '--eval_episodes=2',
       '--max_actor_steps=4000', '--progress_interval_s=2',
       f'--logdir={logdir}'],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  record = json.loads((logdir / 'config.json').read_text())
  assert tuple(record['configs'][0]['env_ids']) == tasks
  for i, task in enumerate(tasks):
    log = (logdir / 'nodes' / f'actor-{i}.log').read_text()
    assert f'actor_{i}: plays task {task} ({i + 1} of 2)' in log
    rows = curves.read_csv(str(
        logdir / 'logs' / f'evaluator_{multitask.task_name(task)}' /
        'logs.csv'))
    assert len(rows.get('episode_return', [])) >= 2, task
  assert not (logdir / 'logs' / 'evaluator').exists()
  assert 'suite score' in proc.stdout
  assert (logdir / 'curves.png').exists()
  assert (logdir / 'curves_tasks.png').exists()
  assert curves.read_run(str(logdir)).episode_source == 'suite'
  # evaluate.py plays any one task of the run with its one network.
  evaluate = [sys.executable, os.path.join(ROOT, 'programs', 'evaluate.py'),
              f'--logdir={logdir}', '--episodes=1']
  played = subprocess.run(evaluate + ['--task=MinAtar/Asterix-v1'], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
  assert played.returncode == 0, played.stdout[-2000:] + played.stderr[-2000:]
  assert 'evaluate: MinAtar/Asterix-v1' in played.stdout
  refused = subprocess.run(evaluate + ['--task=MinAtar/Seaquest-v1'],
                           cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
  assert refused.returncode == 2
  assert "--task='MinAtar/Seaquest-v1': expected one of" in refused.stderr
