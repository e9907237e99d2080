"""Learner throughput: acme_impala.IMPALALearner vs Acme 0.4.0's TF learner.

Run as `python benchmarks/learner_bench.py [--quick]`. For each network

  * MLP+LSTM(64) on CartPole-v1 (network='mlp_lstm'),
  * the paper's shallow net + LSTM(256) on ALE/Pong-v5 (network='shallow'),

both with unroll_length=20 (items of 21 steps) and batch_size=32, it times
`step()` of

  * our IMPALALearner in each compile mode ('vtrace_and_optimizer', 'full',
    'none', see config.py);
  * Acme 0.4.0's own `acme.agents.tf.impala.learning.IMPALALearner` on a
    fresh instance of the same network (same class, config and initial
    weights; the shallow torso's gradients left to autodiff, which is
    faster for Acme's per-step calls: `_AutodiffShallowTorso`),
  * on the shallow net, both learners again with the torso in bfloat16
    (`torso_dtype='bfloat16'`; ours in its default compile mode; only with
    oneDNN on, which TF 2.8's bfloat16 convolutions need),

and prints a Markdown table of the first-step (trace + compile) time, the
median step time, the samples per second (trajectories/s = batch_size x
updates/s) and the ratio to Acme's learner.

By default the table is made twice, each in its own process: with
TensorFlow's oneDNN optimisations off (TF 2.8's default, so Acme as users run
it) and on (acme_impala's default, set by `import acme_impala`), followed by
every learner against Acme's in the same setting and in TF's defaults
(`--onednn=process`: one table, this process's setting).

`--replay_states` measures instead what LASER's recomputed replay states
cost against the stored ones (f = 0.875 on CartPole and MinAtar Breakout):
the actor's write rate, the learner step with its Reverb data path and
alone, and the memory the walk holds (see `_replay_child`).

Why it is built this way:

  * Only the update is measured. Every learner trains on the SAME batch, held
    in memory and fed forever (an iterator for ours; for Acme's learner, which
    takes a tf.data.Dataset, `Dataset.from_tensors(sample).repeat()`), so the
    Reverb pipeline and actors play no part and all rows do identical work.
  * The batch is real, not synthetic: our IMPALAActor, driven by
    acme.EnvironmentLoop, fills a real Reverb queue (in-process server,
    IMPALABuilder.trajectory_signature) and one batch is read with
    acme.datasets.make_reverb_dataset, so dtypes, episode boundaries, dummy
    steps and extras are those the learner sees in training.
  * The machine is shared: timed repeats are interleaved across the learners
    of a network (with the order rotated each round) so that background load
    hits all rows alike, and the median over repeats is reported.
  * Compilation is reported apart (first step) and never timed as
    throughput; a throwaway learner step first pays TensorFlow's one-off
    per-process start-up, so that it is not charged to whichever row happens
    to compile first. XLA on the whole Atari step ('full') can take a minute on
    CPU, so each first step runs under a time budget: a learner that exceeds
    it is reported as such instead of hanging the benchmark.
"""

import argparse
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# pylint: disable=g-import-not-at-top
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))
# Before TensorFlow loads: acme_impala sets its oneDNN defaults
# (TF_ENABLE_ONEDNN_OPTS, ONEDNN_MAX_CPU_ISA) where the environment leaves
# them unset, as in a program. Imported after TensorFlow, it changed the
# variables but not the loaded TensorFlow, and the bfloat16 rows ran
# without oneDNN's kernels (an empty convolution output).
import acme_impala  # noqa: F401 (its import sets the defaults)
import acme
from acme import datasets
from acme import specs
from acme.agents.tf.impala import learning as acme_learning
from acme.tf import utils as tf2_utils
from acme.utils import counting
from acme.utils import loggers
from absl import logging as absl_logging
import reverb
import tensorflow as tf

from acme_impala.agent import builder as builder_lib
from acme_impala.agent import config as config_lib
from acme_impala.agent import learning
from acme_impala.agent import networks
from acme_impala.agent import types
from acme_impala.agent import vtrace
from acme_impala.envs import registry
import onednn_verbose  # pylint: disable=g-import-not-at-top
import provenance  # pylint: disable=g-import-not-at-top
# pylint: enable=g-import-not-at-top
# This script's directory (sys.path[0]) holds benchmarks/minatar.py, which
# would shadow the MinAtar package its replay-state runs import.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != _HERE]

_BATCH_SIZE = 32
_UNROLL_LENGTH = 20
_SEED = 0
_ACME = 'Acme 0.4.0 TF IMPALALearner'
_BF16 = 'bfloat16 torso'

# (label, config overrides, timing plan, quick timing plan). A plan is
# (warm-up steps after the first, interleaved rounds, target seconds per
# timed repeat): cheap CartPole steps are batched into repeats long enough
# for the timer; an Atari step is long on its own, so one step per repeat
# and few rounds keep the whole run within a few minutes.
_NETWORKS = (
    ('CartPole-v1, MLP+LSTM(64)',
     dict(env_id='CartPole-v1', network='mlp_lstm', lstm_size=64),
     (3, 15, 0.5), (1, 3, 0.05)),
    ('ALE/Pong-v5, shallow+LSTM(256)',
     dict(env_id='ALE/Pong-v5', network='shallow', lstm_size=256),
     (2, 12, 1.0), (1, 2, 0.0)),
)
# Seconds allowed for one learner's first step (tracing + XLA compilation).
_COMPILE_BUDGET_S = 120.
_QUICK_COMPILE_BUDGET_S = 60.


def _make_config(overrides) -> config_lib.IMPALAConfig:
  return config_lib.IMPALAConfig(
      unroll_length=_UNROLL_LENGTH, batch_size=_BATCH_SIZE, seed=_SEED,
      **overrides)


