"""Daemon reader threads serving one task queue, for :mod:`grainlite.dataset.read_ahead`.

The threads are daemon threads that hold only their task queue, never the reader or the
iterator; the block reader's ``close()`` (:meth:`~grainlite.dataset.read_ahead.BlockReader.close`)
cancels the queued reads, tells every thread to end and waits for them (a read already running
finishes first: no handler can interrupt one), so no read is left inside a C++ reader
(array_record) when the interpreter exits. A read that hangs for more than :data:`_JOIN_S` (all
threads together) is left to its daemon thread with a warning, so it cannot hold up exit for long.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

# close() waits this long for a read in flight before leaving its thread behind with a warning.
_JOIN_S = 60.0

_Task = tuple[Future, Callable[[Any], Any], Any] | None


def _serve(tasks: queue.SimpleQueue[_Task]) -> None:
    """A reader thread: runs tasks until it takes ``None``; knows nothing but its queue."""
    while True:
        task = tasks.get()
        if task is None:
            return
        future, function, argument = task
        if not future.set_running_or_notify_cancel():
            continue  # cancelled while queued
        try:
            future.set_result(function(argument))
        except BaseException as error:  # handed to the consumer, re-raised there
            future.set_exception(error)
        del task, future, argument


class DaemonPool:
    """``count`` daemon threads serving one task queue (see the module docstring)."""

    def __init__(self, count: int, name: str) -> None:
        self._tasks: queue.SimpleQueue[_Task] = queue.SimpleQueue()
        self.threads = [
            threading.Thread(target=_serve, args=(self._tasks,), name=f"{name}-{k}", daemon=True)
            for k in range(count)
        ]
        for thread in self.threads:
            thread.start()

    def submit(self, function: Callable[[Any], Any], argument: Any) -> Future:
        """Queues ``function(argument)``; its future holds the result or the error."""
        future: Future = Future()
        self._tasks.put((future, function, argument))
        return future

    def shutdown(self) -> None:
        """Tells every thread to end once it has taken the tasks queued before, and waits for
        them (up to :data:`_JOIN_S` in all: a read in flight finishes first)."""
        for _ in self.threads:
            self._tasks.put(None)
        current = threading.current_thread()
        deadline = time.monotonic() + _JOIN_S  # for all of them together
        for thread in self.threads:
            if thread is current:  # a finalizer run by a collection in a reader thread
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                warnings.warn(
                    f"grainlite: a to_iter_dataset read in {thread.name} did not finish within "
                    f"{_JOIN_S:.0f} s of close(); it is left to finish in its daemon thread.",
                    RuntimeWarning,
                    stacklevel=2,
                )
