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
# checkov's venv (tests/test_k8s.py's policy check) is mostly downloads:
# made in the background while the first tests run; the test waits for it.
# Its own session, so the EXIT trap ends pip with it when tests stop early.
setsid bash "$ROOT/scripts/setup_checkov.sh" >/dev/null 2>&1 &
checkov_setup=$!
trap 'kill -- "-$checkov_setup" 2>/dev/null || true' EXIT
status=0
# Two workers (pytest-xdist), one test file each at a time: the tests wait
# on real programs for much of their time, and most programs use both
# cores only part of it (1.5x faster on 2 cores than one worker).
"$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 \
    --dist loadgroup tests "$@" || status=$?
exit "$status"