class _AutodiffShallowTorso(networks.ShallowAtariTorso):
  """The shallow torso as `ShallowAtariTorso` computes it, left to
  TensorFlow's autodiff: the same variables, forward ops and result.

  Acme's learner runs on this one. It calls the torso once per time step
  (`snt.static_unroll`, 21 calls on 32 frames each), where the torso's
  written-out layer gradients (`networks.conv2d_bias_relu`: an XLA call per
  layer) made Acme's Pong step about 5 % slower
  (`benchmarks/results/learner_ab_pong_intel_223bb1b.txt`); its baseline is
  the faster of the two. In bfloat16 the bias gradients are autodiff's
  bfloat16 sums (a precision, not a speed, difference).
  """

  def __call__(self, inputs):
    inputs = tf.convert_to_tensor(inputs)
    conv1, conv2, linear = self._parametrised  # pylint: disable=protected-access
    if 'w' not in vars(conv1):
      self._net(tf.zeros([1] + inputs.shape[1:].as_list(), tf.float32))  # pylint: disable=protected-access
    dtype = self._dtype  # pylint: disable=protected-access
    conv1_w = conv1.w / 255. if inputs.dtype == tf.uint8 else conv1.w
    h = networks.frames_to_float(inputs, dtype)
    for layer, w in ((conv1, conv1_w), (conv2, conv2.w)):
      h = tf.nn.conv2d(h, tf.cast(w, dtype), layer.stride[0], 'VALID')
      h = tf.nn.relu(tf.nn.bias_add(h, tf.cast(layer.b, dtype)))
    h = tf.reshape(h, [tf.shape(h)[0], -1])
    h = tf.matmul(h, tf.cast(linear.w, dtype)) + tf.cast(linear.b, dtype)
    return tf.cast(tf.nn.relu(h), tf.float32)


def _make_network(config, spec, autodiff_torso: bool = False):
  # Same seed for every instance: all learners start from the same weights,
  # so they also follow comparable trajectories over the timed steps.
  tf.random.set_seed(config.seed)
  net = networks.make_network(config, spec.actions.num_values)
  if autodiff_torso and config.network == 'shallow':
    net._torso = _AutodiffShallowTorso(config.torso_dtype)  # pylint: disable=protected-access
  tf2_utils.create_variables(net, [spec.observations])
  if autodiff_torso and config.network == 'shallow':
    _check_same_torso(net._torso, spec)  # pylint: disable=protected-access
  return net


def _check_same_torso(torso, spec):
  """Raises unless `torso` (an _AutodiffShallowTorso) gives what
  ShallowAtariTorso gives with the same weights: output and gradients."""
  shape = [4] + list(spec.observations.observation.shape)
  frames = tf.cast(tf.random.stateless_uniform(shape, [0, 1], 0, 256,
                                               tf.int32), tf.uint8)
  with tf.GradientTape(persistent=True) as tape:
    got = torso(frames)
    want = networks.ShallowAtariTorso.__call__(torso, frames)
    got_loss, want_loss = tf.reduce_sum(got ** 2), tf.reduce_sum(want ** 2)
  float32 = torso._dtype == tf.float32  # pylint: disable=protected-access
  # In bfloat16 the biases' gradients differ by design (see the class).
  variables = [v for v in torso.trainable_variables
               if float32 or len(v.shape) > 1]
  pairs = [('output', got, want)] + list(zip(
      [v.name for v in variables], tape.gradient(got_loss, variables),
      tape.gradient(want_loss, variables)))
  tolerance = 1e-4 if float32 else 0.03
  for name, a, b in pairs:
    error = float(tf.norm(a - b) / tf.maximum(tf.norm(b), 1e-12))
    if not error <= tolerance:
      raise AssertionError(
          f"The autodiff torso given to Acme's learner differs from "
          f'ShallowAtariTorso in {name} by {error:.2e} (relative; at most '
          f'{tolerance}).')


def _make_batch(config):
  """One [B, T+1] ReplaySample read from a Reverb queue our actor filled."""
  env = registry.make_environment(config.env_id, seed=config.seed)
  spec = specs.make_environment_spec(env)
  net = _make_network(config, spec)
  builder = builder_lib.IMPALABuilder(config, spec)
  table = reverb.Table.queue(types.QUEUE_TABLE, max_size=10_000,
                             signature=builder.trajectory_signature(net))
  server = reverb.Server([table], port=None)
  address = f'localhost:{server.port}'
  client = reverb.Client(address)
  adder = builder.make_adder(client)
  # An untrained network: acting is random-ish, which is all a timing needs.
  actor = builder.make_actor(net, adder, seed=config.seed)
  counter = counting.Counter()
  loop = acme.EnvironmentLoop(env, actor, counter=counter,
                              should_update=False,
                              logger=loggers.NoOpLogger())
  # An item every `unroll_length` steps, so a batch needs at least
  # B * T + 1 steps; the loop always finishes the episode it is in.
  while client.server_info()[types.QUEUE_TABLE].current_size < (
      config.batch_size):
    loop.run(num_steps=config.batch_size * config.unroll_length + 1)
  num_steps = counter.get_counts()['steps']
  dataset = datasets.make_reverb_dataset(
      server_address=address, table=types.QUEUE_TABLE,
      batch_size=config.batch_size, num_parallel_calls=1)
  sample = next(iter(dataset))
  del adder, dataset
  server.stop()
  env.close()
  return sample, spec, num_steps


def _selected_networks(envs):
  """The entries of `_NETWORKS` whose env_id is in `envs` (all: None)."""
  return [n for n in _NETWORKS if not envs or n[1]['env_id'] in envs]


