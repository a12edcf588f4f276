"""Telling a read-ahead thread to stop while it is inside its parent's ``next()``.

A read-ahead thread (``ThreadPrefetchIterDataset``, ``multithread_prefetch``) calls its parent's
``next()``, which may run for ever without returning an element: an endless run of ``None`` holes
a filter left (``MapDataset.repeat().filter(...)`` that keeps nothing), each skipped by
``to_iter_dataset``. Its owner's ``close()`` must not wait for that element, and the thread must
not be left running (Grain leaves it running).

The thread runs its reads inside :func:`stoppable` with its stop event. The places where a parent
can go on without returning call :func:`stop_point` (``to_iter_dataset`` before each block read,
a thread prefetch waiting for an inner one), which raises :class:`ReadStopped` in that thread once
the event is set. The thread's owner catches it and ends; it moves the parent back to the last
element delivered (or closes it) before anything reads the parent again, so the elements a node
was holding when the stop came (a half-made batch) are not lost.

A read that does not come back (a transformation that never returns, a blocked file read) cannot
be interrupted by any handler: its thread ends when the read returns.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import Protocol, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

# How often a stoppable thread waiting for an inner read-ahead looks at its stop event.
_POLL_S = 0.05


class ReadStopped(BaseException):
    """Raised in a read-ahead thread at a :func:`stop_point` once its owner told it to stop.

    A ``BaseException`` (as ``GeneratorExit``), so a node's ``except Exception`` does not take
    it for an element's error."""


class _Current(threading.local):
    stop: threading.Event | None = None


_current = _Current()
# Threads inside stoppable() now: while 0, a stop point costs one attribute read (callers test
# ``stopping.active`` before calling stop_point(), so the consuming thread pays no call).
active = 0
_active_lock = threading.Lock()


@contextlib.contextmanager
def stoppable(stop: threading.Event) -> Iterator[None]:
    """Makes :func:`stop_point` in this thread raise :class:`ReadStopped` once ``stop`` is set."""
    global active
    outer, _current.stop = _current.stop, stop
    with _active_lock:
        active += 1
    try:
        yield
    finally:
        _current.stop = outer
        with _active_lock:
            active -= 1


def stop_point() -> None:
    """Raises :class:`ReadStopped` if this thread runs inside :func:`stoppable` and was told to
    stop; otherwise returns at once (the consuming thread never stops here)."""
    stop = _current.stop
    if stop is not None and stop.is_set():
        raise ReadStopped


class Gettable(Protocol[T_co]):
    """What :func:`get_stoppable` waits on: a ``queue.Queue`` or an
    :class:`~grainlite.engine.producer.Producer` (``get`` raises ``queue.Empty`` on a timeout)."""

    def get(self, *, timeout: float | None = None) -> T_co: ...


def get_stoppable(items: Gettable[T]) -> T:
    """``items.get()``; in a stoppable thread, waits in short steps and raises
    :class:`ReadStopped` once told to stop."""
    stop = _current.stop
    if stop is None:
        return items.get()
    while True:
        if stop.is_set():
            raise ReadStopped
        try:
            return items.get(timeout=_POLL_S)
        except queue.Empty:
            continue
