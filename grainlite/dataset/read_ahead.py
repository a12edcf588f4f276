"""Reading a ``MapDataset`` in order, block by block, in this thread or read ahead by threads.

:class:`BlockReader` hands out consecutive blocks of ``getitems(indices)`` from ``start`` to
``stop``. Like the DataLoader's reader (:mod:`grainlite.loader.reader`) it starts in the consuming
thread with blocks sized by how long they take to read (the first element comes quickly), timing
the reads and the consumer's work between them; it moves to ``ReadOptions.num_threads`` threads
(at most ``prefetch_buffer_size`` elements ahead, handed over in order) only if reads take
more than ``_THREADED_READ_S`` per element and more than ``_THREADED_READ_SHARE`` of the time.
Threads cost more than they save where reads are cheap (memory, a list, numpy arithmetic) and,
the interpreter lock being one, where reads are Python work. Where reads keep a CPU busy (they
decode or transform rather than wait for storage: their CPU time is most of their wall time),
more threads than spare CPUs only fight over them: such reads get at most one thread per CPU this
process may use beyond the consuming one (none if a single thread could only overlap a consumer
that hardly works), and none inside an ``mp_prefetch`` worker, which is itself one of several
processes sharing the CPUs (see :func:`share_cpus`). Reads that wait get
``num_threads``. The elements in flight are also bounded by memory (:data:`_READ_AHEAD_BYTES`), so
large elements (a decoded batch of images) are not read hundreds ahead. Which thread reads never
changes what is read or in which order.

The threads are daemon threads (a read that hangs cannot hold up interpreter exit, as a
``ThreadPoolExecutor``'s would) that hold only their task queue, never the reader or the
iterator; :meth:`BlockReader.close` cancels the queued reads and tells every thread to end. A read
already running finishes first: no handler can interrupt one.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

from grainlite.loader.cpus import usable_cpu_count

_FIRST_BLOCK = 1
_MAX_BLOCK = 256
# Blocks double while a read takes less than this, and halve when it takes more than
# _SHRINK_S: cheap elements (small records) are read 256 at a time, costly ones (a batch of
# decoded images) one or two at a time, so the first element comes quickly and a block never
# holds much memory.
_GROW_S = 0.002
_SHRINK_S = 0.05
# Reads move to reader threads only if slower than this per element ...
_THREADED_READ_S = 20e-6
# ... and taking more than this share of the read + consumer time.
_THREADED_READ_SHARE = 0.25
# Blocks timed (after the first, whose read warms caches) before deciding; medians over them.
_BLOCKS_TO_TIME = 5
# Reads whose CPU time is more than this share of their wall time keep a CPU busy.
_CPU_BOUND_SHARE = 0.5
# At most this many bytes of elements read ahead (and at least one block).
_READ_AHEAD_BYTES = 64 << 20

# The CPUs this process's reads may use; None: all it may use (see share_cpus).
_cpus_for_reads: float | None = None


def share_cpus(workers: int) -> None:
    """Declares this process one of ``workers`` processes sharing the CPUs (an ``mp_prefetch``
    worker): CPU-bound reads then use threads only for this process's share beyond its own."""
    global _cpus_for_reads
    _cpus_for_reads = usable_cpu_count() / max(1, workers)


def _spare_cpus() -> int:
    """CPUs beyond the consuming thread's that CPU-bound reader threads may use here."""
    cpus = usable_cpu_count() if _cpus_for_reads is None else _cpus_for_reads
    return max(0, int(cpus) - 1)


def _nbytes(tree: Any) -> int:
    """The bytes of the numpy arrays, bytes and strings in an element (a rough size)."""
    if isinstance(tree, np.ndarray):
        return int(tree.nbytes)
    if isinstance(tree, bytes | str):
        return len(tree)
    if isinstance(tree, dict):
        return sum(_nbytes(value) for value in tree.values())
    if isinstance(tree, list | tuple):
        return sum(_nbytes(value) for value in tree)
    return 8


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


class _DaemonPool:
    """``count`` daemon threads serving one task queue (see the module docstring)."""

    def __init__(self, count: int, name: str) -> None:
        self._tasks: queue.SimpleQueue[_Task] = queue.SimpleQueue()
        self._count = count
        for k in range(count):
            threading.Thread(
                target=_serve, args=(self._tasks,), name=f"{name}-{k}", daemon=True
            ).start()

    def submit(self, function: Callable[[Any], Any], argument: Any) -> Future:
        """Queues ``function(argument)``; its future holds the result or the error."""
        future: Future = Future()
        self._tasks.put((future, function, argument))
        return future

    def shutdown(self) -> None:
        """Tells every thread to end once it has taken the tasks queued before."""
        for _ in range(self._count):
            self._tasks.put(None)


