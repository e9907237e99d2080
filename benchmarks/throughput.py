"""Throughput of the distributed program vs Acme 0.4.0's single-process IMPALA.

For each (num_actors, envs_per_actor) it runs `programs/impala_lp.py`
(local_mp, no evaluator) for a fixed actor-step budget and reads the
learner's CSV: environment steps per second and learner samples per second
over the steady state (after the learner's first step plus a warm-up), and
the learner's queue-wait fraction (time blocked on an empty queue: > 0 means
the learner keeps up with the actors; the queue itself is bounded by
`max_queue_size`, which blocks actors when full), and where the machine's
CPU goes meanwhile: the cores each kind of node (learner, actors, the rest)
uses and the cores left idle, read from /proc for the pids the supervisor
lists in `<logdir>/status/nodes.json`. In the same run it measures
Acme's own `acme.agents.tf.impala.IMPALA` agent on the same environment and
the same network class, and prints a Markdown table with the ratio.

With `--engines=gymnasium,envpool` every program setting runs once per
environment engine (`config.env_engine`), side by side. With
`--actor_rows=CartPole-v1:64,ALE/Pong-v5:16` it first measures, per engine
and in a fresh process each: the engine alone (random actions, env steps/s
of one process), and one actor process alone (the batched actor with the
config's network, the builder's adder writing to a real Reverb queue that a
thread drains as a learner would, no learner), and prints the actor's rate
as a fraction of the engine-only rate. With `--actor_overlap` each EnvPool
row also measures one process with two actors of K/2 environments (one
EnvPool each) stepped alternately, so that one half's emulators run while
the other half's policy and adder do (`EnvPoolBatch.step_async`).
With `--actor_parts` each row also runs the actor once more with its
loop's three calls timed in place (the policy, the engine's step, the
record: the adder's writes and restarts), per env step: where its time goes.
Each of these rows also gives the process's CPU time per env step (all its
threads: emulators, TensorFlow, Reverb) and what it implies: the most any
scheduling of the actor's work over the machine's cores could reach,
cores / the actor's CPU time per env step, as a fraction of the engine-only
rate (the "CPU ceiling" column). With `--ale_vector` each Atari row also
measures ale-py's own C++ vector environment alone (`AtariVectorEnv`, same
Table G.1 settings and thread count as EnvPool), the other env-only
reference issue 13 names.

  python benchmarks/throughput.py [--quick] [--config=cartpole] [--env=...]
  python benchmarks/throughput.py --config=atari --settings=1x8,2x8
  python benchmarks/throughput.py --engines=gymnasium,envpool \
      --actor_rows=CartPole-v1:64,ALE/Pong-v5:16 --settings=1x64 --skip_acme
  python benchmarks/throughput.py --config=atari --engines=envpool \
      --actor_rows=ALE/Pong-v5:8,ALE/Pong-v5:64 --actor_overlap
"""

import collections
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

import acme_impala  # pylint: disable=unused-import  # Sets TF2_BEHAVIOR first.
from acme_impala.agent import presets
from acme_impala.host import hardware

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import program_runs  # pylint: disable=g-import-not-at-top
import provenance  # pylint: disable=g-import-not-at-top

flags.DEFINE_bool('quick', False, 'Fewer settings and shorter runs.')
flags.DEFINE_string('config', 'cartpole',
                    'Named config (network, batch, unroll) for both agents.')
flags.DEFINE_string('env', None, "Environment id; default: the config's.")
flags.DEFINE_integer('steps_per_run', 80_000, 'Actor steps per program run.')
flags.DEFINE_float('acme_seconds', 60., 'Seconds to run Acme\'s agent.')
flags.DEFINE_list('settings', [], 'num_actors x envs_per_actor settings to '
                  'run, e.g. 1x8,2x16 (default: a fixed sweep).')
flags.DEFINE_list('program_flags', [], 'Extra flags for every program run, '
                  'e.g. --config.batch_size=16.')
flags.DEFINE_bool('skip_acme', False, 'Skip Acme\'s agent (no ratio column).')
flags.DEFINE_list('engines', None, 'Environment engines to run every '
                  'program setting with (config.env_engine); default: the '
                  "config's own, as the default program runs.")
