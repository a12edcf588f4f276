#!/usr/bin/env bash
# Creates (or reuses) .venv-beam, a virtual environment with grainlite[beam] for the Apache Beam
# tests. It is separate from .venv because apache-beam pins versions that would change the dev
# environment (pip install --dry-run apache-beam in .venv downgrades protobuf, pyarrow, pillow and
# python-dateutil). The tests run the Beam pipeline as a subprocess of .venv-beam/bin/python.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
if [ ! -x .venv-beam/bin/python ]; then
  "$py" -m venv .venv-beam
fi
stamp=".venv-beam/.installed-beam"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv-beam/bin/python -m pip install -q --upgrade pip
  .venv-beam/bin/python -m pip install -q -e ".[beam]"
  touch "$stamp"
fi
