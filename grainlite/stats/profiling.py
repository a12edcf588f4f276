"""``enable_profiling=True``: the stats table and diagnosis, logged now and then via ``logging``.

A daemon thread wakes every :data:`EVERY_S` seconds and logs ``iterator.stats()`` to the
``grainlite.stats`` logger at INFO level, so nothing runs on the element path and a stuck loader
still gets logged. It holds only a weak reference to the iterator and ends when the iterator is
closed, exhausted or collected; :meth:`Profiler.stop` logs the final table once.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

EVERY_S = 10.0
"""Seconds between two logged tables."""

logger = logging.getLogger("grainlite.stats")


def _log(iterator: Any, when: str) -> None:
    try:
        logger.info("%s\n%s", when, iterator.stats())
    except Exception:  # a logging thread must never take the loader down
        logger.debug("grainlite could not compute stats", exc_info=True)


def _loop(ref: weakref.ReferenceType[Any], stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        iterator = ref()
        if iterator is None:
            return
        _log(iterator, "grainlite profiling (periodic):")
        del iterator


class Profiler:
    """Logs ``iterator.stats()`` every ``every`` seconds until :meth:`stop`.

    Args:
      iterator: anything with ``stats()``; held weakly.
      every: seconds between logs (default :data:`EVERY_S`, read when the profiler starts).
    """

    def __init__(self, iterator: Any, every: float | None = None) -> None:
        self._ref = weakref.ref(iterator)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=_loop,
            args=(self._ref, self._stop, EVERY_S if every is None else every),
            name="grainlite-profiling",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stops the thread and logs the final table once. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        iterator = self._ref()
        if iterator is not None:
            _log(iterator, "grainlite profiling (final):")