def _make_learners(config, spec, sample, modes, bfloat16: bool = True):
  """{row name: learner}, every learner on a fresh network and `sample`.

  The bfloat16 rows exist only where `_bf16_refusal` finds none, which
  excludes oneDNN on AMX: there TF 2.8's bfloat16 convolution gradient
  deadlocked (Acme's learner's first step hung this benchmark once).
  """
  learners = {}
  for mode in modes:
    cfg = config.replace(compile_mode=mode)
    learners[f'ours, {mode}'] = learning.IMPALALearner(
        _make_network(cfg, spec), itertools.repeat(sample), cfg,
        logger=loggers.NoOpLogger())
  bf16 = (bfloat16 and config.network == 'shallow' and
          _bf16_refusal() is None)
  if bf16:
    cfg = config.replace(torso_dtype='bfloat16')
    learners[f'ours, {cfg.compile_mode}, {_BF16}'] = learning.IMPALALearner(
        _make_network(cfg, spec), itertools.repeat(sample), cfg,
        logger=loggers.NoOpLogger())
  with _no_acme_snapshots():
    learners[_ACME] = _acme_learner(config, spec, sample)
    if bf16:
      # What bfloat16 does for Acme's learner given the same torso: how much
      # of our gain is the network's rather than the update's.
      learners[f'{_ACME}, {_BF16}'] = _acme_learner(
          config.replace(torso_dtype='bfloat16'), spec, sample)
  return learners


def _bf16_refusal() -> Optional[str]:
  """None where this process can run the torso in bfloat16, else why not
  (TF_ENABLE_ONEDNN_OPTS=0, or a CPU whose TensorFlow bfloat16 kernels are
  wrong, as on AMD EPYC without AVX-512): the bfloat16 rows are left out
  there, and the report says so."""
  try:
    networks.validate_torso_dtype('bfloat16')
  except ValueError as error:
    return str(error)
  return None


def _acme_learner(config, spec, sample):
  return acme_learning.IMPALALearner(
      environment_spec=spec,
      network=_make_network(config, spec, autodiff_torso=True),
      dataset=tf.data.Dataset.from_tensors(sample).repeat(),
      # Our hyperparameters where Acme has them (it uses Adam, not RMSProp,
      # and no episode-start resets: the work is close, not equal).
      learning_rate=config.learning_rate,
      discount=config.discount,
      entropy_cost=config.entropy_cost,
      baseline_cost=config.baseline_cost,
      max_abs_reward=1.,
      max_gradient_norm=config.max_gradient_norm,
      logger=loggers.NoOpLogger())


class _NoOpSnapshotter:

  def __init__(self, *unused_args, **unused_kwargs):
    pass

  def save(self, force=False):
    del force
    return False


@contextlib.contextmanager
def _no_acme_snapshots():
  """Acme's learner builds a Snapshotter that exports a SavedModel of the
  network to ~/acme on its first step (then hourly): file I/O, not the
  update, and outside this project, so learners made inside this are given
  a no-op one."""
  real_snapshotter = acme_learning.tf2_savers.Snapshotter
  acme_learning.tf2_savers.Snapshotter = _NoOpSnapshotter
  try:
    yield
  finally:
    acme_learning.tf2_savers.Snapshotter = real_snapshotter


def _warm_up_tensorflow(config, spec, sample):
  """Runs one throwaway learner step; returns its time in seconds.

  The first learner step of a process also pays one-off start-up costs (~5 s
  measured here: first gradient graph, XLA initialisation...) that would
  otherwise be added to the compile time of whichever learner came first.
  """
  start = time.perf_counter()
  learning.IMPALALearner(
      _make_network(config, spec), itertools.repeat(sample), config,
      logger=loggers.NoOpLogger()).step()
  return time.perf_counter() - start


def _first_step(learner, budget_s):
  """(seconds, None) for the first step, or (None, thread) past `budget_s`.

  A running XLA compilation cannot be interrupted, so it runs in a daemon
  thread that is abandoned if it outlives the budget.
  """
  result = {}

  def run():
    start = time.perf_counter()
    try:
      learner.step()
      result['seconds'] = time.perf_counter() - start
    except Exception as e:  # pylint: disable=broad-except
      result['error'] = e

  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  thread.join(budget_s)
  if thread.is_alive():
    return None, thread
  if 'error' in result:
    raise result['error']
  return result['seconds'], None


def _time_steps(learner, num_steps):
  start = time.perf_counter()
  for _ in range(num_steps):
    learner.step()
  return (time.perf_counter() - start) / num_steps


def _median_step_s(learners, warmup, rounds, target_s):
  """Median seconds per step of each learner, repeats interleaved."""
  steps_per_repeat = {}
  for name, learner in learners.items():
    for _ in range(warmup - 1):
      learner.step()
    one = _time_steps(learner, 1)
    steps_per_repeat[name] = max(1, round(target_s / one))
  samples = {name: [] for name in learners}
  names = list(learners)
  for r in range(rounds):
    # Rotate the order so no learner always runs first or after the same one.
    for name in names[r % len(names):] + names[:r % len(names)]:
      samples[name].append(
          _time_steps(learners[name], steps_per_repeat[name]))
  return ({name: statistics.median(s) for name, s in samples.items()},
          steps_per_repeat)


def _bench_network(label, overrides, plan, budget_s, warm_up, modes):
  config = _make_config(overrides)
  start = time.perf_counter()
  sample, spec, env_steps = _make_batch(config)
  fill_s = time.perf_counter() - start
  warm_up_s = _warm_up_tensorflow(config, spec, sample) if warm_up else None
  learners = _make_learners(config, spec, sample, modes)

  compile_s, abandoned = {}, []
  for name in list(learners):
    seconds, thread = _first_step(learners[name], budget_s)
    if thread is not None:
      abandoned.append(thread)
      del learners[name]
    compile_s[name] = seconds
  warmup, rounds, target_s = plan
  step_s, steps_per_repeat = _median_step_s(learners, warmup, rounds,
                                            target_s)
  background = any(t.is_alive() for t in abandoned)
  return dict(label=label, config=config, compile_s=compile_s,
              step_s=step_s, steps_per_repeat=steps_per_repeat,
              rounds=rounds, warmup=warmup, fill_s=fill_s,
              env_steps=env_steps, warm_up_s=warm_up_s, abandoned=abandoned,
              timed_with_background_compile=background,
              shape=tuple(sample.data.action.shape))


