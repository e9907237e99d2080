"""An actor's writing loop whose replay goes away, in its own process.

  python tests/adder_stop_worker.py SERVER_PORT [trajectory|acme_sequence]
      [lost|absent]

tests/test_adders.py starts a Reverb server on SERVER_PORT in another
process and SIGKILLs it once this process says `writing`. This process
writes windows on its main thread, as an actor node does, with the adder
of `config.adder` (default 'trajectory': a BatchedTrajectoryAdder;
'acme_sequence': Acme's SequenceAdder per environment), and closes the adder from a SIGTERM handler, as the
node's stop handler does. A watcher thread sends the SIGTERM once the loop
has been blocked for a second (its writes wait for the server). With
`absent` (default `lost`) no server ever runs on SERVER_PORT: the adder's
first writer waits for the tables' signatures, and the watcher runs from
the start. Prints
`ended after the stop` and exits 0 when the loop ends; exits 3 if it is
still blocked 20 s after the SIGTERM (the handler never ran: the main
thread never came back from Reverb), 4 if it never blocked.
"""

import os
import signal
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import dm_env  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top
import reverb  # pylint: disable=g-import-not-at-top

from acme_impala.agent import adders  # pylint: disable=g-import-not-at-top

K, LENGTH, OBS_DIM = 4, 6, 3


def main(port: int, kind: str, replay: str) -> int:
  client = reverb.Client(f'localhost:{port}')
  if kind == 'trajectory':
    adder = adders.BatchedTrajectoryAdder(client, K, LENGTH, LENGTH - 1,
                                          {'q': None})
  elif kind == 'acme_sequence':
    adder = adders.PerStreamAdders([
        adders.acme_sequence_adder(client, LENGTH, LENGTH - 1, {'q': None})
        for _ in range(K)])
  else:
    raise ValueError(f'adder kind {kind!r}: expected trajectory or '
                     'acme_sequence.')
  stop = threading.Event()
  last_add = [time.monotonic()]

  def on_sigterm(signum, frame):
    del signum, frame
    stop.set()
    adders.close_adder(adder)
  signal.signal(signal.SIGTERM, on_sigterm)

  def watch():
    deadline = time.monotonic() + 30
    while time.monotonic() - last_add[0] < 1.0:
      if time.monotonic() > deadline:
        print('never blocked', flush=True)
        os._exit(4)  # pylint: disable=protected-access
      time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(20)
    print('still blocked 20 s after the SIGTERM', flush=True)
    os._exit(3)  # pylint: disable=protected-access

  rng = np.random.default_rng(0)
  observation = lambda: rng.normal(size=(K, OBS_DIM)).astype(np.float32)  # pylint: disable=unnecessary-lambda-assignment
  watcher = None
  if replay == 'absent':
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
  mid = np.full(K, int(dm_env.StepType.MID), np.int32)
  try:
    for i in range(K):  # Acme's adder opens its writer here.
      adder.add_first(i, dm_env.restart(observation()[i]))
    while not stop.is_set():
      adder.add(np.zeros(K, np.int32),
                dm_env.TimeStep(mid, np.ones(K, np.float32),
                                np.ones(K, np.float32), observation()))
      last_add[0] = time.monotonic()
      if watcher is None and client.server_info()['q'].current_size:
        print('writing', flush=True)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
  except RuntimeError:
    if not stop.is_set():
      raise
  print('ended after the stop', flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main(int(sys.argv[1]),
                sys.argv[2] if len(sys.argv) > 2 else 'trajectory',
                sys.argv[3] if len(sys.argv) > 3 else 'lost'))
