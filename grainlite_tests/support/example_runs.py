"""Runs a script of examples/ in a new interpreter, as a user would, and checks that it exits
cleanly and leaves no shared memory behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grainlite import shm

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RUN_TIMEOUT_S = 240


def run_example(script: str, *args: str) -> str:
    """Runs ``examples/<script>`` in a new interpreter; returns its output, or fails with it."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"{script} ran longer than {RUN_TIMEOUT_S} s:\n{output}")
    assert process.returncode == 0, f"{script} exited with {process.returncode}:\n{output}"
    left = [name for name in shm.list_segments() if shm.owner_pid(name) == process.pid]
    assert not left, f"{script} left shared memory behind: {left}"
    return output