def _isa_setting() -> str:
  """oneDNN's ISA cap as every header names it: a run capped (say at AVX2,
  as a proxy for a CPU without AVX-512) must say so in its own output."""
  return ('ONEDNN_MAX_CPU_ISA='
          f'{os.environ.get("ONEDNN_MAX_CPU_ISA", "(unset: all)")}')


def _tf_settings() -> str:
  """This process's TensorFlow, oneDNN settings and CPU, as the table's and
  the breakdown's headers name them."""
  return (f'TensorFlow {tf.__version__}, {_ONEDNN}='
          f'{os.environ.get(_ONEDNN, "0")}, {_isa_setting()}, on '
          f'{provenance.cpu()}')


def _print_report(results, budget_s, total_s):
  print(f'learner_bench.py at commit {provenance.git_commit()}: '
        f'{_tf_settings()}; '
        f'batch_size={_BATCH_SIZE}, unroll_length={_UNROLL_LENGTH} '
        f'(items of {_UNROLL_LENGTH + 1} steps); the same in-memory batch '
        'for every learner.\n')
  refusal = _bf16_refusal()
  if refusal is not None:
    print(f'The bfloat16 rows are left out: {refusal}\n')
  print('| network | learner | compile / first step (s) | median step (ms) '
        '| samples/s | vs Acme |')
  print('|---|---|---:|---:|---:|---:|')
  for res in results:
    acme_s = res['step_s'].get(_ACME)
    for name, first in res['compile_s'].items():
      if first is None:
        print(f'| {res["label"]} | {name} | > {budget_s:.0f} (over budget) '
              '| not timed | - | - |')
        continue
      step = res['step_s'][name]
      ratio = f'{acme_s / step:.2f}x' if acme_s else '-'
      print(f'| {res["label"]} | {name} | {first:.1f} | {step * 1e3:.1f} '
            f'| {_BATCH_SIZE / step:.0f} | {ratio} |')
  print()
  for res in results:
    ours = {n: s for n, s in res['step_s'].items() if n.startswith('ours')}
    if not ours:
      print(f'No mode of ours finished compiling on {res["label"]}.')
      continue
    best = min(ours, key=ours.get)
    print(f'Fastest of our modes on {res["label"]}: '
          f'{best.split(", ", 1)[1]} ({_BATCH_SIZE / ours[best]:.0f} '
          'samples/s).')
  print()
  for res in results:
    repeats = ', '.join(f'{n}: {k}'
                        for n, k in res['steps_per_repeat'].items())
    print(f'{res["label"]}: batch {list(res["shape"])} from '
          f'{res["env_steps"]} actor steps ({res["fill_s"]:.1f} s); '
          f'{res["warmup"]} warm-up step(s), median of {res["rounds"]} '
          f'interleaved repeats (steps per repeat: {repeats}).')
    if res['warm_up_s'] is not None:
      print(f'  Before it, a throwaway learner step paid TensorFlow\'s one-off '
            f'start-up ({res["warm_up_s"]:.1f} s, not in the table).')
    if res['timed_with_background_compile']:
      print(f'  Note: an abandoned over-budget compilation was still running '
            f'while {res["label"]} was timed; its timings are pessimistic.')
  print(f'\nTotal benchmark time: {total_s:.1f} s')


# -- LASER's replayed LSTM states: what 'recompute' costs ('stored' as the
# reference). --------------------------------------------------------------

_REPLAY_ENVS = ('CartPole-v1', 'MinAtar/Breakout-v1')
_REPLAY_FILL_STEPS = 20_000
_REPLAY_TIMED_STEPS = 200
# --quick: enough to run every part once, not to measure.
_REPLAY_QUICK_STEPS = (2_000, 10)


def _rss_mb() -> float:
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith('VmRSS:'):
        return int(line.split()[1]) / 1024.
  return float('nan')


def _replay_child(env_id: str, mode: str, fill_steps: int,
                  timed_steps: int) -> dict:
  """One (environment, replay_core_state) measurement in this process.

  Our actor fills an in-process Reverb server's queue and replay through the
  builder's adder (episode items and their second writer under
  'recompute'); the learner then reads LASER batches (f = 0.875) through the
  builder's iterator. Reported: the actor's fill rate, the learner's step
  with its data (iterator included) and on one batch held in memory (the
  update alone), and the process's resident memory before the iterator is
  made and after the timed steps (the iterator's buffers, Reverb's sampler
  holding the episodes being walked, and the learner).
  """
  config = _make_config(dict(
      env_id=env_id, network='mlp_lstm', lstm_size=64,
      replay_fraction=0.875, replay_capacity=100_000, min_replay_size=10,
      max_queue_size=100_000, replay_core_state=mode, kl_threshold=0.5))
  env = registry.make_environment(env_id, seed=_SEED)
  spec = specs.make_environment_spec(env)
  builder = builder_lib.IMPALABuilder(config, spec)
  server = reverb.Server(builder.make_replay_tables(), port=None)
  address = f'localhost:{server.port}'
  client = reverb.Client(address)
  adder = builder.make_adder(client)
  actor = builder.make_actor(_make_network(config, spec), adder,
                             seed=config.seed)
  start = time.perf_counter()
  acme.EnvironmentLoop(env, actor, should_update=False,
                       logger=loggers.NoOpLogger()).run(
                           num_steps=fill_steps)
  adder.flush()
  fill_s = time.perf_counter() - start
  sizes = {n: t.current_size for n, t in client.server_info().items()}
  rss_before = _rss_mb()
  iterator = builder.make_dataset_iterator(address)
  learner = builder.make_learner(_make_network(config, spec), iterator,
                                 logger=loggers.NoOpLogger())
  for _ in range(5):  # Compile and warm up.
    learner.step()
  start = time.perf_counter()
  for _ in range(timed_steps):
    learner.step()
  with_data_s = (time.perf_counter() - start) / timed_steps
  rss_after = _rss_mb()
  batch = next(iterator)
  learner._iterator = itertools.repeat(batch)  # pylint: disable=protected-access
  learner.step()
  start = time.perf_counter()
  for _ in range(timed_steps):
    learner.step()
  update_s = (time.perf_counter() - start) / timed_steps
  server.stop()
  return dict(env=env_id, mode=mode, fill_steps_per_s=fill_steps / fill_s,
              with_data_ms=with_data_s * 1e3,
              update_ms=update_s * 1e3, rss_delta_mb=rss_after - rss_before,
              replay_items=sizes.get(types.REPLAY_TABLE, 0))


