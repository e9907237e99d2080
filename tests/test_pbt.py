"""Population-based training (IMPALA Appendix F): the decisions of
acme_impala/distributed/pbt.py by hand and by their frequencies, the fitness,
and a real sweep with its controller node (nodes.PBTControllerNode) killed
and resumed."""

import csv
import math
import os
import re
import signal

import numpy as np
import pytest

import program_run

from acme_impala.agent import presets
from acme_impala.distributed import nodes
from acme_impala.distributed import pbt

VALUES = {'learning_rate': 4e-3, 'entropy_cost': 0.01,
          'rmsprop_epsilon': 1e-5, 'discount': 0.99}


class _Fixed:
  """A generator whose draws are given: choice() returns `choice`,
  random() the next of `randoms`."""

  def __init__(self, choice=None, randoms=()):
    self._choice, self._randoms = choice, list(randoms)

  def choice(self, options):
    assert self._choice in options
    return self._choice

  def random(self):
    return self._randoms.pop(0)


@pytest.mark.parametrize('fitness,other,expected', [
    ([0.50, 0.56], 1, 1),      # More than 5 % (absolute) higher: copied.
    ([0.50, 0.55], 1, None),   # Exactly 5 %: not more than.
    ([0.50, 0.40], 1, None),   # Worse.
    ([0.50, math.nan], 1, None),  # Not evaluated yet.
    ([math.nan, 0.90], 1, None),  # The agent itself has no fitness.
])
def test_exploit_copies_only_a_partner_more_than_5_percent_better(
    fitness, other, expected):
  assert pbt.exploit(0, fitness, _Fixed(choice=other)) == expected


def test_exploit_picks_the_partner_uniformly_among_the_others():
  rng = np.random.default_rng(0)
  fitness = [0.0, 1.0, 1.0, 1.0]
  picks = [pbt.exploit(0, fitness, rng) for _ in range(3000)]
  counts = np.bincount(picks, minlength=4)
  assert counts[0] == 0
  np.testing.assert_allclose(counts[1:] / 3000, 1 / 3, atol=0.04)
  assert pbt.exploit(0, [0.5], rng) is None  # A population of one.


def test_explore_by_hand():
  # learning_rate: perturbed (0.1 < 1/3), up (0.2 < 0.5); entropy_cost: not
  # (0.9); rmsprop_epsilon: perturbed (0.3), down (0.7).
  out = pbt.explore(VALUES, _Fixed(randoms=[0.1, 0.2, 0.9, 0.3, 0.7]))
  assert out['learning_rate'] == pytest.approx(4e-3 * 1.2)
  assert out['entropy_cost'] == 0.01
  assert out['rmsprop_epsilon'] == pytest.approx(1e-5 / 1.2)
  assert out['discount'] == 0.99  # Not an adapted parameter.


def test_explore_frequencies_are_the_papers():
  rng = np.random.default_rng(1)
  n = 6000
  outs = [pbt.explore(VALUES, rng) for _ in range(n)]
  for name in pbt.HYPERPARAMETERS:
    ratios = np.array([o[name] / VALUES[name] for o in outs])
    assert set(np.round(ratios, 9)) <= {1.0, round(1.2, 9), round(1 / 1.2, 9)}
    np.testing.assert_allclose(np.mean(ratios != 1.0), 1 / 3, atol=0.025)
    # Up and down equally likely: the multiplication is unbiased in log.
    np.testing.assert_allclose(np.mean(ratios > 1.0), 1 / 6, atol=0.02)
  assert all(o['discount'] == 0.99 for o in outs)


def test_explore_refuses_a_name_it_has_no_value_for():
  with pytest.raises(ValueError, match=r"\['max_gradient_norm'\]"):
    pbt.explore(VALUES, np.random.default_rng(0),
                names=('learning_rate', 'max_gradient_norm'))


