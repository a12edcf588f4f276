"""Shared-memory segments: owner pid in the name, stale ones found and removed, CLI."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from grainlite.loader import shm


def test_segment_names_carry_the_owner_pid_and_kind():
    segment = shm.Segment.create(64, "unit")
    try:
        assert segment.name.startswith(f"grainlite_{__import__('os').getpid()}_unit_")
        assert shm.owner_pid(segment.name) == __import__("os").getpid()
    finally:
        segment.unlink()
        segment.close()


def test_an_unlinked_segment_stays_readable_through_existing_arrays():
    segment = shm.Segment.create(64, "unit")
    array = np.frombuffer(segment.buf, np.uint8)
    array[:4] = [1, 2, 3, 4]
    segment.unlink()
    assert segment.name not in shm.list_segments()
    assert array[:4].tolist() == [1, 2, 3, 4]
    segment.close()  # arrays still point in: the mapping goes when they go
    assert array[:4].tolist() == [1, 2, 3, 4]


def test_other_names_have_no_owner():
    assert shm.owner_pid("psm_1234") is None
    assert shm.owner_pid("grainlite_x_unit") is None


def test_the_cleanup_command_removes_segments_of_dead_owners():
    victim = subprocess.Popen([sys.executable, "-c", "pass"])
    victim.wait()
    segment = shm.Segment.create(32, "unit", owner=victim.pid)
    dry = subprocess.run(
        [sys.executable, "-m", "grainlite", "cleanup", "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"would remove /dev/shm/{segment.name}" in dry.stdout
    assert segment.name in shm.list_segments()
    done = subprocess.run(
        [sys.executable, "-m", "grainlite", "cleanup"], capture_output=True, text=True, check=True
    )
    assert f"removed /dev/shm/{segment.name}" in done.stdout
    assert segment.name not in shm.list_segments()
    segment.close()
