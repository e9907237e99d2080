"""Node state: the counter's checkpoint holds JSON, never a pickle."""

import os
import pickle

from acme.tf import savers as tf2_savers
from acme.utils import counting
import pytest

from acme_impala.distributed import nodes


def _checkpointer(obj, directory):
  return tf2_savers.Checkpointer(objects_to_save={'counter': obj},
                                 directory=str(directory),
                                 subdirectory='counter', add_uid=False,
                                 time_delta_minutes=0.)


def test_counter_state_round_trips_as_json(tmp_path):
  counter = counting.Counter()
  counter.increment(actor_steps=31_453, learner_steps=12)
  _checkpointer(nodes.CounterState(counter, 'counter'), tmp_path).save(
      force=True)
  restored = counting.Counter()
  _checkpointer(nodes.CounterState(restored, 'counter'), tmp_path)
  assert restored.get_counts() == {'actor_steps': 31_453,
                                   'learner_steps': 12}
  # The checkpoint's data file holds the counts as JSON text, no pickle.
  data = b''.join(
      open(os.path.join(root, f), 'rb').read()
      for root, _, files in os.walk(tmp_path) for f in files
      if '.data-' in f)
  assert b'"actor_steps": 31453' in data
  assert pickle.PROTO not in data


def test_a_pickled_counter_checkpoint_is_refused(tmp_path):
  """Acme's own adapter (what older runs wrote) pickles the state."""
  old = counting.Counter()
  old.increment(actor_steps=5)
  _checkpointer(old, tmp_path).save(force=True)  # SaveableAdapter: pickle.
  with pytest.raises(ValueError, match='pickled state .* not loaded'):
    _checkpointer(nodes.CounterState(counting.Counter(), 'counter'), tmp_path)
