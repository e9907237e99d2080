"""The supervising local_mp launcher: real programs, real kill -9.

Each run is `programs/impala_lp.py` in its own session, with its output in a
file the test follows; node processes are found through the supervisor's
`<logdir>/status/nodes.json`. Every run must end with no process left in the
launcher's session.
"""

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

import program_run

from acme_impala.launch import supervisor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ['--config.batch_size=8', '--config.unroll_length=10',
         '--config.lstm_size=16', '--config.envs_per_actor=2',
         '--config.max_queue_size=64', '--noevaluator']
# LASER replay, checkpoints every 3 s: a restarted learner or replay node
# finds a recent checkpoint.
LASER = ['--config.replay_fraction=0.5', '--config.min_replay_size=8',
         '--config.replay_capacity=5000',
         '--config.checkpoint_period_minutes=0.05']


# --- policies (no process) ---------------------------------------------------

def test_restart_policies_parse_over_the_defaults():
  policies = supervisor.parse_restart_policies('actor=5/60, learner=0')
  assert policies['actor'] == supervisor.RestartPolicy(5, 60.)
  assert policies['learner'] == supervisor.RestartPolicy(0, 600.)
  assert policies['replay'] == supervisor.DEFAULT_POLICIES['replay']
  assert set(policies) == set(supervisor.ROLES)


@pytest.mark.parametrize('text, named', [
    ('actors=3', "'actors'"), ('actor=three', "'actor=three'"),
    ('actor=3/0', "'actor=3/0'"), ('actor', "'actor'")])
def test_bad_restart_policy_names_the_entry(text, named):
  with pytest.raises(ValueError, match=re.escape(named)):
    supervisor.parse_restart_policies(text)


def test_roles_and_exit_descriptions():
  assert supervisor.role_of('agent_12_actor') == 'actor'
  assert supervisor.role_of('learner') == 'learner'
  assert supervisor.describe_exit(-9) == 'killed by SIGKILL'
  assert supervisor.describe_exit(3) == 'exited with status 3'


# Both exit 2 with one line: ours, and absl's check of an enum flag
# (program_flags.flags_parser).
@pytest.mark.parametrize('flag,code,texts', [
    ('--restarts=actor=x', 2, ["'actor=x'"]),
    ('--node_start=spawn', 2, ['--node_start=spawn', 'fork|exec'])])
def test_bad_launch_flag_fails_before_any_process(tmp_path, flag, code, texts):
  logdir = str(tmp_path / 'bad')
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'programs', 'impala_lp.py'),
       f'--logdir={logdir}', flag], cwd=ROOT,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      timeout=120)
  assert proc.returncode == code, proc.stdout[-2000:]
  for text in texts:
    assert text in proc.stdout
  assert not os.path.exists(logdir)


def test_forked_nodes_die_with_a_killed_launcher(tmp_path):
  """SIGKILL to the launcher (no chance to clean up): every node process
  gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and is gone."""
  run = Run(tmp_path, ['--num_actors=1', '--max_actor_steps=10000000'])
  try:
    run.wait(lambda: run.rows('actor_0'), 'the actor to act')
    pids = [node['pid'] for node in run.nodes().values()]
    assert len(pids) == 5, run.nodes()  # replay, counter, learner, actor, coordinator.
    for pid in pids:  # Forked: children of the launcher, not new programs.
      process = psutil.Process(pid)
      assert process.ppid() == run.proc.pid
      assert 'process_entry' not in ' '.join(process.cmdline())
    os.kill(run.proc.pid, signal.SIGKILL)
    run.proc.wait()
    deadline = time.time() + 60
    while time.time() < deadline and any(psutil.pid_exists(p) and (
        psutil.Process(p).status() != psutil.STATUS_ZOMBIE) for p in pids):
      time.sleep(0.5)
    assert run.leftovers() == []
  finally:
    run._out.close()  # pylint: disable=protected-access
    run.kill_if_running()


# --- real runs ----------------------------------------------------------------

def Run(tmp_path, args):  # pylint: disable=invalid-name
  return program_run.Run(tmp_path, args, SMALL)