class BlockReader:
    """Consecutive blocks of ``getitems(range(start, stop))``, in order.

    Args:
      getitems: reads a list of indices (``MapDataset._getitems``).
      start: the first index to read.
      stop: one past the last index.
      options: ``ReadOptions``: ``num_threads`` and ``prefetch_buffer_size`` (either 0: never
        leave the consuming thread).
    """

    def __init__(
        self, getitems: Callable[[Any], list[Any]], start: int, stop: int, options: Any
    ) -> None:
        self._getitems = getitems
        self._next = start
        self._stop = stop
        self._threads = int(options.num_threads)
        self._buffer = int(options.prefetch_buffer_size)
        self._threaded_allowed = self._threads > 0 and self._buffer > 0
        self._block = 1  # elements per threaded read, set when threads start
        self._depth = 0  # threaded reads in flight, set when threads start
        self._size = _FIRST_BLOCK
        self._timing = self._threaded_allowed
        self._timed_first = False
        self._per_element: list[float] = []
        self._shares: list[float] = []
        self._cpu_shares: list[float] = []
        self._element_bytes = 0
        self._returned_at = 0.0
        self._pool: _DaemonPool | None = None
        self._pending: collections.deque[Future[list[Any]]] = collections.deque()

    def next_block(self) -> list[Any]:
        """The next block of elements (never empty; the caller stops at ``stop``)."""
        if self._pool is not None:
            return self._next_threaded()
        if self._timing and len(self._per_element) >= _BLOCKS_TO_TIME:
            self._timing = False
            slow = float(np.median(self._per_element)) > _THREADED_READ_S
            if slow and float(np.median(self._shares)) > _THREADED_READ_SHARE:
                threads = self._threads
                if float(np.median(self._cpu_shares)) > _CPU_BOUND_SHARE:
                    threads = min(threads, _spare_cpus())
                    if threads == 1 and float(np.median(self._shares)) > 1 - _THREADED_READ_SHARE:
                        threads = 0  # one thread only overlaps the consumer's small share
                if threads > 0:
                    return self._start_threads(threads)
        begin = time.perf_counter()
        cpu_begin = time.thread_time()
        stop = min(self._stop, self._next + self._size)
        block = self._getitems(range(self._next, stop))
        self._next = stop
        end = time.perf_counter()
        cpu = time.thread_time() - cpu_begin
        if end - begin < _GROW_S:
            self._size = min(_MAX_BLOCK, self._size * 2)
        elif end - begin > _SHRINK_S:
            self._size = max(1, self._size // 2)
        if self._timing:
            if self._timed_first:
                read, other = end - begin, begin - self._returned_at
                self._per_element.append(read / max(len(block), 1))
                self._shares.append(read / max(read + other, 1e-9))
                self._cpu_shares.append(cpu / max(read, 1e-9))
            elif block:
                self._element_bytes = _nbytes(block[0])
            self._timed_first = True
            self._returned_at = end
        return block

    def _start_threads(self, threads: int) -> list[Any]:
        """Moves reading to ``threads`` threads; blocks keep the size timing chose (so a block
        of costly elements stays small), with at most ``prefetch_buffer_size`` elements,
        ``_READ_AHEAD_BYTES`` and two blocks per thread in flight."""
        in_flight = min(self._buffer, _READ_AHEAD_BYTES // max(1, self._element_bytes))
        self._block = max(1, min(self._size, self._buffer // threads, in_flight))
        self._depth = max(1, min(in_flight // self._block, 2 * threads))
        self._pool = _DaemonPool(min(threads, self._depth), "grainlite-to-iter")
        return self._next_threaded()

    def _next_threaded(self) -> list[Any]:
        assert self._pool is not None
        while len(self._pending) < self._depth and self._next < self._stop:
            stop = min(self._stop, self._next + self._block)
            self._pending.append(self._pool.submit(self._getitems, range(self._next, stop)))
            self._next = stop
        return self._pending.popleft().result()

    def close(self) -> None:
        """Cancels the queued reads and lets the threads end; idempotent."""
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