def test_evolve_explores_from_the_source_after_a_copy():
  population = [dict(VALUES, learning_rate=1e-3),
                dict(VALUES, learning_rate=8e-3)]
  # Copies agent 1, then perturbs nothing (every draw >= 1/3).
  decision = pbt.evolve(0, [0.2, 0.9], population,
                        _Fixed(choice=1, randoms=[0.5, 0.5, 0.5]))
  assert decision.source == 1
  assert decision.hyperparameters == population[1]
  # No copy: its own values, perturbed.
  decision = pbt.evolve(1, [0.2, 0.9], population,
                        _Fixed(choice=0, randoms=[0.0, 0.9, 0.5, 0.5]))
  assert decision.source is None
  assert decision.hyperparameters['learning_rate'] == pytest.approx(
      8e-3 / 1.2)
  with pytest.raises(ValueError, match='3 fitness values for 2 agents'):
    pbt.evolve(0, [0.1, 0.2, 0.3], population, np.random.default_rng(0))


def test_due_waits_for_the_burn_in_then_every_interval():
  never = pbt.NEVER
  # The first evolution at the burn-in; then every interval after the last.
  assert pbt.due([99, 150, 249], [never, 100, 150], interval=100,
                 burn_in=100) == ()
  assert pbt.due([100, 250, 350], [never, 150, 249], interval=100,
                 burn_in=100) == (0, 1, 2)
  # No burn-in: due at once.
  assert pbt.due([0, 5], [never, 0], interval=10, burn_in=0) == (0,)


# --- fitness (no process) -----------------------------------------------------

def _round(start, mean, episodes=10):
  return {'start_time': start, 'mean_return': mean, 'episodes': episodes}


def test_recent_return_keeps_the_last_rounds_after_the_copy():
  rounds = [_round(1., 100.), _round(2., 10.), _round(3., 20., 5),
            _round(4., 40., 15)]
  # Since t=2, the last 2 rounds: (5 * 20 + 15 * 40) / 20.
  assert pbt.recent_return(rounds, since=2., window=2) == pytest.approx(35.)
  # Since t=2, all 3 after it, weighted by episodes.
  assert pbt.recent_return(rounds, since=2., window=10) == pytest.approx(
      (10 * 10 + 5 * 20 + 15 * 40) / 30)
  assert math.isnan(pbt.recent_return(rounds, since=5., window=3))
  assert math.isnan(pbt.recent_return([], since=0., window=3))


def test_fitness_is_the_papers_score_where_it_can_be_and_the_return_else():
  from acme_impala.envs import minatar  # pylint: disable=g-import-not-at-top
  breakout = 'MinAtar/Breakout-v1'
  random, reference = (minatar.RANDOM_RETURNS['Breakout'],
                       minatar.AC_LAMBDA_5M['Breakout'])
  twice = random + 2 * (reference - random)
  # One task: normalised, not capped (agents past the reference differ).
  assert pbt.fitness({breakout: twice}) == pytest.approx(2.)
  # A suite: each task capped at 1, then the mean (IMPALA section 5.3).
  asterix = 'MinAtar/Asterix-v1'
  half = minatar.RANDOM_RETURNS['Asterix'] + 0.5 * (
      minatar.AC_LAMBDA_5M['Asterix'] - minatar.RANDOM_RETURNS['Asterix'])
  assert pbt.fitness({breakout: twice, asterix: half}) == pytest.approx(0.75)
  assert pbt.fitness({'CartPole-v1': 87.}) == 87.
  assert math.isnan(pbt.fitness({breakout: twice, asterix: math.nan}))
  assert pbt.copy_margin([breakout, asterix], 0.3) == pbt.COPY_MARGIN
  assert pbt.copy_margin(['CartPole-v1'], -200.) == pytest.approx(10.)


@pytest.mark.parametrize('settings,message', [
    (dict(pbt_interval_steps=-1), 'pbt_interval_steps=-1'),
    (dict(pbt_burn_in_steps=-5), 'pbt_burn_in_steps=-5'),
    (dict(num_agents=1), 'needs a population'),
    (dict(evaluator=False), 'noevaluator'),
])
def test_bad_settings_are_refused_naming_them(settings, message):
  base = dict(pbt_interval_steps=100, pbt_burn_in_steps=0, num_agents=4,
              evaluator=True)
  with pytest.raises(ValueError, match=message):
    pbt.validate(**dict(base, **settings))
  pbt.validate(**dict(base, pbt_interval_steps=0, num_agents=1))  # Off.


# --- a real PBT sweep ---------------------------------------------------------

SMALL = ['--config.batch_size=8', '--config.unroll_length=10',
         '--config.lstm_size=16', '--config.envs_per_actor=2',
         '--config.max_queue_size=64', '--config.min_replay_size=8',
         '--config.replay_capacity=500', '--eval_episodes=2',
         '--config.checkpoint_period_minutes=0.05']


