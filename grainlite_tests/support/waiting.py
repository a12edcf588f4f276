"""Waiting in tests for something that happens on another thread or in another process."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from leak_check import alive


def wait_for(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Returns once ``condition()`` is true; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not true after {timeout} s: {what}"
        time.sleep(0.01)


def assert_gone(pids: Iterable[int], timeout: float = 5.0) -> None:
    """Returns once none of ``pids`` runs; fails naming those alive after ``timeout`` seconds."""
    pids = set(pids)
    deadline = time.monotonic() + timeout
    while left := sorted(pid for pid in pids if alive(pid)):
        assert time.monotonic() < deadline, f"processes {left} still alive after {timeout} s"
        time.sleep(0.01)


def wait_until_gone(pids: list[int], seconds: float = 30.0) -> list[int]:
    """Waits up to ``seconds`` for every one of ``pids`` to end; returns those still alive."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]
