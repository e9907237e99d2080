"""What all-reducing a learner's gradients costs between 2 processes.

  python benchmarks/allreduce_bench.py
  python benchmarks/allreduce_bench.py --nets=shallow --steps=10 --repeats=1

K synchronous learners (IMPALA Fig. 1 right, issue 40) average their
gradients every step. This measures that exchange alone between two
processes on loopback, for the gradients of the Atari config's shallow and
deep networks (their trainable variables' shapes, float32), by
`collective`: TensorFlow's `MultiWorkerMirroredStrategy` (ring all-reduce
over gRPC), the gradients' mean in a `tf.function`; and `courier`:
Launchpad's courier, which the nodes already talk over, replica 0 serving
the mean to the others, the gradients packed as one .npz blob each way
(`nodes.pack_arrays`: courier 0.5.2 cannot take numpy arrays as call
arguments, which is why an earlier version of this script offered the
collective only).

Each (net, method) is a fresh pair of processes; after `--warmup` exchanges
each replica times `--steps` more and the slower replica's median is
reported. Repeats run the methods in turn, so that background load skews
neither. Each exchange is checked: replica i sends i + 1 everywhere, so the
mean is 1.5. Prints a Markdown table with the commit and CPU.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import program_runs  # pylint: disable=g-import-not-at-top,wrong-import-position
import provenance  # pylint: disable=g-import-not-at-top,wrong-import-position

METHODS = ('collective', 'courier')
NETS = ('shallow', 'deep')
_TIMEOUT_S = 300


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def gradient_shapes(net: str):
  """The trainable variables' shapes of the atari config's `net` network
  on Pong (float32): what one learner step's gradients hold."""
  from acme_impala.agent import builder as builder_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import presets  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import registry  # pylint: disable=g-import-not-at-top
  config = presets.get_config('atari').replace(
      network=net, torso_dtype='float32', env_id='ALE/Pong-v5')
  network = builder_lib.IMPALABuilder(
      config, registry.environment_spec(config.env_id)).make_network()
  return [tuple(v.shape.as_list()) for v in network.trainable_variables]


def _collective(index, ports, shapes, steps, warmup):
  os.environ['TF_CONFIG'] = json.dumps({
      'cluster': {'worker': [f'localhost:{p}' for p in ports]},
      'task': {'type': 'worker', 'index': index}})
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  implementation = tf.distribute.experimental.CommunicationImplementation.RING
  strategy = tf.distribute.MultiWorkerMirroredStrategy(
      communication_options=tf.distribute.experimental.CommunicationOptions(
          implementation=implementation))
  # Constants made in the replica function: variables made under the
  # strategy's scope would start equal on both replicas.
  value = float(index + 1)

  @tf.function
  def exchange():
    def replica_fn():
      grads = [tf.fill(shape, value) for shape in shapes]
      return tf.distribute.get_replica_context().all_reduce(
          tf.distribute.ReduceOp.MEAN, grads)
    return strategy.run(replica_fn)

  def step():
    out = strategy.experimental_local_results(exchange())[0]
    return [np.asarray(g) for g in out]

  return _time(step, steps, warmup)


def _courier(index, ports, shapes, steps, warmup):
  import threading  # pylint: disable=g-import-not-at-top
  import courier  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from acme_impala.distributed import nodes  # pylint: disable=g-import-not-at-top
  grads = [np.full(shape, float(index + 1), np.float32) for shape in shapes]
  if index:
    client = courier.Client(f'localhost:{ports[0]}', call_timeout=_TIMEOUT_S)
    count = [0]

    def remote_step():
      count[0] += 1
      return nodes.unpack_arrays(client.reduce(count[0],
                                               nodes.pack_arrays(grads)))
    return _time(remote_step, steps, warmup)

  lock = threading.Condition()
  sums, arrived, means = {}, {}, {}

  def contribute(step, arrays):
    with lock:
      if step in sums:
        sums[step] = [a + b for a, b in zip(sums[step], arrays)]
      else:
        sums[step] = [np.array(a) for a in arrays]
      arrived[step] = arrived.get(step, 0) + 1
      if arrived[step] == len(ports):
        means[step] = [a / len(ports) for a in sums.pop(step)]
        lock.notify_all()
      lock.wait_for(lambda: step in means)
      return means[step]

  server = courier.Server('reducer', port=ports[0])
  server.Bind('reduce', lambda step, blob: nodes.pack_arrays(
      contribute(step, nodes.unpack_arrays(blob))))
  server.Start()
  count = [0]

  def local_step():
    count[0] += 1
    return contribute(count[0], grads)
  try:
    return _time(local_step, steps, warmup)
  finally:
    time.sleep(2)  # The last answer reaches replica 1 before the stop.
    server.Stop()


