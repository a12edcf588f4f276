"""A worker that frees whole batches keeps the freed memory for its next ones (glibc only).

Each test runs a fresh interpreter (malloc settings are per process): it allocates a batch's worth
of 150 KB arrays, frees them together and reports how much of that memory the process still holds.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(
        not hasattr(ctypes.CDLL(None), "mallopt"), reason="the C library has no mallopt (glibc)"
    ),
]

FREE_A_BATCH = """
import json, sys
import numpy as np
from grainlite.engine import malloc

def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20

applied = malloc.keep_freed_memory() if sys.argv[1] == "keep" else None
images = [np.ones((112, 112, 3), np.float32) for _ in range(128)]  # 19 MB, as a decoded batch
held = resident_mb()
del images
print(json.dumps({"applied": applied, "given_back_mb": held - resident_mb()}))
"""


def free_a_batch(mode: str, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", FREE_A_BATCH, mode],
        env={**environment, **env}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def test_with_the_settings_a_freed_batch_stays_for_the_next_one():
    result = free_a_batch("keep")
    assert result["applied"] is True
    assert result["given_back_mb"] < 2


def test_settings_chosen_in_the_environment_are_left_alone():
    # A threshold set in the environment also fixes glibc's mmap threshold at its starting 128 KiB
    # (glibc raises it as the process frees mapped blocks, so an unset environment gives a result
    # that depends on what the interpreter freed before; a clean-clone CI run gave back 0 MB).
    result = free_a_batch("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert result["applied"] is False
    assert result["given_back_mb"] > 15
