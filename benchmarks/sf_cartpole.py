"""Sample Factory 2.1.1's CartPole example, run in its own venv (.venv-sf).

Used by vs_sample_factory.py; takes Sample Factory's command-line flags.
One fix is applied first: with `--with_vtrace=True`, 2.1.1's learner crashes
on its first summary (`Learner._record_summaries` reads `mb.advantages`,
which only its GAE path computes; fixed upstream after 2.1.1, in
alex-petrenko/sample-factory pull request #332, by skipping those stats).
Here the advantage stats are NaN under V-trace; training is untouched.
"""

import sys

from sample_factory.algo.learning import learner as sf_learner
from sf_examples import train_gym_env
import torch

_record_summaries = sf_learner.Learner._record_summaries  # pylint: disable=protected-access


def _record_summaries_without_gae(self, var):
  if 'advantages' not in var.mb:
    nan = torch.tensor(float('nan'))
    var.mb['advantages'] = nan
    var.setdefault('adv_std', nan)
    var.setdefault('adv_mean', nan)
  return _record_summaries(self, var)


sf_learner.Learner._record_summaries = _record_summaries_without_gae  # pylint: disable=protected-access

if __name__ == '__main__':
  sys.exit(train_gym_env.main())