def _csv(path):
  try:
    with open(path, newline='') as f:
      return list(csv.DictReader(f))
  except OSError:
    return []


@pytest.fixture(scope='module')
def pbt_run(tmp_path_factory):
  """The sweep program's two agents (one shared replay, trust region on)
  with PBT every 15 learner steps; its controller killed once it has
  copied and evolved, then Ctrl-C once the restarted one evolves again."""
  run = program_run.Run(
      tmp_path_factory.mktemp('pbt'),
      ['--max_actor_steps=100000000', '--pbt_interval_steps=15',
       '--pbt_burn_in_steps=10'], SMALL, program='laser_sweep_lp.py')
  events_path = os.path.join(run.logdir, 'pbt', 'events.csv')
  seen = {}
  try:
    run.wait(lambda: any(r['action'] == 'exploit' for r in _csv(
        events_path)) and len(_csv(events_path)) >= 3,
             'an exploit and 3 PBT events', 300)
    seen['explores_at_kill'] = sum(
        r['action'] == 'explore' for r in _csv(events_path))
    pid = run.kill('pbt/0')
    run.wait(lambda: run.restarted('pbt/0', pid), 'pbt to restart', 60)
    seen['resumed'] = int(run.wait(lambda: re.findall(
        r'pbt: resumed from \S+state\.json: (\d+) evolutions',
        run.output()), 'the controller to resume', 60)[-1])
    rows = len(_csv(events_path))
    run.wait(lambda: len(_csv(events_path)) > rows + 1,
             'events after the restart', 180)
    run.proc.send_signal(signal.SIGINT)
    seen['rc'] = run.finish()
    seen['out'] = run.output()
    seen['leftovers'] = run.leftovers()
    with open(events_path, newline='') as f:
      seen['header'] = next(csv.reader(f))
    seen['events'] = _csv(events_path)
    seen['learners'] = [_csv(os.path.join(
        run.logdir, 'logs', f'agent_{i}', 'learner', 'logs.csv'))
                        for i in range(2)]
  finally:
    run.kill_if_running()
  return seen


def test_pbt_run_logs_its_events_and_ends_cleanly(pbt_run):
  assert pbt_run['rc'] == 0, pbt_run['out'][-4000:]
  assert pbt_run['leftovers'] == []
  # The run's last line counts PBT's decisions.
  counts = re.findall(r'PBT: (\d+) exploits, (\d+) explores in \S+events.csv',
                      pbt_run['out'])
  assert counts, pbt_run['out'][-2000:]
  assert [int(c) for c in counts[-1]] == [
      sum(e['action'] == a for e in pbt_run['events'])
      for a in ('exploit', 'explore')]
  assert tuple(pbt_run['header']) == nodes.PBT_EVENT_COLUMNS
  assert {'learner_step', 'agent', 'action', 'source_agent',
          'learning_rate', 'entropy_cost', 'rmsprop_epsilon'} <= set(
              pbt_run['header'])
  events = pbt_run['events']
  assert {e['action'] for e in events} == {'exploit', 'explore'}
  assert {e['agent'] for e in events} <= {'agent_0', 'agent_1'}
  for e in events:
    assert int(e['learner_step']) >= 10  # --pbt_burn_in_steps.
    if e['action'] == 'exploit':
      assert e['source_agent'] not in ('', e['agent'])
      # CartPole has no reference score: 5 % of the agent's own return.
      assert float(e['source_fitness']) > float(e['fitness']) + 0.05 * abs(
          float(e['fitness']))
    else:
      assert e['source_agent'] == ''


