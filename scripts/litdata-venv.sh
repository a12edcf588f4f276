#!/usr/bin/env bash
# Creates (or reuses) .venv-litdata, the environment of the LitData column of the remote benchmark
# (benchmarks/remote_run.py). It is separate from .venv because LitData refuses a plain http://
# endpoint (obstore's BadScheme) while obstore is installed, and grainlite[remote] may install it;
# here obstore is removed if anything pulled it. torch is installed first from the CPU build, as
# scripts/venv.sh does. Not needed by the tests: the benchmark leaves the column out without it.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
if [ ! -x .venv-litdata/bin/python ]; then
  "$py" -m venv .venv-litdata
fi
stamp=".venv-litdata/.installed-litdata"
if [ ! -f "$stamp" ] || [ "$0" -nt "$stamp" ]; then
  .venv-litdata/bin/python -m pip install -q --upgrade pip
  .venv-litdata/bin/python -m pip install -q "torch==2.13.*"
  .venv-litdata/bin/python -m pip install -q "litdata==0.2.76" "boto3" "opencv-python-headless>=4.9" "psutil>=5.9" "torch==2.13.*"
  .venv-litdata/bin/python -m pip uninstall -q -y obstore 2>/dev/null || true
  touch "$stamp"
fi