def _replay_states_report(repeats: int, envs, steps):
  """Runs every (environment, mode) in its own process, alternating the
  modes `repeats` times, and prints medians and the recompute/stored
  ratios. `steps`: (actor steps filling the tables, timed learner
  steps)."""
  commit = provenance.git_commit()
  print(f'learner_bench.py --replay_states at commit {commit} '
        f'on {provenance.cpu()}: '
        f''
        f'batch_size={_BATCH_SIZE}, unroll_length={_UNROLL_LENGTH}, '
        f'replay_fraction=0.875 (28 replayed rows), kl_threshold=0.5, '
        f'MLP(64,64)+LSTM(64); {steps[0]} actor steps into an '
        f'in-process Reverb server, {steps[1]} timed learner '
        f'steps; each (environment, mode) in its own process, modes '
        f'alternated {repeats} times, medians.\n', flush=True)
  results = {}
  for _ in range(repeats):
    for env_id in envs:
      for mode in ('stored', 'recompute'):
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), '--replay_child',
             env_id, mode, str(steps[0]), str(steps[1])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=1800)
        if proc.returncode != 0:
          raise SystemExit(f'{env_id} {mode} failed:\n{proc.stderr[-3000:]}')
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        results.setdefault((env_id, mode), []).append(row)
  print('| environment | replayed states | actor fill (steps/s) | learner step '
        'with data (ms) | update alone (ms) | RSS growth (MB) | replay items |')
  print('|---|---|---:|---:|---:|---:|---:|')
  med = lambda rows, k: statistics.median(r[k] for r in rows)
  for env_id in envs:
    for mode in ('stored', 'recompute'):
      rows = results[(env_id, mode)]
      print(f'| {env_id} | {mode} | {med(rows, "fill_steps_per_s"):.0f} | '
            f'{med(rows, "with_data_ms"):.1f} | {med(rows, "update_ms"):.1f} '
            f'| {med(rows, "rss_delta_mb"):.0f} | '
            f'{med(rows, "replay_items"):.0f} |')
  print()
  for env_id in envs:
    s_rows, r_rows = results[(env_id, 'stored')], results[(env_id, 'recompute')]
    ratio = lambda k: med(r_rows, k) / med(s_rows, k)
    print(f'{env_id}: recompute / stored: learner step with data '
          f'{ratio("with_data_ms"):.2f}x, update alone '
          f'{ratio("update_ms"):.2f}x, actor fill rate '
          f'{ratio("fill_steps_per_s"):.2f}x.')


# -- Where a float32 step goes (--breakdown). --------------------------------


class _Timed:
  """A callable timed like a learner (`step()`), for _median_step_s."""

  def __init__(self, fn, *args):
    self._fn, self._args = fn, args

  def step(self):
    out = self._fn(*self._args)
    # Wait for the result, as a learner step does (its metrics to numpy).
    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, 'numpy') else t,
                          out)


def _breakdown_parts(config, spec, sample):
  """{part: object with step()}: the default learner step, cut apart.

  Each part is its own tf.function on the same batch and the same weights;
  the parts overlap (each contains the ones above it in the report), so
  differences, not sums, say what a piece costs."""
  learner = learning.IMPALALearner(
      _make_network(config, spec), itertools.repeat(sample), config,
      logger=loggers.NoOpLogger())
  # The same step with a no-op optimiser: forward, backward, V-trace, the
  # loss and the logged metrics, without the RMSProp update.
  no_update = learning.IMPALALearner(
      _make_network(config, spec), itertools.repeat(sample), config,
      logger=loggers.NoOpLogger())
  no_update._apply_fn = tf.linalg.global_norm  # pylint: disable=protected-access
  net = _make_network(config, spec)
  data = tf2_utils.batch_to_sequence(sample.data)  # [T+1, B, ...]
  state = tf.nest.map_structure(lambda s: s[0],
                                data.extras[types.CORE_STATE])
  start = tf.cast(data.start_of_episode, tf.bool)
  frames = data.observation.observation if networks.is_oar(
      data.observation) else data.observation
  flat_frames = tf.reshape(frames, [-1] + frames.shape[2:].as_list())
  torso = net._torso  # pylint: disable=protected-access
  online = tf.ones([config.batch_size], tf.bool)
  walk_start = tf.zeros([config.batch_size], tf.bool)

  @tf.function(autograph=False)
  def torso_forward():
    return tf.reduce_sum(torso(flat_frames))

  @tf.function(autograph=False)
  def torso_backward():
    with tf.GradientTape() as tape:
      out = tf.reduce_sum(torso(flat_frames))
    return tape.gradient(out, torso.trainable_variables)

  def unroll():
    # The learner's way: the batch-major observations embedded as they
    # come, then the recurrence and heads over time.
    embeddings = net.embed_sequence(sample.data.observation, batch_major=True)
    (logits, values), _ = net.unroll_embedded(embeddings, state, start)
    return tf.reduce_sum(logits) + tf.reduce_sum(values)

  @tf.function(autograph=False)
  def unroll_forward():
    return unroll()

  @tf.function(autograph=False)
  def unroll_backward():
    with tf.GradientTape() as tape:
      out = unroll()
    return tape.gradient(out, net.trainable_variables)

  t, b = data.reward.shape[0] - 1, config.batch_size
  log_rhos = tf.random.stateless_normal([t, b], [1, 2]) * 0.3
  discounts = tf.fill([t, b], config.discount)
  rewards = tf.random.stateless_uniform([t, b], [3, 4])
  values = tf.random.stateless_normal([t, b], [5, 6])
  bootstrap = tf.random.stateless_normal([b], [7, 8])
  vtrace_xla = tf.function(vtrace.vtrace_from_importance_weights,
                           jit_compile=True, autograph=False)
  gradients = [tf.random.stateless_normal(v.shape, [9, 10]) * 1e-3
               for v in learner._variables]  # pylint: disable=protected-access
  # A graph function in every compile mode ('none' leaves `_apply_fn` a
  # plain method, which would run eagerly op by op here).
  apply_fn = tf.function(learner._apply_fn, autograph=False)  # pylint: disable=protected-access
  update = learner._update  # pylint: disable=protected-access
  return {
      'torso forward': _Timed(torso_forward),
      'torso forward + backward': _Timed(torso_backward),
      'network unroll forward (torso, LSTM, heads)': _Timed(unroll_forward),
      'network unroll forward + backward': _Timed(unroll_backward),
      'V-trace alone (XLA)': _Timed(vtrace_xla, log_rhos, discounts, rewards,
                                    values, bootstrap),
      'RMSProp update alone (clip + apply)': _Timed(apply_fn, gradients),
      'update without RMSProp (loss, gradients, metrics)': _Timed(
          no_update._update, sample.data, online, walk_start),  # pylint: disable=protected-access
      'update (tf.data call of the step)': _Timed(update, sample.data,
                                                  online, walk_start),
      'learner.step() (+ batch from iterator, metrics to Python)': learner,
  }


