"""Draws the training curves of runs of impala_lp.py or laser_sweep_lp.py.

  python programs/plot.py runs/cartpole                   # -> ./curves.png
  python programs/plot.py runs/s0 runs/s1 runs/s2 --labels=s0,s1,s2 \\
      --output=seeds.png

One LOGDIR: that run's figure (`plots.write_run_curves`: every evaluation
episode, each learner row, a line per agent of a sweep). Several: one figure
with each run's curves and their mean and min-max band over the env steps
every run reached (`plots.plot_runs`; agents of sweeps grouped by index).
Either way the PNG goes to --output (default ./curves.png, never into a
run's directory unasked) and its path is printed. A LOGDIR that is missing or
has nothing to plot: one line on stderr naming it, exit status 2.
"""

import sys

from absl import app
from absl import flags

from acme_impala.launch import plots
from acme_impala.launch import program_flags

FLAGS = flags.FLAGS
flags.DEFINE_string('output', 'curves.png', 'The PNG to write.')
flags.DEFINE_list('labels', None,
                  'A legend label per LOGDIR when there are several '
                  '(default: their directory names).')


def main(argv):
  logdirs = argv[1:]
  try:
    if not logdirs:
      raise ValueError('give one or more run directories: plot.py '
                       'LOGDIR... [--output=FILE.png] [--labels=a,b,...]')
    if FLAGS.labels is not None and len(FLAGS.labels) != len(logdirs):
      raise ValueError(f'--labels has {len(FLAGS.labels)} labels for '
                       f'{len(logdirs)} LOGDIRs.')
    if len(logdirs) == 1:
      path = plots.write_run_curves(logdirs[0], FLAGS.output)
    else:
      path = plots.plot_runs(logdirs, FLAGS.output, FLAGS.labels)
  except ValueError as error:
    print(f'plot: error: {error}', file=sys.stderr)
    return 2
  print(path)
  return 0


if __name__ == '__main__':
  app.run(main, flags_parser=program_flags.flags_parser(
      'plot', config_overrides=False, launchpad=False))