@pytest.fixture(scope='module')
def faulted(tmp_path_factory):
  """One LASER run: kill -9 an actor, then the learner, then the replay,
  each once the previous one is back; then Ctrl-C. Records what happened."""
  run = Run(tmp_path_factory.mktemp('faults'),
            LASER + ['--num_actors=2', '--max_actor_steps=10000000'])
  seen = {}
  try:
    run.wait(lambda: run.learner_step() >= 20 and len(run.rows('actor_1')),
             'the first learner steps')
    # An actor.
    actor_rows = len(run.rows('actor_1'))
    pid = run.kill('actor/1')
    seen['actor_pid'] = run.wait(lambda: run.restarted('actor/1', pid),
                                 'actor/1 to restart', 60)
    seen['actor_rows_after'] = run.wait(
        lambda: len(run.rows('actor_1')) > actor_rows + 1 and len(
            run.rows('actor_1')), 'actor_1 CSV to grow again')
    seen['actor_rows_before'] = actor_rows
    # The learner: back from its latest checkpoint (written every 3 s).
    # Killed after 8 s more of learning, so that the checkpoint it comes
    # back from is a small part of its run (forked nodes start in seconds:
    # without the wait the only checkpoint could still be step 1's).
    time.sleep(8)
    step_before = run.learner_step()
    pid = run.kill('learner/0')
    seen['learner_step_at_kill'] = step_before
    run.wait(lambda: run.restarted('learner/0', pid), 'learner to restart')
    start = run.wait(lambda: re.findall(
        r'\[learner/0\][^\n]*learner: starting at learner step (\d+)',
        run.output())[1:], 'the restarted learner to start')
    seen['learner_restart_step'] = int(start[0])
    seen['learner_step_after'] = run.wait(
        lambda: run.learner_step() > seen['learner_restart_step'] + 20 and (
            run.learner_step()), 'learner steps after its restart', 180)
    # The replay: back with the contents of its latest checkpoint.
    rows_at_replay_kill = {a: len(run.rows(a)) for a in ('actor_0', 'actor_1')}
    pid = run.kill('replay/0')
    run.wait(lambda: run.restarted('replay/0', pid), 'replay to restart')
    restored = run.wait(lambda: re.findall(
        r"replay: restored tables from [^{]*\{[^}]*'replay': (\d+)",
        run.output()), 'the replay to restore its tables', 60)
    seen['replay_restored'] = int(restored[-1])
    step = run.learner_step()
    seen['learner_step_after_replay'] = run.wait(
        lambda: run.learner_step() > step + 20 and run.learner_step(),
        'learner steps after the replay restart', 120)
    # Both actors play on: their writers reconnect to the restarted replay
    # (Reverb's backoff takes up to about 15 s).
    seen['actors_wrote_after_replay'] = run.wait(
        lambda: all(len(run.rows(a)) > n + 1
                    for a, n in rows_at_replay_kill.items()),
        'both actors to write episodes after the replay restart', 90)
    run.proc.send_signal(signal.SIGINT)
    seen['rc'] = run.finish()
    seen['out'] = run.output()
    seen['leftovers'] = run.leftovers()
  finally:
    run.kill_if_running()
  return seen


def test_killed_actor_is_restarted_and_writes_again(faulted):
  assert faulted['actor_rows_after'] > faulted['actor_rows_before']
  assert re.search(r'impala: node actor/1 killed by SIGKILL at \d\d:\d\d:\d\d; '
                   r'restarting it', faulted['out'])


def test_killed_learner_continues_from_its_checkpoint(faulted):
  # The checkpoint is at most a few seconds old: the restarted learner
  # starts at or below the step it had reached, well above 0, and goes on.
  assert 1 <= faulted['learner_restart_step'] <= (
      faulted['learner_step_at_kill'] + 50)
  assert faulted['learner_restart_step'] >= 0.5 * faulted[
      'learner_step_at_kill']
  assert faulted['learner_step_after'] > faulted['learner_restart_step']


def test_killed_replay_comes_back_with_its_contents(faulted):
  assert faulted['replay_restored'] > 0
  assert faulted['learner_step_after_replay'] > faulted['learner_step_after']
  assert faulted['actors_wrote_after_replay']


def test_items_lost_with_the_killed_replay_are_counted(faulted):
  # Actors insert all the time and the replay checkpoints every 3 s: items
  # inserted after the last checkpoint died with the server, and the
  # restarted replay says how many, per table.
  lost = re.findall(r"replay: items inserted after the previous server's "
                    r"last checkpoint were lost with it: \{([^}]*)\}",
                    faulted['out'])
  assert len(lost) == 1, faulted['out'][-5000:]
  counts = dict(re.findall(r"'(\w+)': (-?\d+)", lost[0]))
  assert set(counts) == {'priority_table', 'replay'}
  assert all(int(n) >= 0 for n in counts.values())


def test_faulted_run_ends_cleanly_with_a_restart_summary(faulted):
  assert faulted['rc'] == 0, faulted['out'][-5000:]
  last = [l for l in faulted['out'].splitlines() if l.startswith('impala: ')]
  assert last[-1].startswith('impala: all nodes stopped; restarts: ')
  for node in ('actor/1 1 (killed by SIGKILL)', 'learner/0 1 (killed by '
               'SIGKILL)', 'replay/0 1 (killed by SIGKILL)'):
    assert node in last[-1]
  assert last[-1].endswith('exiting with status 0.')
  assert faulted['leftovers'] == []
  # Every node ended on the stop request, none after the termination
  # notice: an actor whose writer had reconnected to the restarted replay
  # once held its process until it was SIGKILLed.
  assert 'did not stop within' not in faulted['out'], faulted['out'][-5000:]