def _breakdown_report(envs, quick: bool, mode=None, json_out=None):
  """The float32 step cut into parts, per network, in this process, in the
  compile mode `mode` (default: the config's); the medians (s) also as
  JSON to `json_out`."""
  mode = mode or config_lib.IMPALAConfig().compile_mode
  print(f'learner_bench.py --breakdown at commit {provenance.git_commit()}: '
        f'{_tf_settings()}; '
        f'batch_size={_BATCH_SIZE}, unroll_length={_UNROLL_LENGTH}, float32, '
        f'compile_mode={mode!r}. Each part is timed alone on '
        'the same batch, repeats interleaved, median. Parts overlap: read '
        'differences.\n')
  results = {}
  for label, overrides, plan, quick_plan in _selected_networks(envs):
    config = _make_config(dict(overrides, torso_dtype='float32',
                               compile_mode=mode))
    sample, spec, _ = _make_batch(config)
    parts = _breakdown_parts(config, spec, sample)
    with _no_acme_snapshots():
      parts[_ACME] = _acme_learner(config, spec, sample)
    for part in parts.values():
      part.step()  # Trace and compile, untimed.
    warmup, rounds, target_s = quick_plan if quick else plan
    step_s, _ = _median_step_s(parts, warmup, rounds, target_s)
    full = step_s['learner.step() (+ batch from iterator, metrics to Python)']
    print(f'### {label}\n')
    print('| part | median (ms) | share of learner.step() |')
    print('|---|---:|---:|')
    for name, seconds in step_s.items():
      print(f'| {name} | {seconds * 1e3:.2f} | {seconds / full:.0%} |')
    print()
    sys.stdout.flush()
    results[label] = step_s
  if json_out:
    with open(json_out, 'w') as f:
      json.dump(results, f)


_ONEDNN = 'TF_ENABLE_ONEDNN_OPTS'


def _onednn_report(quick: bool, envs, modes):
  """The table twice, each in its own process: oneDNN off, then on (the
  variable is read when TensorFlow loads, so a process has one setting).
  Then each learner's samples/s against Acme's in the same setting and
  against Acme as users run it (TF defaults: oneDNN off)."""
  commit = provenance.git_commit()
  print(f'learner_bench.py at commit {commit} '
        f'on {provenance.cpu()}: '
        f'{_ONEDNN}=0 (TF 2.8\'s '
        f'default) and =1, one process each, one after the other.\n',
        flush=True)
  steps = {}
  for value in ('0', '1'):
    with tempfile.NamedTemporaryFile(suffix='.json') as out:
      env = dict(os.environ, **{_ONEDNN: value})
      cmd = [sys.executable, os.path.abspath(__file__), '--onednn=process',
             f'--json_out={out.name}'] + (['--quick'] if quick else []) + (
                 [f'--envs={",".join(envs)}'] if envs else []) + [
                     f'--modes={",".join(modes)}']
      print(f'## {_ONEDNN}={value}\n', flush=True)
      proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, timeout=3600)
      print(proc.stdout, flush=True)
      if proc.returncode != 0:
        raise SystemExit(f'{_ONEDNN}={value} failed:\n{proc.stderr[-3000:]}')
      with open(out.name) as f:
        steps[value] = json.load(f)
  print('## Against Acme\n')
  print('| network | learner | oneDNN | samples/s | vs Acme, same setting '
        '| vs Acme, TF defaults |')
  print('|---|---|---|---:|---:|---:|')
  for label in steps['0']:
    acme_default = steps['0'][label].get(_ACME)
    for value in ('0', '1'):
      acme_same = steps[value][label].get(_ACME)
      for name, step_s in steps[value][label].items():
        same = f'{acme_same / step_s:.2f}x' if acme_same else '-'
        default = f'{acme_default / step_s:.2f}x' if acme_default else '-'
        print(f'| {label} | {name} | {"on" if value == "1" else "off"} | '
              f'{_BATCH_SIZE / step_s:.0f} | {same} | {default} |')


# -- oneDNN's primitives inside a step: which kernels the float32 step's
# arithmetic runs on, at what rate. ----------------------------------------

_PRIMITIVE_STEPS = 10
_QUICK_PRIMITIVE_STEPS = 2
# The rate oneDNN reaches on this CPU when the shape is easy, against which
# each primitive of the step is read. The bias is there for the log: TF 2.8
# runs a plain MatMul as _MklMatMul (oneDNN's sgemm, which logs nothing);
# with a BiasAdd after it, grappler fuses the two into an inner product,
# which is logged.
_REFERENCE_SIZE = 2048
_REFERENCE = f'reference: {_REFERENCE_SIZE}^3 matmul + bias (inner product)'


