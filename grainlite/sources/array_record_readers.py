"""The ArrayRecord readers one process of an ``ArrayRecordDataSource`` opened.

Readers are never pickled or shared across a fork: a process that finds readers opened by
another pid opens its own. A remote file's reader reads its cached block (see
:mod:`grainlite.sources.remote.cache`), held by a pin while the reader is open; reads in flight
are counted per file, so that a process lets its idle blocks go when another process of the host
waits for room in the cache.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

_PRESSURE_CHECK_S = 0.2  # how often a remote source looks whether another process waits for room


class ProcessReaders:
    """The readers one process opened; a fork gets a new one instead of sharing the parent's.

    A remote file's reader reads its cached block, held (``pins``) while the reader is open;
    ``busy`` counts the reads in flight per file, so that idle ones can be let go when another
    process of the host waits for room in the cache."""

    def __init__(self, count: int) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.readers: list[Any] = [None] * count
        self.pins: list[Any] = [None] * count
        self.opening = [threading.Lock() for _ in range(count)]
        self.busy = [0] * count
        self.hinted = False
        self.watching = False

    def let_idle_go(self) -> None:
        """Closes the readers of remote files that no read uses now, letting their cached blocks
        go: another process of the host waits for room in the cache."""
        with self.lock:
            for index, pin in enumerate(self.pins):
                if pin is not None and self.busy[index] == 0:
                    reader, self.readers[index] = self.readers[index], None
                    if reader is not None:
                        reader.close()
                    pin.release()
                    self.pins[index] = None

    def watch(self, cache: Any) -> None:
        """Starts a daemon thread that lets idle blocks go whenever a process of the host waits
        for room, so a process that holds blocks and reads no more (done, or waiting on its
        consumer) never holds up the others. It ends when these readers are collected."""
        if self.watching:
            return
        self.watching = True
        threading.Thread(
            target=_watch_pressure,
            args=(weakref.ref(self), cache),
            daemon=True,
            name="grainlite-cache-watch",
        ).start()


def _watch_pressure(state_ref: Any, cache: Any) -> None:
    while True:
        time.sleep(_PRESSURE_CHECK_S)
        state = state_ref()
        if state is None or state.pid != os.getpid():
            return
        if cache.under_pressure():
            state.let_idle_go()
        del state