flags.DEFINE_list('actor_rows', [], 'ENV_ID:K pairs for the actor-only '
                  'table, e.g. CartPole-v1:64,ALE/Pong-v5:16.')
flags.DEFINE_float('actor_seconds', 20., 'Seconds of each engine-only and '
                   'actor-only measurement (after a warm-up).')
flags.DEFINE_integer('env_threads', 0, "EnvPool's threads per actor "
                     '(config.env_threads; 0: its default, the cores).')
flags.DEFINE_enum('actor_sink', 'drain', ['drain', 'evict'],
                  "Actor-only rows: what empties the actor's Reverb queue. "
                  "'drain': a thread in the actor's process samples every "
                  "item (decompressed into numpy, as a reader would); "
                  "'evict': a FIFO table of the queue's size and signature "
                  'drops the oldest item on insert, so nothing is read.')
flags.DEFINE_bool('actor_overlap', False, 'Actor-only rows, EnvPool: also '
                  'two actors of K/2 environments overlapped in one process '
                  '(one steps its emulators while the other acts).')
flags.DEFINE_bool('actor_parts', False, 'Actor-only rows: also where an '
                  "actor step goes (its loop's policy call, engine step and "
                  'record, timed in place in a fresh process).')
flags.DEFINE_bool('ale_vector', False, 'Actor-only Atari rows: also ale-py\'s '
                  'C++ vector environment alone (AtariVectorEnv, the env-only '
                  'reference issue 13 names) with the settings EnvPool gets, '
                  "and the actor's rate as a fraction of it.")
flags.DEFINE_string('probe', None, 'Internal: ENGINE:ENV_ID:K:MODE, one '
                    'measurement in this process, printed as JSON.')
flags.DEFINE_float('acme_child', None, 'Internal: run Acme\'s agent for '
                   'this many seconds in this process, print its row as JSON.')
FLAGS = flags.FLAGS


def _engines(config):
  """--engines, or the config's own engine (as its program runs)."""
  return FLAGS.engines or [config.env_engine]


def _env_id():
  return FLAGS.env or presets.get_config(FLAGS.config).env_id


def _config_for(env_id):
  """The named config, or the atari one for an Atari id (its network)."""
  name = 'atari' if env_id.startswith('ALE/') else FLAGS.config
  return presets.get_config(name).replace(env_id=env_id)


def _probe(engine, env_id, k, mode):
  """{'env_sps', 'cpu_us'} of one process: env steps/s and CPU time per env
  step (every thread of the process) of the engine alone ('env'), one actor
  ('actor': policy, adder, Reverb queue drained by a thread; 'parts': the
  same, its calls timed in place, `_time_actor_parts`) or two of K/2
  environments overlapped ('overlap', EnvPool only); engine 'ale_vector':
  ale-py's vector environment alone ('env' only)."""
  import threading  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import reverb  # pylint: disable=g-import-not-at-top
  from acme.utils import loggers  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import builder as builder_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import loops  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import batched
  from acme_impala.envs import registry

  if engine == _ALE_VECTOR:  # Engine alone only: no actor runs on it.
    env = _ale_vector_env(env_id, k)
  elif mode != 'overlap':
    env = batched.make_batched_environment(
        env_id, seeds=range(k), engine=engine, num_threads=FLAGS.env_threads)
  if mode == 'env':
    rng = np.random.default_rng(0)
    num_actions = registry.environment_spec(env_id).actions.num_values
    env.reset()

    def run(seconds):
      steps, start = 0, time.time()
      while time.time() - start < seconds:
        env.step(rng.integers(0, num_actions, size=k).astype(np.int32))
        steps += k
      return steps
  else:
    config = _config_for(env_id).replace(
        envs_per_actor=k, env_engine=engine, env_threads=FLAGS.env_threads)
    builder = builder_lib.IMPALABuilder(
        config, registry.environment_spec(env_id))
    drain = FLAGS.actor_sink == 'drain'
    server = reverb.Server(builder.make_replay_tables() if drain else [
        reverb.Table(
            name=builder.queue_table, sampler=reverb.selectors.Fifo(),
            remover=reverb.selectors.Fifo(), max_size=config.max_queue_size,
            rate_limiter=reverb.rate_limiters.MinSize(1),
            signature=builder.trajectory_signature())])
    client = reverb.Client(f'localhost:{server.port}')
    if drain:
      def read_all():  # As the learner does: the queue never blocks the actor.
        for _ in client.sample(builder.queue_table, num_samples=10**12):
          pass
      threading.Thread(target=read_all, daemon=True).start()
    if mode == 'overlap':
      run = _overlapped_actors(builder, client, env_id, k)
    else:
      actor = builder.make_actor(
          builder.make_network(), builder.make_adder(client, k, batched=True),
          seed=0, num_envs=k, batched=True)
      if mode == 'parts':
        parts = _time_actor_parts(actor, env, loops)
      loop = loops.BatchedEnvironmentLoop(env, actor,
                                          logger=loggers.NoOpLogger(),
                                          should_update=False)

      def run(seconds):
        steps, start = 0, time.time()
        while time.time() - start < seconds:
          steps += loop.run(num_steps=20 * k)
        return steps
  run(min(5., FLAGS.actor_seconds))  # Warm-up: tracing, first episodes.
  if mode == 'parts':
    for counts in parts:
      counts.clear()
  cpu_start, start = time.process_time(), time.time()
  steps = run(FLAGS.actor_seconds)
  cpu_s, wall_s = time.process_time() - cpu_start, time.time() - start
  result = {'env_sps': steps / wall_s, 'cpu_us': cpu_s / steps * 1e6}
  if mode == 'parts':
    seconds, calls = parts
    result.update({f'{part}_us': s / steps * 1e6
                   for part, s in seconds.items()})
    result.update(calls=calls['policy'], steps=steps)
  return result