def _primitives_child(envs, quick: bool, mode: str):
  """In a process with ONEDNN_VERBOSE=1: the reference matmul, then
  `_PRIMITIVE_STEPS` float32 steps of our learner and of Acme's per
  network, each between marks. The steps run as in training: ops that do
  not depend on each other may run side by side, sharing the cores, and
  oneDNN's timer then charges each with part of the other's time (the
  second convolution's two gradients, up to 5.9 ms each in the step, 3.5-4.5
  and 2.2-3.6 ms timed alone; AMD-512, d2995b7). Running one op at a time
  (inter-op parallelism 1) gave step and kernel times that varied from
  run to run by up to 1.6x (55-91 ms a step; 1405f27), so it is not
  used."""
  steps = _QUICK_PRIMITIVE_STEPS if quick else _PRIMITIVE_STEPS
  a = tf.random.stateless_normal([_REFERENCE_SIZE] * 2, [0, 1])
  b = tf.zeros([_REFERENCE_SIZE])
  timed = {_REFERENCE: _Timed(tf.function(
      lambda: tf.reduce_sum(tf.nn.bias_add(tf.matmul(a, a), b)),
      autograph=False))}
  for label, overrides, _, _ in _selected_networks(envs):
    config = _make_config(dict(overrides, torso_dtype='float32',
                               compile_mode=mode))
    sample, spec, _ = _make_batch(config)
    learners = _make_learners(config, spec, sample, [mode], bfloat16=False)
    timed[f'{label}: ours'] = learners[f'ours, {mode}']
    timed[f'{label}: {_ACME}'] = learners[_ACME]
  for segment, learner in timed.items():
    for _ in range(3):
      learner.step()
    onednn_verbose.mark('begin', segment)
    seconds = _time_steps(learner, steps) * steps
    onednn_verbose.mark('end', segment, str(steps), repr(seconds))


def _primitives_report(envs, quick: bool, mode: str):
  """Runs `_primitives_child` with oneDNN on and its verbose log, and
  prints per segment each primitive's calls per step, time and GFLOP/s."""
  if not _selected_networks(envs):
    raise SystemExit(
        f'learner_bench.py --onednn_primitives: --envs={",".join(envs)!r} '
        'names no network of this benchmark; expected some of '
        f'{[n[1]["env_id"] for n in _NETWORKS]}.')
  cmd = [sys.executable, os.path.abspath(__file__), '--primitives_child',
         f'--modes={mode}'] + (['--quick'] if quick else []) + (
             [f'--envs={",".join(envs)}'] if envs else [])
  env = dict(os.environ, ONEDNN_VERBOSE='1', **{_ONEDNN: '1'})
  print(f'learner_bench.py --onednn_primitives at commit '
        f'{provenance.git_commit()}: TensorFlow {tf.__version__}, '
        f'{_ONEDNN}=1 and ONEDNN_VERBOSE=1 in a process of its own, '
        f'{_isa_setting()}, on '
        f'{provenance.cpu()}; batch_size={_BATCH_SIZE}, '
        f'unroll_length={_UNROLL_LENGTH}, float32, compile_mode={mode!r}. '
        'Each call is timed by oneDNN itself (wall time: a kernel that ran '
        'beside another op shared the cores with it, so its rate is a '
        'lower bound); medians per call over the timed steps. The steps\' '
        'wall times include the verbose log\'s printing.\n',
        flush=True)
  proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True, timeout=3600)
  if proc.returncode != 0:
    raise SystemExit('learner_bench.py --onednn_primitives: its child '
                     f'process failed (exit {proc.returncode}):\n'
                     f'{proc.stderr[-3000:]}')
  segments = onednn_verbose.parse(proc.stdout)
  if not any(s['calls'] for s in segments.values()):
    raise SystemExit(
        'learner_bench.py --onednn_primitives: no oneDNN primitive ran in '
        f'any of {list(segments)}; expected ONEDNN_VERBOSE=1 exec lines '
        f'from TensorFlow\'s oneDNN kernels ({_ONEDNN}=1).')
  reference = segments.pop(_REFERENCE)['calls']
  size = _REFERENCE_SIZE
  key = ('inner_product', f'mb{size}ic{size}oc{size}')
  ref_times = [t for (kind, _, _, problem), t in reference.items()
               if (kind, problem) == key]
  if not ref_times:
    raise SystemExit(
        'learner_bench.py --onednn_primitives: the reference matmul ran no '
        f'oneDNN inner product {key[1]} (it ran {sorted(reference)}); '
        'expected TensorFlow\'s fused MatMul + BiasAdd to use one.')
  ref_ms = statistics.median(ref_times[0])
  ref_rate = onednn_verbose.primitive_gflop(*key) / (ref_ms / 1e3)
  print(f'{_REFERENCE}: {ref_ms:.2f} ms, {ref_rate:.0f} GFLOP/s.\n')
  results = {'reference_gflop_per_s': ref_rate, 'segments': {}}
  for segment, data in segments.items():
    n = data['steps']
    rows = []
    for (kind, impl, prop, problem), times in data['calls'].items():
      per_call = statistics.median(times)
      rows.append((per_call * len(times) / n, kind, impl, prop, problem,
                   len(times) / n, per_call,
                   onednn_verbose.primitive_gflop(kind, problem)))
    rows.sort(reverse=True)
    step_ms = data['seconds'] / n * 1e3
    in_primitives = sum(r[0] for r in rows)
    print(f'### {segment}\n')
    print('| primitive | implementation | problem | calls / step | '
          'ms / call | ms / step | GFLOP / call | GFLOP/s | of reference |')
    print('|---|---|---|---:|---:|---:|---:|---:|---:|')
    for per_step, kind, impl, prop, problem, calls, per_call, gflop in rows:
      # oneDNN logs times in ms to 3 decimals: a tiny call can show 0.
      rate = gflop / (per_call / 1e3) if gflop and per_call > 0 else None
      print(f'| {kind} {prop} | {impl} | {problem} | {calls:g} | '
            f'{per_call:.3f} | {per_step:.2f} | '
            f'{f"{gflop:.3g}" if gflop else "-"} | '
            f'{f"{rate:.0f}" if rate else "-"} | '
            f'{f"{rate / ref_rate:.0%}" if rate else "-"} |')
    print(f'\noneDNN primitives: {in_primitives:.1f} ms of the step\'s '
          f'{step_ms:.1f} ms ({in_primitives / step_ms:.0%}); the rest is '
          'ops that log no primitive (TensorFlow\'s _MklMatMul and '
          'elementwise kernels; XLA calls, where the learner makes them; '
          'the optimiser), dispatch and the verbose log.\n', flush=True)
    results['segments'][segment] = dict(step_ms=step_ms,
                                        primitives_ms=in_primitives)
  return results


