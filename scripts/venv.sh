#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment in .venv and installs grainlite with the
# extras given as $1 (default: dev). Depends on nothing but a python3 >= 3.11 with venv.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev}"
py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=".venv/.installed-$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # torch is never wanted: nothing here depends on it, and a stray resolve would pull GBs.
  .venv/bin/python -m pip install -q -e ".[$extras]"
  touch "$stamp"
fi
