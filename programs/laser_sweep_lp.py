"""A LASER sweep: `impala_lp.py` with a sweep's defaults.

  python programs/laser_sweep_lp.py --lp_launch_type=local_mp \\
      --learning_rates=1e-3,2e-3 --entropy_costs=0.01 --max_actor_steps=200000
  python programs/laser_sweep_lp.py --noshare_replay ...   # one replay each

The same program and flags as `programs/impala_lp.py` (see its --help);
only the defaults differ: two agents (--learning_rates=1e-3,2e-3
--entropy_costs=0.01) sharing one replay, one actor each
(--num_actors=1), 100k env steps per agent, logdir runs/laser-<time>.
"""

import os
import sys

if __name__ == '__main__':  # First, while this process has one thread.
  from acme_impala.launch import isolation  # pylint: disable=g-import-not-at-top
  isolation.isolate_unless_exposed('laser_sweep_lp', sys.argv)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import impala_lp  # pylint: disable=g-import-not-at-top,wrong-import-position

DEFAULTS = {'learning_rates': ['1e-3', '2e-3'], 'entropy_costs': ['0.01'],
            'num_actors': 1, 'max_actor_steps': 100_000}


def main(argv, overrides):
  return impala_lp.main(argv, overrides, name='laser_sweep_lp')


if __name__ == '__main__':
  for flag, value in DEFAULTS.items():
    impala_lp.FLAGS.set_default(flag, value)
  impala_lp.run_main('laser_sweep_lp', main)
