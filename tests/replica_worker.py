"""One learner replica of tests/test_replicas.py, in its own process.

  python tests/replica_worker.py CASES.pkl OUT.pkl INDEX ADDRESS,ADDRESS,...

Joins the collective group (before any TensorFlow op, as a learner node
does), then per case of CASES.pkl (`split` and `run_replica`): builds the
replica's learner on its share of each whole batch, takes replica 0's
training state (`sync_replicas`; replica 0 starts from the case's initial
weights, the others from another seed), steps through the batches and
writes the weights and LASER walk states it ends with to OUT.pkl.
"""

import os
import pickle
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def encode(nest):
  """A nest of namedtuples (Reverb rebuilds its own classes, which do not
  pickle), dicts, lists and arrays, as picklable plain values."""
  if hasattr(nest, '_fields'):
    return {'__namedtuple__': type(nest).__name__,
            'fields': {k: encode(v) for k, v in zip(nest._fields, nest)}}
  if isinstance(nest, dict):
    return {k: encode(v) for k, v in nest.items()}
  if isinstance(nest, (list, tuple)):
    return type(nest)(encode(v) for v in nest)
  return nest


def decode(value):
  """`encode`'s nest back, each namedtuple a class of the same fields."""
  import collections  # pylint: disable=g-import-not-at-top
  if isinstance(value, dict) and '__namedtuple__' in value:
    fields = value['fields']
    cls = collections.namedtuple(value['__namedtuple__'], list(fields))
    return cls(**{k: decode(v) for k, v in fields.items()})
  if isinstance(value, dict):
    return {k: decode(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return type(value)(decode(v) for v in value)
  return value


def split(batch, num_online: int, index: int, size: int):
  """Replica `index`'s share of a whole `types.Batch`: its contiguous
  1/size of the online rows, then of the replayed rows (the layout a
  replica's own dataset gives: online rows first)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tree  # pylint: disable=g-import-not-at-top
  rows = len(np.asarray(batch.online))
  on, rep = num_online // size, (rows - num_online) // size
  take = np.concatenate([
      np.arange(index * on, (index + 1) * on),
      num_online + np.arange(index * rep, (index + 1) * rep)]).astype(int)
  return tree.map_structure(
      lambda x: None if x is None else np.asarray(x)[take], batch)


def run_replica(case, index: int, size: int, group):
  """(weights, walk_states, digest after sync) of replica `index`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from acme import specs  # pylint: disable=g-import-not-at-top
  from acme.tf import utils as tf2_utils  # pylint: disable=g-import-not-at-top
  from acme.utils import loggers  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import config as config_lib  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import learning  # pylint: disable=g-import-not-at-top
  from acme_impala.agent import networks  # pylint: disable=g-import-not-at-top
  from acme_impala.envs import registry  # pylint: disable=g-import-not-at-top
  whole = config_lib.IMPALAConfig(**case['config'])
  config = whole.replace(batch_size=whole.batch_size // size)
  env = registry.make_environment(config.env_id, seed=0)
  spec = specs.make_environment_spec(env)
  env.close()
  tf.random.set_seed(100 + index)
  net = networks.make_network(config, spec.actions.num_values)
  tf2_utils.create_variables(net, [spec.observations])
  if index == 0:
    for variable, value in zip(net.variables, case['weights']):
      variable.assign(value)
  from acme_impala.agent import types  # pylint: disable=g-import-not-at-top
  shares = [split(types.Batch(*decode(b)), whole.num_online, index, size)
            for b in case['batches']]
  learner = learning.IMPALALearner(
      net, iter(shares), config, logger=loggers.NoOpLogger(),
      replica_group=group)
  digest = learner.sync_replicas()
  for _ in shares:
    learner.step()
  return dict(weights=[v.numpy() for v in net.variables],
              walk_states=learner.walk_states, digest=digest,
              num_steps=learner.num_steps)


def main(argv):
  cases_path, out_path, index, addresses = argv[1:5]
  index, addresses = int(index), addresses.split(',')
  from acme_impala.distributed import collective  # pylint: disable=g-import-not-at-top
  strategy = collective.join(addresses, index, timeout_s=120)
  from acme_impala.agent import replicas  # pylint: disable=g-import-not-at-top
  with open(cases_path, 'rb') as f:
    cases = pickle.load(f)
  group = replicas.Group.collective(index, len(addresses), timeout_s=120)
  out = {name: run_replica(case, index, len(addresses), group)
         for name, case in cases.items()}
  with open(out_path + '.tmp', 'wb') as f:
    pickle.dump(out, f)
  os.replace(out_path + '.tmp', out_path)
  del strategy


if __name__ == '__main__':
  main(sys.argv)
  # Its result is written. A collective replica's exit can abort in
  # TensorFlow's teardown of its gRPC server threads ("terminate called
  # without an active exception", exit -6: seen once in a full test run),
  # failing a finished replica; it leaves without that teardown, as the
  # program's forked nodes and benchmarks/allreduce_bench.py's replicas do.
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(0)  # pylint: disable=protected-access
