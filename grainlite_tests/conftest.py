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