def _time_actor_parts(actor, env, loops_module):
  """Times, in place, the three calls an actor's loop makes each step: the
  policy (`select_actions`), the engine (`step`) and the record (the adder's
  writes and the restarts, `loops.observe_step`); returns ({part: wall
  seconds in its calls}, {part: calls}), Counters the caller may clear.

  Wall time of the loop's thread: EnvPool's and Reverb's own threads run
  inside or beside these calls, so the parts add up to the loop's wall time
  (the rest is the loop's own bookkeeping), not to its CPU time."""
  seconds, calls = collections.Counter(), collections.Counter()

  def timed(fn, part):
    def call(*args, **kwargs):
      start = time.perf_counter()
      try:
        return fn(*args, **kwargs)
      finally:
        seconds[part] += time.perf_counter() - start
        calls[part] += 1
    return call

  actor.select_actions = timed(actor.select_actions, 'policy')
  env.step = timed(env.step, 'engine')
  # The loop calls its module's observe_step by name at every step.
  loops_module.observe_step = timed(loops_module.observe_step, 'record')
  return seconds, calls


_ALE_VECTOR = 'ale_vector'


def _ale_game(env_id):
  """ale-py's ROM id of an 'ALE/Name-v5' id, from ale-py's own registration
  ('ALE/MsPacman-v5': 'ms_pacman')."""
  import ale_py  # pylint: disable=g-import-not-at-top,unused-import  # Registers its ids.
  import gymnasium  # pylint: disable=g-import-not-at-top
  return gymnasium.spec(env_id).kwargs['game']


def _ale_vector_env(env_id, k):
  """ale-py's AtariVectorEnv of K games of `env_id`, with the Table G.1
  settings `batched.envpool_settings` gives EnvPool and EnvPool's
  thread count, so the two engines-alone rows differ only in the engine."""
  from ale_py import vector_env  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import batched
  s = batched.envpool_settings(env_id)
  return vector_env.AtariVectorEnv(
      _ale_game(env_id), k,
      num_threads=batched.envpool_num_threads(k, FLAGS.env_threads),
      frameskip=s['frame_skip'], img_height=s['img_height'],
      img_width=s['img_width'], stack_num=s['stack_num'],
      grayscale=s['gray_scale'], noop_max=s['noop_max'],
      episodic_life=s['episodic_life'], reward_clipping=s['reward_clip'],
      use_fire_reset=s['use_fire_reset'],
      full_action_space=s['full_action_space'],
      repeat_action_probability=s['repeat_action_probability'],
      # ale-py counts the cap in frames; random play never reaches it.
      max_num_frames_per_episode=s['max_episode_steps'] * s['frame_skip'])


