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
  # torch first, pinned to "torch==2.13.*": on these machines that resolves to a local CPU wheel
  # (2.13.0+cpu). Any other resolution (e.g. by "-e .[dev]" pulling torch>=2.2 on its own)
  # downloads the multi-GB CUDA build and its nvidia-* packages, which nothing here needs.
  if [ "$extras" = "dev" ] || [ "$extras" = "torch" ] || [ "$extras" = "lightning" ]; then
    .venv/bin/python -m pip install -q "torch==2.13.*"
  fi
  .venv/bin/python -m pip install -q -e ".[$extras]"
  touch "$stamp"
fi