def main():
  if len(sys.argv) == 6 and sys.argv[1] == '--replay_child':
    absl_logging.set_verbosity(absl_logging.ERROR)
    print(json.dumps(_replay_child(sys.argv[2], sys.argv[3],
                                   int(sys.argv[4]), int(sys.argv[5]))))
    return
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true',
                      help='far fewer timed steps (a smoke run)')
  parser.add_argument('--replay_states', action='store_true',
                      help="only the cost of LASER's recomputed replay "
                      "states ('recompute' vs 'stored')")
  parser.add_argument('--repeats', type=int, default=2,
                      help='--replay_states: alternations of the modes')
  parser.add_argument('--onednn', choices=('both', 'process'),
                      default='both',
                      help="both: the whole table in two processes, with "
                      "TensorFlow's oneDNN optimisations off (TF 2.8's "
                      "default, as users run Acme) and on, then every "
                      "learner against Acme's in both settings; process: "
                      "one table in this process as its environment is")
  parser.add_argument('--breakdown', action='store_true',
                      help='where a float32 step of our learner goes '
                      '(torso, LSTM, V-trace, optimiser, input, Python), '
                      'part by part, with Acme\'s step beside it')
  parser.add_argument('--onednn_primitives', action='store_true',
                      help="which of oneDNN's kernels a float32 step of "
                      "ours and of Acme's runs, each primitive's time per "
                      "step and GFLOP/s against a large matmul's (oneDNN "
                      "on, ONEDNN_VERBOSE=1, in a process of its own)")
  parser.add_argument('--json_out', default=None,
                      help='also write the report\'s figures (step times; '
                      'for --onednn_primitives the reference rate and each '
                      'step\'s time in primitives) as JSON here')
  parser.add_argument('--envs', default=None,
                      help='only these environments (comma-separated ids, '
                      'e.g. CartPole-v1); default: all of the mode')
  parser.add_argument('--modes', default=None,
                      help='only these compile modes of our learner '
                      '(comma-separated, of '
                      f'{", ".join(config_lib.COMPILE_MODES)}); default: all')
  parser.add_argument('--primitives_child', action='store_true',
                      help=argparse.SUPPRESS)
  args = parser.parse_args()
  envs = args.envs.split(',') if args.envs else None
  modes = (args.modes.split(',') if args.modes else
           list(config_lib.COMPILE_MODES))
  bad = [m for m in modes if m not in config_lib.COMPILE_MODES]
  if bad:
    parser.error(f'--modes={args.modes!r}: {bad} are not compile modes; '
                 f'expected some of {list(config_lib.COMPILE_MODES)}')
  exclusive = [f for f in ('replay_states', 'breakdown', 'onednn_primitives')
               if getattr(args, f)]
  if len(exclusive) > 1:
    parser.error(f'--{" and --".join(exclusive)}: one report at a time; '
                 'expected at most one of --replay_states, --breakdown, '
                 '--onednn_primitives.')
  one_mode = [f for f in ('breakdown', 'onednn_primitives')
              if getattr(args, f)]
  if one_mode and len(modes) > 1 and args.modes:
    parser.error(f'--modes={args.modes!r}: --{one_mode[0]} takes one '
                 'compile mode (default: the config\'s).')
  absl_logging.set_verbosity(absl_logging.ERROR)
  tf.get_logger().setLevel('ERROR')
  if args.replay_states:
    _replay_states_report(1 if args.quick else args.repeats,
                          [e for e in _REPLAY_ENVS if not envs or e in envs],
                          _REPLAY_QUICK_STEPS if args.quick else (
                              _REPLAY_FILL_STEPS, _REPLAY_TIMED_STEPS))
    return
  if args.breakdown:
    _breakdown_report(envs, args.quick, args.modes, args.json_out)
    return
  if args.primitives_child or args.onednn_primitives:
    mode = args.modes or config_lib.IMPALAConfig().compile_mode
  if args.primitives_child:
    _primitives_child(envs, args.quick, mode)
    return
  if args.onednn_primitives:
    results = _primitives_report(envs, args.quick, mode)
    if args.json_out:
      with open(args.json_out, 'w') as f:
        json.dump(results, f)
    return
  if args.onednn == 'both':
    _onednn_report(args.quick, envs, modes)
    return

  start = time.perf_counter()
  budget_s = _QUICK_COMPILE_BUDGET_S if args.quick else _COMPILE_BUDGET_S
  results = []
  networks = _selected_networks(envs)
  for i, (label, overrides, plan, quick_plan) in enumerate(networks):
    results.append(_bench_network(label, overrides,
                                  quick_plan if args.quick else plan,
                                  budget_s, warm_up=(i == 0), modes=modes))
  _print_report(results, budget_s, time.perf_counter() - start)
  sys.stdout.flush()
  if args.json_out:
    with open(args.json_out, 'w') as f:
      json.dump({res['label']: res['step_s'] for res in results}, f)
  if any(t.is_alive() for res in results for t in res['abandoned']):
    # Do not wait for, or tear TF down under, an abandoned compilation.
    os._exit(0)  # pylint: disable=protected-access


if __name__ == '__main__':
  main()