def _overlapped_actors(builder, client, env_id, k):
  """`run(seconds)` (env steps taken, as `_probe`'s other modes) of two
  actors of K/2 environments sharing one network:
  while one half's EnvPool steps (its own threads), the other half's actor
  records its step and calls the policy. Items are those of the serial
  actor's K streams (each half's adder keeps its own K/2)."""
  from acme_impala.agent import loops  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import batched
  half = k // 2  # main() refused odd K before any process started.
  network = builder.make_network()
  envs = [batched.EnvPoolBatch(env_id, half, seed=i * half,
                                    num_threads=FLAGS.env_threads)
          for i in range(2)]
  actors = [builder.make_actor(network,
                               builder.make_adder(client, half, batched=True),
                               seed=i, num_envs=half, batched=True)
            for i in range(2)]
  timesteps = [env.reset() for env in envs]
  actions = [None, None]
  for actor, first in zip(actors, timesteps):
    loops.observe_firsts(actor, first, range(half))

  def act(i):
    actions[i] = actors[i].select_actions(timesteps[i].observation)
    envs[i].step_async(actions[i])

  def record(i):
    timesteps[i] = envs[i].step_wait()
    return half - len(loops.observe_step(actors[i], actions[i], timesteps[i]))

  act(0)

  def run(seconds):
    steps, start = 0, time.time()
    while time.time() - start < seconds:
      act(1)
      steps += record(0)
      act(0)
      steps += record(1)
    return steps
  return run


def _probe_in_subprocess(engine, env_id, k, mode):
  cmd = [sys.executable, os.path.abspath(__file__),
         f'--probe={engine}:{env_id}:{k}:{mode}',
         f'--actor_seconds={FLAGS.actor_seconds}', f'--config={FLAGS.config}',
         f'--env_threads={FLAGS.env_threads}',
         f'--actor_sink={FLAGS.actor_sink}']
  proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True, timeout=600)
  if proc.returncode != 0:
    raise RuntimeError(f'probe {engine}:{env_id}:{k}:{mode} failed: '
                       f'{proc.stderr[-500:]}')
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _actor_table():
  rows, ale = [], {}
  for row in FLAGS.actor_rows:
    env_id, k = row.rsplit(':', 1)
    for engine in _engines(_config_for(env_id)):
      print(f'actor-only: {engine} {env_id} x {k}...', flush=True)
      env = _probe_in_subprocess(engine, env_id, int(k), 'env')
      actor = _probe_in_subprocess(engine, env_id, int(k), 'actor')
      overlap = (_probe_in_subprocess(engine, env_id, int(k), 'overlap')
                 if FLAGS.actor_overlap and engine == 'envpool' else None)
      parts = (_probe_in_subprocess(engine, env_id, int(k), 'parts')
               if FLAGS.actor_parts else None)
      rows.append((env_id, int(k), engine, env, actor, overlap, parts))
    if FLAGS.ale_vector:
      print(f'engine-only: {_ALE_VECTOR} {env_id} x {k}...', flush=True)
      ale[(env_id, int(k))] = _probe_in_subprocess(
          _ALE_VECTOR, env_id, int(k), 'env')['env_sps']
  cores = hardware.usable_cores()  # What EnvPool's thread default uses.
  print(f'\nthroughput.py at {provenance.stamp()}: one process '
        f'each, {FLAGS.actor_seconds:.0f} s after a warm-up; TensorFlow CPU, '
        f'{cores} cores; EnvPool threads '
        f'{FLAGS.env_threads or "min(K, cores)"}; '
        'actor = batched policy (one graph call via tf.data) + adder into '
        'a Reverb queue ' + ('drained by a thread' if FLAGS.actor_sink ==
                             'drain' else 'that evicts its oldest item') +
        ', no learner' + ('; overlapped = two actors of K/2 environments, '
                           'one EnvPool each, stepped alternately'
                           if FLAGS.actor_overlap else '') + '.\n')
  overlap = ' overlapped (env steps/s) | overlapped / actor |'
  print('| environment | envs | engine | engine alone (env steps/s) | '
        'actor (env steps/s) | actor / engine alone | actor vs gymnasium '
        'actor | CPU per env step: engine alone (us) | CPU per env step: '
        'actor (us) | CPU ceiling / engine alone |' +
        (overlap if FLAGS.actor_overlap else '') +
        (' ale-py vector env alone (env steps/s) | actor / ale-py vector env '
         'alone |' if FLAGS.ale_vector else ''))
  print('|---|---:|---|---:|---:|---:|---:|---:|---:|---:|' +
        ('---:|---:|' if FLAGS.actor_overlap else '') +
        ('---:|---:|' if FLAGS.ale_vector else ''))
  base = {(e, k): a['env_sps'] for e, k, engine, _, a, _, _ in rows
          if engine == 'gymnasium'}
  for env_id, k, engine, env, actor, overlap, _ in rows:
    env_sps, actor_sps = env['env_sps'], actor['env_sps']
    versus = (f'{actor_sps / base[(env_id, k)]:.2f}x'
              if (env_id, k) in base else '-')
    # The actor's CPU time per env step spread over every core, with no
    # core ever idle: the best any overlap of its work could do.
    ceiling = cores / (actor['cpu_us'] * 1e-6) / env_sps
    line = (f'| {env_id} | {k} | {engine} | {env_sps:.0f} | {actor_sps:.0f} '
            f'| {actor_sps / env_sps:.0%} | {versus} | {env["cpu_us"]:.0f} | '
            f'{actor["cpu_us"]:.0f} | {ceiling:.0%} |')
    if FLAGS.actor_overlap:
      line += (' - | - |' if overlap is None else
               f' {overlap["env_sps"]:.0f} | '
               f'{overlap["env_sps"] / actor_sps:.2f}x |')
    if FLAGS.ale_vector:
      line += (f' {ale[(env_id, k)]:.0f} | '
               f'{actor_sps / ale[(env_id, k)]:.0%} |')
    print(line)
  print()
  if FLAGS.actor_parts:
    _print_actor_parts(rows)


