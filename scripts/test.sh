#!/usr/bin/env bash
# Sets up .venv if needed (see setup_venv.sh), then runs the test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# The venvs of Sample Factory (the vs_sample_factory.py benchmark's run) and
# of checkov (tests/test_k8s.py's policy check): for the whole suite they
# are made in the background from the start, one after the other, beside
# the project's setup (pip uses one core each). Made after it, while the
# first tests ran, they took ~105 s of CPU from the tests (AMD EPYC, 2
# cores). Each test runs its setup script itself, which waits for a setup
# under way (flock) and redoes one that did not finish (checkov's needs
# .venv's interpreter, there long before Sample Factory's setup ends), so a
# run of chosen tests (arguments) makes only what those tests need. One
# session, so the EXIT trap ends pip with it when the tests stop early.
if [[ $# == 0 ]]; then
  setsid bash -c "bash '$ROOT/benchmarks/setup_sample_factory.sh';
                  bash '$ROOT/scripts/setup_checkov.sh'" \
      >/dev/null 2>&1 &
  setups=$!
  trap 'kill -- "-$setups" 2>/dev/null || true' EXIT
fi
# The multi-host Kubernetes tests (tests/test_k8s.py) serve DNS with dnsmasq
# inside a network namespace; they need root, as CI has. Installed beside
# the project's setup, and waited for even if that fails (apt is not cut
# short mid-install).
apt=
if [[ "$(id -u)" == 0 ]] && ! command -v dnsmasq >/dev/null 2>&1; then
  echo "[test] installing dnsmasq-base for the multi-host tests" >&2
  (apt-get update >/dev/null && apt-get install -y dnsmasq-base >/dev/null) &
  apt=$!
fi
setup=0
bash "$ROOT/scripts/setup_venv.sh" || setup=$?
if [[ -n "$apt" ]]; then
  wait "$apt"
fi
if [[ "$setup" != 0 ]]; then
  exit "$setup"
fi
status=0
# Two workers (pytest-xdist), one test file each at a time: the tests wait
# on real programs for much of their time, and most programs use both
# cores only part of it (1.5x faster on 2 cores than one worker). The
# slowest tests are listed at the end: CI must stay under 25 minutes.
"$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 \
    --dist loadgroup --durations=20 tests "$@" || status=$?
exit "$status"
