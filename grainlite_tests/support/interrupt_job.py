"""A program that Ctrl-C's its own W=2 loop at start-up, many times: ``python -m
grainlite_tests.support.interrupt_job TRIALS SEED``.

Each trial runs in a process forked from this one before anything was iterated, so each starts
as a new program does (first-use imports and caches included). It builds a ``worker_count=2``
DataLoader over an endless stream, has a thread send its process SIGINT (as a terminal's Ctrl-C
does) 1 to 30 ms after it starts iterating, and loops. The SIGINT must end the loop with
KeyboardInterrupt, whether it arrives while ``iter()`` starts the workers or while ``next()``
waits for their first elements. A loop still running 3 s after its signal counts as swallowed
and ends by itself. After each trial it records its worker processes still alive (after up to
5 s) and its shared-memory segments left. The job prints one JSON line: what each trial saw.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from typing import Any

import numpy as np

import grainlite as grain
from grainlite import shm

SWALLOWED_AFTER_S = 3.0


class Rows(grain.MapTransform):
    """Elements of 64 KB, so they cross through shared memory."""

    def map(self, element: int) -> np.ndarray:
        return np.full(16_384, element, np.float32)


def _live_children() -> list[int]:
    """This process's descendants that are still running (zombies are already gone): its
    workers, and the fork server whose children they are where workers are forked."""
    here = os.path.dirname(os.path.abspath(__file__))  # grainlite_tests/support/
    examples = os.path.normpath(os.path.join(here, os.pardir, os.pardir, "examples"))
    if examples not in sys.path:
        sys.path.insert(0, examples)
    from leak_check import live_children

    return sorted(live_children())


def _trial(delay: float) -> dict[str, Any]:
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 10**9, 1),
        sampler=grain.IndexSampler(10**9, grain.NoSharding(), shuffle=False, num_epochs=1, seed=0),
        operations=[Rows(), grain.Batch(4)],
        worker_count=2,
    )
    go, sent = threading.Event(), threading.Event()

    def interrupt() -> None:
        go.wait()
        time.sleep(delay)
        os.kill(os.getpid(), signal.SIGINT)
        sent.set()

    timer = threading.Thread(target=interrupt)
    timer.start()
    outcome = "ended without KeyboardInterrupt"
    count = 0
    sent_at = None
    try:
        go.set()  # the delay counts from here: iter() and the loop follow at once
        for _ in loader:
            count += 1
            if sent.is_set():
                sent_at = sent_at or time.monotonic()
                if time.monotonic() - sent_at > SWALLOWED_AFTER_S:
                    outcome = "swallowed"
                    break
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    timer.join()
    deadline = time.monotonic() + 5
    while _live_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    segments = [name for name in shm.list_segments() if shm.owner_pid(name) == os.getpid()]
    return {
        "delay_ms": round(delay * 1000, 1),
        "outcome": outcome,
        "batches": count,
        "workers_left": _live_children(),
        "segments_left": segments,
    }


def _forked_trial(delay: float) -> tuple[int, int]:
    """Runs one trial in a child forked from this process; returns its pid and a pipe to read.

    Each trial starts as a fresh process would (nothing that grainlite, NumPy or the engine
    import or cache on first use has happened yet), for a fraction of a new interpreter's cost.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            result = _trial(delay)
        except BaseException as error:  # the outcome is the point of this job
            result = {"delay_ms": round(delay * 1000, 1), "outcome": repr(error)}
        with os.fdopen(write_end, "w") as out:
            out.write(json.dumps(result))
        os._exit(0)
    os.close(write_end)
    return pid, read_end


def _collect(pid: int, read_end: int) -> dict[str, Any]:
    with os.fdopen(read_end) as result:
        text = result.read()
    os.waitpid(pid, 0)
    outcome: dict[str, Any] = json.loads(text) if text else {"outcome": "no report"}
    outcome["segments_left"] = outcome.get("segments_left", []) + [
        name for name in shm.list_segments() if shm.owner_pid(name) == pid
    ]
    return outcome


def main(trials: int, seed: int, at_once: int = 3) -> None:
    """Runs ``trials`` trials, ``at_once`` at a time, each in its own forked process."""
    rng = random.Random(seed)
    delays = [rng.uniform(0.001, 0.030) for _ in range(trials)]
    results = []
    for first in range(0, trials, at_once):
        running = [_forked_trial(delay) for delay in delays[first : first + at_once]]
        results += [_collect(pid, read_end) for pid, read_end in running]
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