def _print_actor_parts(rows):
  """Where an actor's step goes: its loop's wall time per env step."""
  print('Where an actor step goes: wall time of the loop\'s thread per env '
        'step (us), its three calls timed in place in a fresh actor process '
        '(the "parts" run, apart from the actor row above); "engine alone" '
        'is the engine-only row\'s 1 / rate, the engine step\'s floor.\n')
  print('| environment | envs | engine | actor (env steps/s) | policy | '
        'engine step | record (adder, restarts) | loop\'s rest | total | '
        'engine alone | policy call (ms) |')
  print('|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|')
  for env_id, k, engine, env, _, _, parts in rows:
    total = 1e6 / parts['env_sps']
    named = [parts.get(f'{p}_us', 0.) for p in ('policy', 'engine', 'record')]
    steps_per_call = parts['steps'] / max(parts['calls'], 1)
    print(f'| {env_id} | {k} | {engine} | {parts["env_sps"]:.0f} | '
          + ' | '.join(f'{x:.0f}' for x in named) +
          f' | {total - sum(named):.0f} | {total:.0f} | '
          f'{1e6 / env["env_sps"]:.0f} | '
          f'{named[0] * steps_per_call / 1e3:.2f} |')
  print()


def _program_run(num_actors, envs_per_actor, steps, extra=()):
  logdir = tempfile.mkdtemp(prefix='impala_tp_')
  try:
    return _measure_program(logdir, num_actors, envs_per_actor, steps, extra)
  finally:
    shutil.rmtree(logdir, ignore_errors=True)


def node_cpu_seconds(status_dir):
  """CPU seconds (user + system, all threads) each kind of node has used so
  far, summed over its processes: {'learner': s, 'actor': s, ...}, from the
  supervisor's `<status_dir>/nodes.json` ({'actor/0': {'pid': ...}, ...});
  None before that file exists."""
  try:
    with open(os.path.join(status_dir, 'nodes.json')) as f:
      nodes = json.load(f)
  except (OSError, ValueError):
    return None
  ticks = os.sysconf('SC_CLK_TCK')
  totals = collections.Counter()
  for title, node in nodes.items():
    try:
      with open(f'/proc/{int(node["pid"])}/stat') as f:
        # Fields after the command name: utime and stime are the 12th and
        # 13th (proc(5)'s fields 14 and 15).
        fields = f.read().rsplit(')', 1)[1].split()
    except (OSError, TypeError, ValueError):
      continue  # Between a restart's exit and its new pid.
    totals[title.split('/')[0]] += (int(fields[11]) + int(fields[12])) / ticks
  return totals


