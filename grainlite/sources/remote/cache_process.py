"""What one process keeps for the host's cache (:mod:`grainlite.sources.remote.cache`): its
download threads, the downloads it queued ahead, the blocks it checked, the bytes it pins and the
folders it swept of orphaned downloads.

One record per process id, made on first use: a forked child starts with none of its parent's
threads, checks or pins (they are the parent's), and the record of a dead parent is never used.
"""

from __future__ import annotations

import os
import secrets
import threading
from concurrent.futures import Future
from typing import Any

from grainlite.sources.remote.idle_pool import IdlePool

DOWNLOAD_REQUESTS = 16
"""Ranged GETs one process keeps in flight (for all its downloads together)."""


class ProcessState:
    """What one process keeps: its download threads, the blocks it checked and its run token
    (:attr:`run`: the checks a process of one run records, the others trust)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.parts = IdlePool(DOWNLOAD_REQUESTS, "grainlite-fetch")  # daemons, end when idle
        # Every file of a dataset at once (the parts pool bounds the requests): a file left in
        # the queue came after the others and held up the epoch's first whole-file reads.
        self.ahead = IdlePool(16, "grainlite-fetch-ahead")
        self.queued: dict[str, Future[Any]] = {}
        # (path, mark): blocks checked here, or by another process of this run, as they were then
        self.checked: set[tuple[str, tuple[int, int, int, int]]] = set()
        # The run of the caches this process makes; a source sent to a worker keeps its own.
        self.run = f"{self.pid}.{_started(self.pid)}.{secrets.token_hex(4)}"
        self.pinned = 0  # bytes of blocks this process holds with live pins
        self.swept: set[str] = set()  # cache folders whose orphaned downloads this process removed


_states: dict[int, ProcessState] = {}


def run_alive(run: str) -> bool:
    """Whether the process that made the run token ``run`` (:attr:`ProcessState.run`) still
    lives: a run is the life of its training process, so a source kept past it (pickled to disk
    and loaded by a later job) starts a new run's checks."""
    pid, started, _ = [*run.split("."), "", "", ""][:3]
    return started != "None" and pid.isdigit() and _started(int(pid)) == started


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``), telling it from a
    later process given the same id; None where it is gone or the system has no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19].decode() if len(fields) > 19 else None


def process_state() -> ProcessState:
    """This process's record (made on first use)."""
    state = _states.get(os.getpid())
    if state is None:
        state = _states.setdefault(os.getpid(), ProcessState())
    return state