def _time(step, steps, warmup):
  for _ in range(warmup):
    _check(step())
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    out = step()
    times.append(time.perf_counter() - start)
    _check(out)
  return times


def _check(grads):
  for g in grads:
    if not (g.min() == g.max() == 1.5):
      raise AssertionError(f'the mean is not 1.5: {g.min()}..{g.max()}')


def _worker(argv):
  method, shapes, index, ports, steps, warmup = (
      argv[0], [tuple(s) for s in json.loads(argv[1])], int(argv[2]),
      [int(p) for p in argv[3].split(',')], int(argv[4]), int(argv[5]))
  times = {'collective': _collective, 'courier': _courier}[method](
      index, ports, shapes, steps, warmup)
  print('RESULT ' + json.dumps({'times': times}), flush=True)


def _run_pair(method, net, shapes, steps, warmup):
  # The shapes come from this process: a collective strategy must be made
  # before the process runs any TensorFlow op ("Collective ops must be
  # configured at program startup"), so a replica builds no network.
  ports = [_free_port(), _free_port()]
  procs = [program_runs.popen(
      [sys.executable, os.path.abspath(__file__), '--worker', method,
       json.dumps(shapes), str(i), ','.join(map(str, ports)), str(steps), str(warmup)],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(2)]
  outputs = []
  try:
    # Replica 1 first: when it fails, replica 0 would wait it out.
    for proc in reversed(procs):
      out, _ = proc.communicate(timeout=_TIMEOUT_S)
      if proc.returncode != 0:
        raise RuntimeError(f'{method}/{net} replica failed '
                           f'({proc.returncode}):\n{out[-3000:]}')
      outputs.append(out)
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  medians = []
  for out in outputs:
    line = [l for l in out.splitlines() if l.startswith('RESULT ')][-1]
    times = json.loads(line[len('RESULT '):])['times']
    if times:
      medians.append(statistics.median(times))
  return max(medians)


def main():
  if len(sys.argv) > 1 and sys.argv[1] == '--worker':  # One replica.
    _worker(sys.argv[2:])
    # Its result is printed and flushed. A collective replica's exit can
    # abort in TensorFlow's teardown of its gRPC server threads
    # ("terminate called without an active exception", exit -6: once in
    # CI at 3100fe4, not in 3 runs here), which would fail a finished
    # measurement; so the replica leaves without that teardown.
    os._exit(0)  # pylint: disable=protected-access
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--nets', default=','.join(NETS))
  parser.add_argument('--methods', default=','.join(METHODS))
  parser.add_argument('--steps', type=int, default=50)
  parser.add_argument('--warmup', type=int, default=5)
  parser.add_argument('--repeats', type=int, default=3)
  args = parser.parse_args()
  nets, methods = args.nets.split(','), args.methods.split(',')
  for value, allowed, name in ((nets, NETS, 'nets'),
                               (methods, METHODS, 'methods')):
    bad = [v for v in value if v not in allowed]
    if bad:
      parser.error(f'--{name}={",".join(value)}: {bad} not among {allowed}')
  if args.steps < 1 or args.warmup < 1 or args.repeats < 1:
    parser.error('--steps, --warmup and --repeats must be at least 1')
  program_runs.exit_on_sigterm()  # Its `finally` blocks stop the replicas.
  print(f'allreduce_bench.py at {provenance.stamp()}; 2 processes on '
        f'loopback, {args.steps} timed exchanges after {args.warmup}, '
        f'{args.repeats} repeats', flush=True)
  shapes = {net: gradient_shapes(net) for net in nets}
  sizes = {net: sum(_prod(s) for s in shapes[net]) for net in nets}
  results = {(n, m): [] for n in nets for m in methods}
  for repeat in range(args.repeats):
    for net in nets:
      for method in methods:
        seconds = _run_pair(method, net, shapes[net], args.steps, args.warmup)
        results[(net, method)].append(seconds)
        print(f'repeat {repeat}: {net} {method}: {seconds * 1e3:.1f} ms',
              flush=True)
  print('\n| net | parameters | MB (float32) | method | exchange, median of '
        'repeats (ms) | min-max (ms) |\n|---|---:|---:|---|---:|---|')
  for net in nets:
    for method in methods:
      values = results[(net, method)]
      print(f'| {net} | {sizes[net]:,} | {sizes[net] * 4 / 1e6:.1f} | '
            f'{method} | {statistics.median(values) * 1e3:.1f} | '
            f'{min(values) * 1e3:.1f}-{max(values) * 1e3:.1f} |')
  return 0


def _prod(shape):
  n = 1
  for d in shape:
    n *= d
  return n


if __name__ == '__main__':
  sys.exit(main())