def _idle_cpu_seconds():
  """Seconds every core of the machine has been idle (or waiting on I/O)."""
  with open('/proc/stat') as f:
    fields = f.readline().split()[1:]
  return (int(fields[3]) + int(fields[4])) / os.sysconf('SC_CLK_TCK')


def _cpu_in_window(samples, t0, t1):
  """Cores used per node kind (and idle) between the samples nearest inside
  [t0, t1]: {'learner': cores, ..., 'idle': cores}, or {} if the window
  holds fewer than two samples."""
  inside = [s for s in samples if t0 <= s[0] <= t1]
  if len(inside) < 2:
    return {}
  (ta, a), (tb, b) = inside[0], inside[-1]
  return {kind: (b[kind] - a.get(kind, 0.)) / (tb - ta) for kind in b}


def _measure_program(logdir, num_actors, envs_per_actor, steps, extra):
  cmd = [sys.executable, os.path.join(_ROOT, 'programs', 'impala_lp.py'),
         '--lp_launch_type=local_mp', '--noevaluator',
         f'--config={FLAGS.config}', f'--num_actors={num_actors}',
         f'--max_actor_steps={steps}',
         f'--logdir={logdir}', f'--config.env_id={_env_id()}',
         f'--config.envs_per_actor={envs_per_actor}'] + list(extra)
  start = time.time()
  # Where the machine's CPU goes, once a second: each node kind's processes
  # (from the supervisor's pid file) and the idle time.
  samples = []
  with tempfile.TemporaryFile('w+') as output:
    proc = program_runs.popen(cmd, stdout=output, stderr=subprocess.STDOUT,
                              text=True)
    try:
      while proc.poll() is None:
        if time.time() - start > 900:
          raise subprocess.TimeoutExpired(cmd, 900)
        cpu = node_cpu_seconds(os.path.join(logdir, 'status'))
        if cpu is not None:
          cpu['idle'] = _idle_cpu_seconds()
          samples.append((time.time(), cpu))
        time.sleep(1.)
    finally:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
    output.seek(0)
    stdout = output.read()
  wall = time.time() - start
  if proc.returncode != 0:
    return dict(error=f'exit {proc.returncode}: {stdout[-300:]}')
  with open(os.path.join(logdir, 'logs', 'learner', 'logs.csv')) as f:
    rows = [r for r in csv.DictReader(f)]
  rows = [r for r in rows if r.get('actor_steps') and r.get('timestamp')]
  if len(rows) < 4:
    return dict(error=f'only {len(rows)} learner rows')
  # Steady state: drop the first quarter of the learner's rows.
  rows = rows[len(rows) // 4:]
  first, last = rows[0], rows[-1]
  dt = float(last['timestamp']) - float(first['timestamp'])
  env_sps = (float(last['actor_steps']) - float(first['actor_steps'])) / dt
  learner_steps = float(last['learner_steps']) - float(first['learner_steps'])
  batch = int(float(last['samples_per_second']) /
              max(float(last['steps_per_second']), 1e-9) + 0.5)
  return dict(env_sps=env_sps, samples_sps=learner_steps * batch / dt,
              updates_ps=learner_steps / dt,
              wait=float(last['queue_wait_fraction']), wall=wall,
              lag=float(last.get('policy_lag_mean') or 'nan'),
              cpu=_cpu_in_window(samples, float(first['timestamp']),
                                 float(last['timestamp'])))


# Acme's single-process agent can deadlock (its 12 dataset samplers, see
# _acme_run; seen in CI: stuck for 9 min in learner.step, and in 4 of 5
# tries on one day). _acme_run gives its learner one sampler; in case
# anything else stalls it, it runs in a child process with a deadline, once
# more if that passes.
_ACME_TRIES = 2
_ACME_GRACE_S = 150.


def _acme_row(seconds):
  """_acme_run(seconds) in a child process: its row, or SystemExit when
  every try deadlocked or failed."""
  cmd = [sys.executable, os.path.abspath(__file__),
         f'--acme_child={seconds}', f'--config={FLAGS.config}'] + (
             [f'--env={FLAGS.env}'] if FLAGS.env else [])
  # Acme's learner exports a SavedModel snapshot to ~/acme on its first
  # step: kept (it is part of Acme's agent as users run it), into a HOME
  # removed afterwards rather than the user's.
  home = tempfile.mkdtemp(prefix='throughput_acme_home_')
  try:
    return _acme_tries(cmd, seconds, dict(os.environ, HOME=home))
  finally:
    shutil.rmtree(home, ignore_errors=True)


def _acme_tries(cmd, seconds, env):
  for attempt in range(1, _ACME_TRIES + 1):
    proc = program_runs.popen(cmd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    try:
      out, err = proc.communicate(timeout=seconds + _ACME_GRACE_S)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.communicate()
      print(f'Acme\'s agent made no progress for {seconds + _ACME_GRACE_S:.0f}'
            f' s (try {attempt} of {_ACME_TRIES}: a deadlock); killed.',
            flush=True)
      continue
    if proc.returncode == 0:
      return json.loads(out.strip().splitlines()[-1])
    print(f'Acme\'s agent exited {proc.returncode} (try {attempt} of '
          f'{_ACME_TRIES}): {err[-500:]}', flush=True)
  raise SystemExit(f'throughput.py: Acme\'s single-process agent failed '
                   f'{_ACME_TRIES} times; no baseline row (--skip_acme runs '
                   'without it).')


def _acme_run(seconds):
  """Acme 0.4.0's single-process TF IMPALA agent, our network class."""
  import acme  # pylint: disable=g-import-not-at-top
  from acme import datasets  # pylint: disable=g-import-not-at-top
  from acme import specs  # pylint: disable=g-import-not-at-top
  from acme.agents.tf import impala as acme_impala_agent  # pylint: disable=g-import-not-at-top
  from acme.utils import loggers  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import networks  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import registry

  config = presets.get_config(FLAGS.config).replace(env_id=_env_id())
  env = registry.make_environment(config.env_id, seed=0)
  spec = specs.make_environment_spec(env)
  net = networks.make_network(config, spec.actions.num_values)
  agent = acme_impala_agent.IMPALA(
      environment_spec=spec, network=net,
      sequence_length=config.sequence_length,
      sequence_period=config.unroll_length,
      batch_size=config.batch_size, learning_rate=config.learning_rate,
      logger=loggers.NoOpLogger())
  # Acme's dataset interleaves 12 samplers, each batching on its own: the
  # queue's items can end up split among them with none holding a batch,
  # while update() (one thread) waits in learner.step for one. One sampler
  # sees every item, so a queue that can give a batch gives it.
  agent._learner._iterator = iter(datasets.make_reverb_dataset(  # pylint: disable=protected-access
      server_address=f'localhost:{agent._server.port}',  # pylint: disable=protected-access
      batch_size=config.batch_size, num_parallel_calls=1))
  learner_steps = {'n': 0}
  original_step = agent._learner.step  # pylint: disable=protected-access

  def counted_step():
    learner_steps['n'] += 1
    original_step()
  agent._learner.step = counted_step  # pylint: disable=protected-access
  loop = acme.EnvironmentLoop(env, agent, logger=loggers.NoOpLogger())
  loop.run_episode()  # Warm-up: tracing.
  steps, start = 0, time.time()
  learner_steps['n'] = 0
  while time.time() - start < seconds:
    steps += int(loop.run_episode()['episode_length'])
  dt = time.time() - start
  return dict(env_sps=steps / dt,
              samples_sps=learner_steps['n'] * config.batch_size / dt,
              wait=float('nan'), wall=dt, lag=0.)


def main(argv):
  del argv
  program_runs.exit_on_sigterm()  # Its `finally` blocks stop what it starts.
  if FLAGS.probe:
    engine, env_id, k, mode = FLAGS.probe.rsplit(':', 3)
    print(json.dumps(_probe(engine, env_id, int(k), mode)))
    return
  if FLAGS.acme_child is not None:
    print(json.dumps(_acme_run(FLAGS.acme_child)))
    return
  if FLAGS.actor_overlap:
    odd = [r for r in FLAGS.actor_rows if int(r.rsplit(':', 1)[1]) % 2]
    if not FLAGS.actor_rows or odd:
      raise app.UsageError('--actor_overlap needs --actor_rows with even K '
                           f'(two halves); got {FLAGS.actor_rows}.')
  if FLAGS.ale_vector:
    from acme_impala.envs import registry
    atari = set(registry.known_environment_ids())
    bad = [r for r in FLAGS.actor_rows
           if not (r.startswith('ALE/') and r.rsplit(':', 1)[0] in atari)]
    if not FLAGS.actor_rows or bad:
      raise app.UsageError('--ale_vector needs --actor_rows of Atari games '
                           "ale-py has ('ALE/Pong-v5:8'); got "
                           f'{FLAGS.actor_rows}.')
  if FLAGS.actor_rows:
    _actor_table()
    if not FLAGS.settings:
      return  # Only the actor-only table was asked for.
  if FLAGS.quick:
    settings = [(1, 8), (2, 8)]
    steps = 40_000
  else:
    settings = [(1, 1), (1, 8), (2, 8), (4, 8), (8, 8), (2, 16)]
    steps = FLAGS.steps_per_run
  if FLAGS.settings:
    settings = [tuple(int(x) for x in s.split('x')) for s in FLAGS.settings]
  if FLAGS.skip_acme:
    acme_row = dict(env_sps=float('nan'), samples_sps=float('nan'))
  else:
    print(f'Acme 0.4.0 single-process IMPALA on {_env_id()} '
          f'({FLAGS.acme_seconds:.0f} s)...', flush=True)
    acme_row = _acme_row(FLAGS.acme_seconds if not FLAGS.quick else 20.)
  cfg = presets.get_config(FLAGS.config)
  rows = []
  for num_actors, k in settings:
    for engine in _engines(cfg):
      print(f'program: {num_actors} actor(s) x {k} env(s), {engine}...',
            flush=True)
      rows.append(((num_actors, k, engine), _program_run(
          num_actors, k, steps, list(FLAGS.program_flags) + [
              f'--config.env_engine={engine}',
              f'--config.env_threads={FLAGS.env_threads}'])))

  print(f'\nthroughput.py at {provenance.stamp()}: '
        f'TensorFlow CPU, 2 cores; env {_env_id()}; {FLAGS.config} config '
        f'({cfg.network} network, batch '
        f'{cfg.batch_size} x unroll {cfg.unroll_length}, same network for '
        f'both); {steps} actor steps per program run; program flags '
        f'{FLAGS.program_flags or "none"}.\n')
  print('| agent | engine | actors x envs/actor | env steps/s | '
        'learner samples/s | updates/s | queue-wait fraction | '
        'policy lag (steps) | CPU cores: learner | actors | other nodes | '
        'idle | vs Acme env steps/s |')
  print('|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
  base = acme_row['env_sps']
  if not FLAGS.skip_acme:
    print(f"| Acme 0.4.0 IMPALA (single process) | gymnasium | 1 x 1 | "
          f"{acme_row['env_sps']:.0f} | {acme_row['samples_sps']:.0f} | - |"
          f" - | 0 | - | - | - | - | 1.0x |")
  for (n, k, engine), r in rows:
    if 'error' in r:
      print(f'| acme_impala local_mp | {engine} | {n} x {k} | '
            f'error: {r["error"]} |')
      continue
    cpu = dict(r['cpu'])
    parts = [cpu.pop('learner', None), cpu.pop('actor', None)]
    idle = cpu.pop('idle', None)
    parts += [sum(cpu.values()) if parts[0] is not None else None, idle]
    print(f"| acme_impala local_mp | {engine} | {n} x {k} | "
          f"{r['env_sps']:.0f} | {r['samples_sps']:.0f} | "
          f"{r['updates_ps']:.2f} | {r['wait']:.2f} | {r['lag']:.1f} | "
          + ' | '.join('-' if x is None else f'{x:.2f}' for x in parts) +
          ' | ' + ('-' if FLAGS.skip_acme else f"{r['env_sps'] / base:.1f}x")
          + ' |')
  print('\nCPU cores: CPU time per second of the steady state (the '
        "learner's rows after the first quarter), summed over each kind of "
        "node's processes and threads; other nodes: the replay server, the "
        'counter and the coordinator; idle: the whole machine\'s idle cores.')
  failed = [f'{n} x {k} {engine}: {r["error"]}' for (n, k, engine), r in rows
            if 'error' in r]
  if failed:
    # A table with a failed row is not a measurement of those settings.
    raise SystemExit('throughput.py: program run(s) failed: ' +
                     '; '.join(failed))


if __name__ == '__main__':
  app.run(main)
