"""Shared test set-up: run from the repo root so `configs` is importable."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# TensorFlow's process settings as a program has them (oneDNN on, TF2
# behaviour), before any test module imports TensorFlow.
import acme_impala  # pylint: disable=g-import-not-at-top,unused-import
