"""Worker processes end when the training process is killed, even while they are still starting.

A worker learns its parent's pid from the parent (not from ``os.getppid()`` at start: a parent
SIGKILLed while the worker's interpreter starts would already read as pid 1, and the worker
would then run its share forever under pid 1). Each trial SIGKILLs a job at a random moment in
the first 0.4 s of its ``iter(loader)`` (while its two workers start), then looks for any process
of that job. The job (``STARTING_JOB``) is the fault suite's, which kills at fewer moments.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from grainlite_tests.support.fault_dataset_scenarios import (
    STARTING_JOB,
    processes_left_with,
    processes_with,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_no_worker_outlives_a_parent_killed_while_its_workers_start():
    rng = random.Random(0)
    survivors: dict[float, list[int]] = {}
    for _ in range(20):
        mark = f"GRAINLITE_TEST_MARK={uuid.uuid4().hex}"
        env = dict(os.environ, PYTHONPATH=str(ROOT), GRAINLITE_TEST_MARK=mark.split("=")[1])
        job = subprocess.Popen(
            [sys.executable, "-c", STARTING_JOB], env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            assert job.stdout is not None
            assert job.stdout.readline().strip() == "starting"
            delay = rng.uniform(0.0, 0.4)
            time.sleep(delay)
            job.send_signal(signal.SIGKILL)
            job.wait()
            left = processes_left_with(mark)
            if left:
                survivors[delay] = left
        finally:
            for pid in processes_with(mark):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if job.poll() is None:
                job.kill()
                job.wait()
            assert job.stdout is not None
            job.stdout.close()
    assert not survivors, f"workers outlived their killed parent (delay -> pids): {survivors}"
