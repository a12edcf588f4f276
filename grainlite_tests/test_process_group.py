"""The process group: closing is quick however busy the workers are, and a second Ctrl-C while it
closes still leaves no process and no shared memory behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from leak_check import alive

import grainlite as grain
from grainlite import shm
from grainlite.engine import flow
from grainlite_tests.support.busy import BusyFor
from grainlite_tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def test_close_stops_every_busy_worker_against_one_shared_deadline(tmp_path, monkeypatch):
    workers = 4
    monkeypatch.setattr(flow, "usable_cpu_count", lambda: 64)  # all four start at once
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 100, 1),
        sampler=grain.IndexSampler(100, grain.NoSharding(), num_epochs=1),
        operations=[BusyFor(str(tmp_path))],
        worker_count=workers,
    )
    iterator = iter(loader)
    iterator.start_prefetch()
    pids = iterator._stream.pids()
    wait_for(lambda: len(list(tmp_path.iterdir())) == workers, "every worker is in map()")
    start = time.monotonic()
    iterator.close()
    took = time.monotonic() - start
    assert not any(alive(pid) for pid in pids)
    # One deadline for all (about a second), not a wait per worker one after another.
    assert took < 2.5, f"close() took {took:.1f} s with {workers} busy workers"


_SECOND_CTRL_C = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import grainlite as grain
    from grainlite_tests.support.busy import BusyFor

    marks = sys.argv[1]
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 100, 1),
        sampler=grain.IndexSampler(100, grain.NoSharding(), num_epochs=1),
        operations=[grain.Batch(2), BusyFor(marks)],
        worker_count=2,
    )
    iterator = iter(loader)
    iterator.start_prefetch()
    print(" ".join(map(str, iterator._stream.pids())), flush=True)
    next(iterator)  # blocks (the workers are busy) until Ctrl-C, which closes the loader
    """
)


def test_a_second_ctrl_c_during_close_still_leaves_nothing_behind(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", _SECOND_CTRL_C, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},  # examples/ for leak_check
    )
    try:
        pids = [int(p) for p in child.stdout.readline().split()]
        assert len(pids) == 2, child.stderr.read()
        wait_for(lambda: len(list(tmp_path.iterdir())) == 2, "both workers are in map()")
        child.send_signal(signal.SIGINT)  # ends next(); the loader closes, waiting for the workers
        # Not synchronisation: aims the second Ctrl-C at that wait (about a second long). Sent
        # later, it finds nothing to interrupt and the test still holds.
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        child.wait(timeout=30)
        # At the moment the parent is gone, its workers and their shared memory are gone too.
        assert not [pid for pid in pids if alive(pid)]
        assert not [name for name in shm.list_segments() if shm.owner_pid(name) == child.pid]
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        child.stderr.close()