def test_exploit_copies_exactly_and_explore_perturbs_by_the_papers_factors(
    pbt_run):
  """Each copy's digest read back equals the source's (the learner logs
  it), and each explore multiplies each of the three hyperparameters by 1,
  1.2 or 1/1.2 from what the agent had (its own, or its source's after a
  copy)."""
  out = pbt_run['out']
  copies = re.findall(r'took a copied training state \(digest \w+, ([^)]*)\)',
                      out)
  exploits = [e for e in pbt_run['events'] if e['action'] == 'exploit']
  assert len(copies) >= len(exploits) >= 1
  assert set(copies) == {'as sent'}
  base = presets.get_config('cartpole')
  current = {f'agent_{i}': dict(learning_rate=lr, entropy_cost=0.01,
                                rmsprop_epsilon=base.rmsprop_epsilon)
             for i, lr in enumerate((1e-3, 2e-3))}
  factors = set()
  for e in pbt_run['events']:
    values = {k: float(e[k]) for k in pbt.HYPERPARAMETERS}
    if e['action'] == 'exploit':
      assert values == pytest.approx(current[e['source_agent']], rel=1e-6)
    else:
      for name in pbt.HYPERPARAMETERS:
        ratio = values[name] / current[e['agent']][name]
        factor = min((1., 1.2, 1 / 1.2), key=lambda f, r=ratio: abs(f - r))
        assert ratio == pytest.approx(factor, rel=1e-5), (name, e)
        factors.add(factor)
    current[e['agent']] = values
  assert factors - {1.}  # Something was perturbed.


def test_the_learner_steps_with_the_values_pbt_set(pbt_run):
  """Every learning rate a learner logs is its initial one or one PBT gave
  it (a copy or an explore), and some learner logged a changed one: the
  learner steps with PBT's values (the unit test in test_learning.py shows
  entropy cost and epsilon take effect in the update too)."""
  changed = 0
  for i, (rows, initial) in enumerate(zip(pbt_run['learners'],
                                          (1e-3, 2e-3))):
    given = [float(e['learning_rate']) for e in pbt_run['events']
             if e['agent'] == f'agent_{i}']
    assert rows
    for r in rows:
      lr = float(r['learning_rate'])
      assert any(lr == pytest.approx(v, rel=1e-6)
                 for v in [initial] + given), (i, lr, given)
      changed += lr != pytest.approx(initial, rel=1e-6)
  assert changed


def test_a_killed_controller_resumes_from_its_checkpoint(pbt_run):
  assert 1 <= pbt_run['resumed'] <= pbt_run['explores_at_kill']
  assert re.search(r'node pbt/0 killed by SIGKILL', pbt_run['out'])
  # Its checkpoint carried the schedule: each agent's evolutions stay at
  # least --pbt_interval_steps apart across the restart (a controller that
  # forgot them would evolve every agent at once).
  for agent in ('agent_0', 'agent_1'):
    steps = [int(e['learner_step']) for e in pbt_run['events']
             if e['agent'] == agent and e['action'] == 'explore']
    assert all(b - a >= 15 for a, b in zip(steps, steps[1:])), (agent, steps)


def test_pbt_graph_with_separate_or_shared_replays(tmp_path):
  """The controller is one node over every agent's learner and evaluators,
  with one replay each or one shared; without the flag there is none."""
  from acme_impala.agent import config as config_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import program  # pylint: disable=g-import-not-at-top
  grid = config_lib.sweep_configs(
      presets.get_config('cartpole').replace(replay_fraction=0.5),
      [1e-3, 2e-3, 4e-3], [0.01])
  for share, replays in ((False, 3), (True, 1)):
    run = program.prepare_run(grid, str(tmp_path / f'{share}'), 100,
                              num_actors=1, share_replay=share,
                              pbt_interval_steps=50)
    assert (run.pbt_interval_steps, run.pbt_burn_in_steps) == (50, 50)
    graph = program.build_program(run)
    assert len(graph.groups['pbt']) == 1
    assert len(graph.groups['replay']) == replays
  plain = program.build_program(program.prepare_run(
      grid, str(tmp_path / 'plain'), 100, num_actors=1))
  assert 'pbt' not in plain.groups
  # IMPALA agents without replay (Appendix F's population): one replay
  # server each, holding only its queue; sharing nothing is refused.
  impala = [c.replace(replay_fraction=0.) for c in grid]
  config_lib.validate_sweep(impala, share_replay=False)
  with pytest.raises(ValueError, match='noshare_replay'):
    config_lib.validate_sweep(impala, share_replay=True)
  graph = program.build_program(program.prepare_run(
      impala, str(tmp_path / 'impala'), 100, num_actors=1,
      share_replay=False, pbt_interval_steps=50))
  assert len(graph.groups['pbt']) == 1
  with pytest.raises(ValueError, match='noevaluator'):
    program.prepare_run(grid, str(tmp_path / 'e'), 100, evaluator=False,
                        pbt_interval_steps=50)
