#!/usr/bin/env bash
# Sets up .venv if needed (see setup_venv.sh), then runs the main job:
# the distributed IMPALA program (default: a short CartPole training).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_venv.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" programs/impala_lp.py --lp_launch_type=local_mp "$@"
