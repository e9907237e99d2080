#!/usr/bin/env bash
# Creates .venv with Python 3.10 and installs the pinned stack plus this project.
# Idempotent: a stamp file records the hash of the requirements; when it matches, this
# returns in well under a second.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.acme_impala_stamp"
HASH="$(cat "$ROOT/requirements.txt" "$ROOT/requirements-test.txt" "$ROOT/requirements-nodeps.txt" "$ROOT/requirements.lock" "$ROOT/setup.py" | sha256sum | cut -d' ' -f1)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$HASH" && -x "$VENV/bin/python" ]]; then
  exit 0
fi

find_python310() {
  if command -v python3.10 >/dev/null 2>&1 && python3.10 --version >/dev/null 2>&1; then
    command -v python3.10; return 0
  fi
  if command -v pyenv >/dev/null 2>&1; then
    local v prefix
    for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.10(\.|$)' | sort -rV); do
      prefix="$(pyenv prefix "$v" 2>/dev/null || true)"
      if [[ -x "$prefix/bin/python3.10" ]]; then echo "$prefix/bin/python3.10"; return 0; fi
    done
  fi
  return 1
}

if [[ ! -x "$VENV/bin/python" ]]; then
  if ! PY="$(find_python310)"; then
    echo "error: Python 3.10 is required (dm-launchpad 0.5.2 has no wheel for other versions)," >&2
    echo "       but neither 'python3.10' on PATH nor a pyenv 3.10.x install was found." >&2
    echo "       Install it, e.g. 'pyenv install 3.10.13', and re-run." >&2
    exit 1
  fi
  echo "[setup] creating $VENV with $PY" >&2
  "$PY" -m venv "$VENV"
fi
LOG="$VENV/setup.log"
pip_install() {
  # pip's output goes to a log (this machine's pip config adds noisy warnings);
  # on failure its tail is shown.
  # Byte-compiled at install (pip's default), not on import: where
  # PYTHONDONTWRITEBYTECODE is set (as on these machines) nothing compiled
  # on import is kept, and every process would compile TensorFlow again
  # (tried: a CI run took 44 min instead of 27).
  if ! "$VENV/bin/python" -m pip --disable-pip-version-check install \
      "$@" >>"$LOG" 2>&1; then
    echo "error: 'pip install $*' failed; last lines of $LOG:" >&2
    grep -v "is ignored: it is neither" "$LOG" | tail -25 >&2
    exit 1
  fi
}
: > "$LOG"
echo "[setup] installing the pinned stack into $VENV (about a minute with a warm cache)" >&2
# requirements.lock pins every transitive dependency too
# (scripts/lock_requirements.sh makes it from the top-level pins).
pip_install -r "$ROOT/requirements.txt" -r "$ROOT/requirements-test.txt" \
    -c "$ROOT/requirements.lock"
pip_install --no-deps -r "$ROOT/requirements-nodeps.txt" \
    -c "$ROOT/requirements.lock"
pip_install --no-deps -e "$ROOT"
echo "$HASH" > "$STAMP"
echo "[setup] done" >&2
