#!/usr/bin/env bash
# Sets up .venv if needed (see setup_venv.sh), then runs the test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_venv.sh"
# The multi-host Kubernetes tests (tests/test_k8s.py) serve DNS with dnsmasq
# inside a network namespace; they need root, as CI has.
if [[ "$(id -u)" == 0 ]] && ! command -v dnsmasq >/dev/null 2>&1; then
  echo "[test] installing dnsmasq-base for the multi-host tests" >&2
  apt-get update >/dev/null && apt-get install -y dnsmasq-base >/dev/null
fi
cd "$ROOT"
# The venvs of checkov (tests/test_k8s.py's policy check) and of Sample
# Factory (the vs_sample_factory.py benchmark's run) are mostly downloads:
# for the whole suite they are made in the background, one after the other,
# while the first tests run. Each test runs its setup script itself, which
# waits for a setup under way (flock), so a run of chosen tests (arguments)
# makes only what those tests need. One session, so the EXIT trap ends pip
# with it when the tests stop early.
if [[ $# == 0 ]]; then
  setsid bash -c "bash '$ROOT/scripts/setup_checkov.sh';
                  bash '$ROOT/benchmarks/setup_sample_factory.sh'" \
      >/dev/null 2>&1 &
  setups=$!
  trap 'kill -- "-$setups" 2>/dev/null || true' EXIT
fi
status=0
# Two workers (pytest-xdist), one test file each at a time: the tests wait
# on real programs for much of their time, and most programs use both
# cores only part of it (1.5x faster on 2 cores than one worker).
"$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 \
    --dist loadgroup tests "$@" || status=$?
exit "$status"
