#!/usr/bin/env bash
# Creates (or reuses) .venv-mosaic, the environment of the MosaicML Streaming column of the remote
# benchmark (benchmarks/remote_run.py). It is separate from .venv because mosaicml-streaming 0.13
# pins numpy < 2.2. torch is installed first from the CPU build (as scripts/venv.sh does) and kept
# there while streaming pulls torchvision. Not needed by the tests: the benchmark leaves the column
# out without it.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
if [ ! -x .venv-mosaic/bin/python ]; then
  "$py" -m venv .venv-mosaic
fi
stamp=".venv-mosaic/.installed-mosaic"
if [ ! -f "$stamp" ] || [ "$0" -nt "$stamp" ]; then
  .venv-mosaic/bin/python -m pip install -q --upgrade pip
  .venv-mosaic/bin/python -m pip install -q "torch==2.13.*"
  .venv-mosaic/bin/python -m pip install -q "mosaicml-streaming==0.13.0" "boto3" "opencv-python-headless>=4.9" "psutil>=5.9" "torch==2.13.*"
  touch "$stamp"
fi
