"""A thread pool whose threads are daemons and end when idle.

The cache's download threads run in every process that reads a remote source, the training
process included (the DataLoader hints the first keys there). A ``ThreadPoolExecutor`` keeps its
threads for the rest of the process and joins them at interpreter exit, so a download in flight
would hold up the exit. These threads end after :data:`IDLE_S` without work and never block the
exit (a download cut short leaves a ``.part`` file whose lock died with the process; the cache
removes it).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

IDLE_S = 5.0
"""Seconds a thread waits for work before it ends."""


class IdlePool:
    """At most ``size`` daemon threads named ``name``, started on demand, ending when idle."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]]
        self._work = queue.SimpleQueue()
        self._threads = 0
        self._started = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Runs ``fn(*args)`` in a pool thread; its result or error comes in the future."""
        future: Future[Any] = Future()
        with self._lock:
            self._work.put((future, fn, args))
            if self._threads < self._size:  # threads idle meanwhile end after IDLE_S
                self._threads += 1
                self._started += 1
                threading.Thread(
                    target=self._run, name=f"{self._name}_{self._started}", daemon=True
                ).start()
        return future

    @property
    def threads(self) -> int:
        """The pool's threads now alive."""
        with self._lock:
            return self._threads

    def _run(self) -> None:
        while True:
            try:
                future, fn, args = self._work.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:  # submit puts under this lock: no work is left without a thread
                    if self._work.empty():
                        self._threads -= 1
                        return
                continue
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as error:
                    future.set_exception(error)
                else:
                    future.set_result(result)
            del future, fn, args
