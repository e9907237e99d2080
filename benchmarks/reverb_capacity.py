"""What one replay server and one variable-serving learner take: the numbers
behind the scaling plan in docs/gke.md.

  python benchmarks/reverb_capacity.py [--seconds=8] [--writers=1,2,4]

Two measurements, each with the real item layout of a config (the builder's
trajectory signature: CartPole's and Atari's, T+1 steps per item):
  - inserts: 1, 2, 4 writer processes, each appending whole [T+1, ...]
    windows and creating one item per window as `adders.TrajectoryAdder`
    does, into one Reverb server (its own process) whose table never blocks
    inserts; items/s and MB/s accepted by the server;
  - get_variables: 1, 2, 4 client processes calling a real `IMPALALearner`'s
    `get_variables(['policy'])` over courier, as actors refresh their
    weights; calls/s and MB/s served.
Prints a Markdown table with the git commit and settings. On these 2-core
machines the writers and the server share the cores, so the numbers are a
lower bound of what a server with its own cores takes.
"""

import multiprocessing as mp
import os
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app
from absl import flags
import provenance  # pylint: disable=g-import-not-at-top

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

flags.DEFINE_float('seconds', 8., 'Measured time per cell.')
flags.DEFINE_list('writers', ['1', '2', '4'], 'Writer/client process counts.')
flags.DEFINE_list('configs', ['cartpole', 'atari'], 'Item layouts.')
FLAGS = flags.FLAGS


def _builder(config_name):
  from acme_impala.agent import builder as builder_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import presets  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import registry
  config = presets.get_config(config_name)
  return builder_lib.IMPALABuilder(
      config, registry.environment_spec(config.env_id))


def _random_window(signature):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tree  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)

  def leaf(spec):
    shape = tuple(spec.shape)
    dtype = spec.dtype.as_numpy_dtype
    if np.issubdtype(dtype, np.floating):
      return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
      return np.zeros(shape, np.bool_)
    return rng.integers(0, 100, shape).astype(dtype)
  return tree.map_structure(leaf, signature)


def _server(config_name, port_queue, stop):
  import reverb  # pylint: disable=g-import-not-at-top
  signature = _builder(config_name).trajectory_signature()
  table = reverb.Table(
      name='capacity', sampler=reverb.selectors.Uniform(),
      remover=reverb.selectors.Fifo(), max_size=10_000,
      rate_limiter=reverb.rate_limiters.MinSize(1), signature=signature)
  server = reverb.Server([table])
  port_queue.put(server.port)
  stop.wait()
  server.stop()


def _writer(config_name, address, start, seconds, results):
  import reverb  # pylint: disable=g-import-not-at-top
  import tree  # pylint: disable=g-import-not-at-top
  signature = _builder(config_name).trajectory_signature()
  window = _random_window(signature)
  nbytes = sum(x.nbytes for x in tree.flatten(window))
  client = reverb.Client(address)
  writer = client.trajectory_writer(num_keep_alive_refs=1)
  start.wait()
  count, begin = 0, time.time()
  while time.time() - begin < seconds:
    writer.append(window)
    writer.create_item('capacity', 1.0, tree.map_structure(
        lambda column: column[-1], writer.history))
    writer.flush(2)
    count += 1
  writer.flush()
  results.put((count, nbytes, time.time() - begin))
  writer.close()


def _learner_server(config_name, port_queue, stop):
  import portpicker  # pylint: disable=g-import-not-at-top
  from launchpad.nodes.courier import courier_utils  # pylint: disable=g-import-not-at-top
  builder = _builder(config_name)
  learner = builder.make_learner(builder.make_network(), iter(()))
  port = portpicker.pick_unused_port()
  server = courier_utils.make_courier_server(learner, port=port)
  server.Start()
  port_queue.put(port)
  stop.wait()
  server.Stop()


def _variables_client(config_name, address, start, seconds, results):
  del config_name  # The server holds the config's network.
  import courier  # pylint: disable=g-import-not-at-top
  import tree  # pylint: disable=g-import-not-at-top
  client = courier.Client(address)
  variables = client.get_variables(['policy'])  # Warm-up, and the size.
  nbytes = sum(x.nbytes for x in tree.flatten(variables))
  start.wait()
  count, begin = 0, time.time()
  while time.time() - begin < seconds:
    client.get_variables(['policy'])
    count += 1
  results.put((count, nbytes, time.time() - begin))


def _cell(serve, work, config_name, n, seconds):
  """Starts the server process, n worker processes; totals per second."""
  ctx = mp.get_context('spawn')
  port_queue, stop, start = ctx.Queue(), ctx.Event(), ctx.Event()
  results = ctx.Queue()
  server = ctx.Process(target=serve, args=(config_name, port_queue, stop))
  server.start()
  try:
    address = f'localhost:{port_queue.get(timeout=300)}'
    workers = [ctx.Process(target=work, args=(config_name, address, start,
                                              seconds, results))
               for _ in range(n)]
    for w in workers:
      w.start()
    time.sleep(1.)
    # Workers import TensorFlow first; they start timing together.
    start.set()
    outs = [results.get(timeout=600) for _ in workers]
    for w in workers:
      w.join()
  finally:
    stop.set()
    server.join(timeout=60)
    if server.is_alive():
      server.kill()
  calls = sum(c / s for c, _, s in outs)
  return calls, calls * outs[0][1] / 2**20, outs[0][1]


def main(argv):
  del argv
  commit = provenance.git_commit()
  print(f'reverb_capacity.py at commit {commit} '
        f'on {provenance.cpu()}: '
        f'{FLAGS.seconds:.0f} s per '
        f'cell, processes {",".join(FLAGS.writers)}, {os.cpu_count()} CPUs '
        '(server and workers share them)\n')
  print('| what | config | processes | per second | MB/s | bytes per call |')
  print('|---|---|---:|---:|---:|---:|')
  for config_name in FLAGS.configs:
    for n in map(int, FLAGS.writers):
      rate, mbs, size = _cell(_server, _writer, config_name, n,
                              FLAGS.seconds)
      print(f'| inserts (items) | {config_name} | {n} writers | {rate:,.0f} '
            f'| {mbs:,.1f} | {size:,} |', flush=True)
  for config_name in FLAGS.configs:
    for n in map(int, FLAGS.writers):
      rate, mbs, size = _cell(_learner_server, _variables_client,
                              config_name, n, FLAGS.seconds)
      print(f'| get_variables | {config_name} | {n} clients | {rate:,.0f} | '
            f'{mbs:,.1f} | {size:,} |', flush=True)


if __name__ == '__main__':
  app.run(main)
