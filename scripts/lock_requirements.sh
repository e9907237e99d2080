#!/usr/bin/env bash
# Regenerates requirements.lock: the full resolved set of the top-level pins
# (requirements.txt, requirements-test.txt, requirements-nodeps.txt), read
# from a fresh Python 3.10 venv. Run it after changing a pin, and commit the
# result; scripts/setup_venv.sh and the Dockerfile install with
# `-c requirements.lock`, so no transitive dependency moves on its own.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The venv's own interpreter (scripts/setup_venv.sh found a Python 3.10).
bash "$ROOT/scripts/setup_venv.sh"
PY="$(readlink -f "$ROOT/.venv/bin/python")"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PY" -m venv "$TMP/venv"
PIP=("$TMP/venv/bin/python" -m pip --disable-pip-version-check -q install)
"${PIP[@]}" -r "$ROOT/requirements.txt" -r "$ROOT/requirements-test.txt"
"${PIP[@]}" --no-deps -r "$ROOT/requirements-nodeps.txt"
{
  echo "# The full resolved set of requirements.txt, requirements-test.txt and"
  echo "# requirements-nodeps.txt on Python 3.10 (x86_64 Linux), made by"
  echo "# scripts/lock_requirements.sh; used as pip constraints (-c) by"
  echo "# scripts/setup_venv.sh and the Dockerfile. Do not edit by hand."
  "$TMP/venv/bin/python" -m pip freeze --disable-pip-version-check --all \
    | grep -v -E '^(pip|setuptools|wheel)==' | LC_ALL=C sort -f
} > "$ROOT/requirements.lock"
echo "wrote $ROOT/requirements.lock ($(grep -c '==' "$ROOT/requirements.lock") pins)" >&2
