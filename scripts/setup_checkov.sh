#!/usr/bin/env bash
# Creates .venv-checkov: checkov (the policy checker tests/test_k8s.py runs
# on the rendered manifests) in a venv of its own, so none of its ~95
# dependencies moves a pin of the project's venv. Installs exactly
# requirements-checkov.txt (checkov and its resolved dependencies for Python
# 3.10) with --no-deps: resolving checkov's dependencies afresh took pip
# 10 minutes here, installing the locked set about one.
# Idempotent and safe to run twice at once (scripts/test.sh starts it in the
# background; the test runs it again and waits for it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-checkov"
LOCK="$ROOT/requirements-checkov.txt"
exec 9>"$ROOT/.venv-checkov.lock"
flock 9
HASH="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [[ -f "$VENV/.stamp" && "$(cat "$VENV/.stamp")" == "$HASH" ]]; then
  exit 0
fi
# The project's interpreter (scripts/setup_venv.sh found it): the lock is
# resolved for Python 3.10.
PY="$("$ROOT/.venv/bin/python" -c 'import sys; print(sys.base_prefix)')/bin/python3.10"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
if ! "$VENV/bin/python" -m pip --disable-pip-version-check install --no-deps \
    -r "$LOCK" > "$VENV/setup.log" 2>&1; then
  echo "error: installing checkov from $LOCK failed; last lines of" \
       "$VENV/setup.log:" >&2
  grep -v "is ignored: it is neither" "$VENV/setup.log" | tail -20 >&2
  exit 1
fi
echo "$HASH" > "$VENV/.stamp"
