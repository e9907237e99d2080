#!/usr/bin/env bash
# Makes .venv-sf (Python 3.11) with Sample Factory 2.1.1 and the CPU build of
# PyTorch, for benchmarks/vs_sample_factory.py. Idempotent (stamp of the pins)
# and safe to run twice at once (scripts/test.sh starts it in the background;
# the benchmark's test runs it again and waits for it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-sf"
REQS="$ROOT/benchmarks/requirements-sample-factory.txt"
STAMP="$VENV/.stamp"
exec 9>"$ROOT/.venv-sf.lock"
flock 9
HASH="$(sha256sum "$REQS" | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$HASH" ]]; then exit 0; fi
PY="$(command -v python3.11 || true)"
if [[ -z "$PY" ]] && command -v pyenv >/dev/null 2>&1; then
  PY="$(pyenv prefix "$(pyenv versions --bare | grep -E '^3\.11' | sort -rV | head -1)")/bin/python3.11"
fi
if [[ ! -x "$PY" ]]; then
  echo "error: Sample Factory's venv needs Python 3.11 (python3.11 or a pyenv 3.11.x)." >&2
  exit 1
fi
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q -r "$REQS"
echo "$HASH" > "$STAMP"
echo "[setup] $VENV ready" >&2