def test_node_killed_past_its_limit_stops_the_program(tmp_path):
  # Forked nodes, the default; exec'd ones in the Ctrl-C test below.
  run = Run(tmp_path, ['--num_actors=1', '--max_actor_steps=10000000',
                       '--restarts=actor=1/600'])
  try:
    run.wait(lambda: run.rows('actor_0'), 'the actor to act')
    pid = run.kill('actor/0')
    pid = run.wait(lambda: run.restarted('actor/0', pid), 'a restart')
    time.sleep(2)
    run.kill('actor/0')
    killed_at = time.time()
    rc = run.finish(timeout=90)
    took = time.time() - killed_at
  finally:
    run.kill_if_running()
  out = run.output()
  assert rc == 1, out[-5000:]
  assert re.search(r"node 'actor/0' killed by SIGKILL at [\d:]+; its restart "
                   r"limit \(1/600s for group 'actor'\) is exceeded", out)
  assert out.rstrip().endswith('exiting with status 1.')
  # Noticed within a second; the rest is the other nodes' orderly stop.
  assert took < 60
  assert run.leftovers() == []


def test_ctrl_c_while_a_node_restarts_exits_0_with_nothing_left(tmp_path):
  # Nodes started by exec (a new interpreter each): their start, restart
  # and stop, which the other tests run forked.
  run = Run(tmp_path, ['--num_actors=1', '--max_actor_steps=10000000',
                       '--node_start=exec'])
  try:
    run.wait(lambda: run.rows('actor_0'), 'the actor to act')
    pid = run.kill('actor/0')
    run.wait(lambda: run.restarted('actor/0', pid), 'a restart')
    # The new actor process is still importing TensorFlow.
    run.proc.send_signal(signal.SIGINT)
    rc = run.finish(timeout=90)
  finally:
    run.kill_if_running()
  out = run.output()
  assert rc == 0, out[-5000:]
  assert 'stopping: stopped by the user (Ctrl-C)' in out
  assert 'actor/0 1 (killed by SIGKILL)' in out
  assert run.leftovers() == []


def test_the_stop_line_says_why_in_the_users_words(tmp_path, monkeypatch):
  """A SIGTERM is a node's lp.stop() (the budget reached, a failure), which
  records why first, or comes from outside; the launcher's own reasons are
  kept. The run's end is never worded as if someone had killed it."""
  status = str(tmp_path / 'status')
  assert supervisor.stop_line('stopped by the user (Ctrl-C)', status) == (
      'stopped by the user (Ctrl-C)')
  assert supervisor.stop_line(supervisor.SIGTERM, status) == (
      'SIGTERM received from outside the program')
  from acme_impala.distributed import lifecycle  # pylint: disable=g-import-not-at-top
  import launchpad  # pylint: disable=g-import-not-at-top
  stopped = []
  monkeypatch.setattr(launchpad, 'stop', lambda: stopped.append(True))
  lifecycle.stop_program(status, 'the budget is reached: 4,010 actor '
                         'steps >= max_actor_steps=4,000')
  monkeypatch.undo()
  assert stopped == [True]
  assert supervisor.stop_line(supervisor.SIGTERM, status) == (
      'the budget is reached: 4,010 actor steps >= max_actor_steps=4,000')
  lifecycle.report_failure(status, 'actor_1', RuntimeError('boom'))
  assert supervisor.stop_line(supervisor.SIGTERM, status) == (
      "node 'actor_1' failed")
  # A new run in the same status directory starts with neither.
  lifecycle.clear_run_status(status)
  assert supervisor.stop_line(supervisor.SIGTERM, status) == (
      'SIGTERM received from outside the program')


def test_a_new_run_forgets_the_last_runs_table_sizes(tmp_path):
  from acme_impala.distributed import lifecycle  # pylint: disable=g-import-not-at-top
  from acme_impala.launch import progress  # pylint: disable=g-import-not-at-top
  status = tmp_path / 'status'
  status.mkdir()
  (status / 'tables-replay.json').write_text(
      '{"q": {"role": "queue", "unit": "trajectories", "size": 64, '
      '"max_size": 64, "min_to_sample": 1}}')
  assert progress.table_status(progress.read_tables(str(status))) == (
      'queue full (64/64)')
  lifecycle.clear_run_status(str(status))
  assert progress.read_tables(str(status)) == []


def test_calls_to_other_nodes_are_not_sent_once_the_program_stops():
  """A node's client call asked for while the program stops is refused at
  once: the node it goes to may be gone, and the counter's client would
  wait out its 5 s deadline (the learner stopped 5-10 s late that way)."""
  from acme_impala.distributed import lifecycle  # pylint: disable=g-import-not-at-top

  class Counter:  # Stands in for the counter node's client.
    def __init__(self):
      self.calls = []

    def increment(self, **counts):
      self.calls.append(counts)
      return counts

  counter = Counter()
  client = lifecycle.Retrying(counter, 'learner -> counter')
  assert client.increment(learner_steps=1) == {'learner_steps': 1}
  lifecycle._on_stop()  # pylint: disable=protected-access
  try:
    with pytest.raises(lifecycle.ProgramStopping,
                       match='learner -> counter: increment not sent'):
      client.increment(learner_steps=1)
  finally:
    lifecycle._STOPPING.clear()  # pylint: disable=protected-access
  assert counter.calls == [{'learner_steps': 1}]
