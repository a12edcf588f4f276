"""A helper process ends when the process that started it is killed, by the kernel's signal
(Linux) or by its watch thread (where the kernel cannot be asked), even when the parent died
before the helper asked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from leak_check import alive

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent

# The helper: asks to end with its parent, says so, then waits forever.
HELPER = """
import sys, time
from grainlite import parent_death
if sys.argv[2] == "watch":
    parent_death.ask_kernel_to_kill_on_parent_death = lambda: False
time.sleep(float(sys.argv[3]))  # the parent may die meanwhile
parent_death.exit_when_parent_dies(int(sys.argv[1]), interval_s=0.1)
print("ready", flush=True)
while True:
    time.sleep(1)
"""

# The parent: starts the helper, prints its pid, waits forever.
PARENT = """
import os, subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), *sys.argv[2:]])
print(helper.pid, flush=True)
while True:
    time.sleep(1)
"""


@pytest.mark.parametrize("how", ["kernel", "watch"])
@pytest.mark.parametrize("parent_dies", ["before the helper asks", "after the helper asked"])
def test_a_helper_ends_within_seconds_when_its_parent_is_killed(how, parent_dies):
    if how == "kernel" and not sys.platform.startswith("linux"):
        pytest.skip("prctl(PR_SET_PDEATHSIG) is Linux's")
    delay = "1.5" if parent_dies == "before the helper asks" else "0"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, HELPER, how, delay],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    helper = 0
    try:
        helper = int(parent.stdout.readline())  # type: ignore[union-attr]
        if parent_dies == "after the helper asked":
            time.sleep(1.5)  # the helper has long printed "ready" (to the parent's stdout)
        parent.kill()
        parent.wait(timeout=30)
        deadline = time.monotonic() + 5
        while alive(helper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(helper), f"the helper outlived its parent ({how})"
    finally:
        parent.kill()
        parent.wait(timeout=30)
        parent.stdout.close()  # type: ignore[union-attr]
        if helper and alive(helper):
            os.kill(helper, signal.SIGKILL)
