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
exec "$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
