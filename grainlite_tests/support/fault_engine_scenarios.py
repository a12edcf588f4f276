"""Scenarios of the fault suite for the worker engine: Ctrl-C at start-up, descriptors after close,
and where elements are made.

Imported by ``fault_suite`` (after the DataLoader scenarios), which registers them in order, so
``SCENARIOS`` and the published table hold them. Same rules as there: each scenario builds a
real fault and asserts the promise.
"""

from __future__ import annotations

import collections
import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

import grainlite as grain
from grainlite_tests.support.fault_registry import REPO, sampler, scenario

TRIALS = 60


@scenario(
    "Signals",
    f"SIGINT 1-30 ms into a W=2 loop, {TRIALS} fresh processes, a core busy",
    "KeyboardInterrupt each time, nothing left",
)
def sigint_in_the_first_milliseconds(tmp: Path) -> str:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        job = subprocess.run(
            [sys.executable, "-m", "grainlite_tests.support.interrupt_job", str(TRIALS), "32"],
            capture_output=True, text=True, timeout=150, cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )  # fmt: skip
    finally:
        busy.kill()
        busy.wait()
    assert job.returncode == 0, job.stderr[-2000:]
    trials = json.loads(job.stdout.splitlines()[-1])
    outcomes = collections.Counter(trial["outcome"] for trial in trials)
    assert outcomes == {"KeyboardInterrupt": TRIALS}, outcomes
    left = [trial for trial in trials if trial["workers_left"] or trial["segments_left"]]
    assert not left, left
    return f"KeyboardInterrupt in all {TRIALS} trials; no worker, no segment left"


class _Rows(grain.MapTransform):
    def map(self, element: int) -> np.ndarray:
        return np.full(512, element, np.int64)


@scenario(
    "Exhausted resources",
    "6 W=2 iterators read, closed and kept referenced (no garbage collection)",
    "no file descriptor left",
)
def closed_iterators_kept_referenced(tmp: Path) -> str:
    def open_now() -> int:
        return len(os.listdir("/proc/self/fd"))

    def iterator() -> Any:
        source = grain.RangeDataSource(0, 16, 1)
        return iter(grain.DataLoader(data_source=source, sampler=sampler(16),
                                     operations=[_Rows()], worker_count=2))  # fmt: skip

    next(iterator())  # first-use imports and caches
    gc.collect()
    gc.disable()
    try:
        before = open_now()
        kept = []
        for _ in range(6):
            it = iterator()
            for _ in range(3):
                next(it)
            it.close()
            kept.append(it)
        left = open_now() - before
    finally:
        gc.enable()
    assert left == 0, f"{left} file descriptors left by 6 closed iterators"
    return f"{before} descriptors open before, the same after close ({len(kept)} iterators kept)"


class _WhereMade(grain.MapTransform):
    def map(self, element: int) -> tuple[int, str | None]:
        return os.getpid(), os.environ.get("JAX_PLATFORMS")


@scenario(
    "Odd user code",
    "a transform that reads the process and JAX_PLATFORMS, W=2, with set_state",
    "every element made in a worker",
)
def every_element_in_a_worker(tmp: Path) -> str:
    loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 8, 1), sampler=sampler(8),
                              operations=[_WhereMade()], worker_count=2)  # fmt: skip
    made = []
    with iter(loader) as it:
        made.append(next(it))
        state = it.get_state()
        it.set_state(state)
        made += list(it)
    with iter(loader) as restored:
        restored.set_state(state)
        made.append(next(restored))
    in_parent = [pid for pid, _ in made if pid == os.getpid()]
    assert not in_parent, f"{len(in_parent)} of {len(made)} elements made in the training process"
    assert {platforms for _, platforms in made} == {"cpu"}, made
    return f"all {len(made)} elements (firsts and after set_state) from workers, JAX_PLATFORMS=cpu"
