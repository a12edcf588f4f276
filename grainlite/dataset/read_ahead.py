"""Reading a ``MapDataset`` in order, block by block, in this thread or read ahead by threads.

:class:`BlockReader` hands out consecutive blocks of ``getitems(indices)`` from ``start`` to
``stop``. Like the DataLoader's reader (:mod:`grainlite.loader.record_reader`) it starts in the
consuming thread with blocks sized by how long they take to read (the first element comes
quickly), timing the reads and the consumer's work between them; it moves to
``ReadOptions.num_threads`` threads (at most ``prefetch_buffer_size`` elements ahead, handed over in
order) only where :data:`~grainlite.options.READ_POLICY` says so (the DataLoader's rule: more than
20 µs per element and more than a quarter of the time), or at once, before the first block is
returned, when that block took more than ``_EAGER_READ_S`` per element (storage, network): those
threads read ahead up to ``prefetch_buffer_size`` elements while the consumer works or waits (as
Grain's), and hand reading back to the consuming thread if their first blocks prove cheap or
CPU-bound.
Threads cost more than they save where reads are cheap (memory, a list, numpy arithmetic) and,
the interpreter lock being one, where reads are Python work. Where reads keep a CPU busy (they
decode or transform rather than wait for storage: their CPU time is most of their wall time),
more threads than spare CPUs only fight over them: such reads get at most one thread per CPU this
process may use beyond the consuming one (none if a single thread could only overlap a consumer
that hardly works), and none inside an ``mp_prefetch`` worker, which is itself one of several
processes sharing the CPUs (see :func:`~grainlite.dataset.reading_process.share_cpus`). Reads
that wait get ``num_threads``. The elements in flight are also bounded by memory
(:data:`~grainlite.dataset.reading_process._READ_AHEAD_BYTES`, shared by the ``mp_prefetch``
workers of a host), so large elements (a decoded batch of images, one a worker will fill into
shared memory when it sends it included) are not read hundreds ahead. Which thread reads never
changes what is read or in which order.

A local ArrayRecord source of small records may also be read ahead in big index-list reads by
the iterator (:func:`grainlite.dataset.key_hints.list_reads_for`); the blocks here are served
from them by the source node, and this reader knows nothing of it.

In an ``mp_prefetch`` worker (:func:`~grainlite.dataset.reading_process.stream_blocks`), a
block read in the consuming thread is streamed: one read of the source as before, but its
elements are made and handed out one at a time (a block of one each), timed as one block when its
last element is out, so an element is sent before the next one is made and a transformation that
hangs holds back none before it.
Blocks read by reader threads are handed over whole, as elsewhere.

The reader threads are a :class:`~grainlite.dataset.daemon_pool.DaemonPool`; a failed read is
read again element by element (:mod:`grainlite.dataset.block_reads`).
"""

from __future__ import annotations

import collections
import functools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from grainlite.cpus import cpu_wait_s
from grainlite.dataset.block_reads import (
    ElementReadError,
    FailedBlock,
    FailedElement,
    read_block,
    timed_read_block,
)
from grainlite.dataset.daemon_pool import DaemonPool
from grainlite.dataset.reading_process import read_ahead_bytes, spare_cpus, streams_blocks
from grainlite.options import READ_POLICY

# Blocks double while a read takes less than this, and halve when it takes more than
# _SHRINK_S: cheap elements (small records) are read 256 at a time, costly ones (a batch of
# decoded images) one or two at a time, so the first element comes quickly and a block never
# holds much memory.
_GROW_S = 0.002
_SHRINK_S = 0.05
# A first read slower than this per element (storage, network, a sleep: never memory) moves the
# reads to threads at once, before the first element is returned, so they go on reading ahead
# while the consumer works or waits (Grain's read-ahead starts at the first next()). Reads that
# then prove cheap (a slow first access that opened a file) or CPU-bound move back to the
# consuming thread after READ_POLICY.samples threaded blocks, where the timed rule decides again.
_EAGER_READ_S = 0.01


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
    size = getattr(tree, "nbytes", None)  # an object that says its size (a batch made later)
    return size if type(size) is int else 8


class BlockReader:
    """Consecutive blocks of ``getitems(range(start, stop))``, in order.

    Args:
      getitems: reads a list of indices (``MapDataset._getitems``).
      start: the first index to read.
      stop: one past the last index.
      options: ``ReadOptions``: ``num_threads`` and ``prefetch_buffer_size`` (either 0: never
        leave the consuming thread).
      stream: reads a list of indices as an iterator that makes each element when asked for
        (``transforms.parent_stream``); used for the blocks read in the consuming thread after
        :func:`~grainlite.dataset.reading_process.stream_blocks`, which are then handed out one
        element at a time.
    """

    def __init__(
        self,
        getitems: Callable[[Any], list[Any]],
        start: int,
        stop: int,
        options: Any,
        stream: Callable[[Any], Iterator[Any]] | None = None,
    ) -> None:
        self._getitems = getitems
        self._stream = stream if streams_blocks() else None
        # The block being streamed: its iterator, the index of its next element, its end, the
        # read time of its elements so far (wall, CPU, waiting for a CPU) and its first element.
        self._open: Iterator[Any] | None = None
        self._open_start = self._open_next = self._open_stop = 0
        self._open_read = self._open_cpu = self._open_waited = 0.0
        self._open_first: Any = None
        # What a reader thread runs: holds getitems, never this reader.
        self._read = functools.partial(timed_read_block, getitems)
        self._next = start
        self._stop = stop
        self._threads = int(options.num_threads)
        self._buffer = int(options.prefetch_buffer_size)
        self._threaded_allowed = self._threads > 0 and self._buffer > 0
        self._block = 1  # elements per threaded read, set when threads start
        self._depth = 0  # threaded reads in flight, set when threads start
        self._size = READ_POLICY.first_block
        self._timing = self._threaded_allowed
        self._timed_first = False
        self._per_element: list[float] = []
        self._shares: list[float] = []
        self._cpu_shares: list[float] = []
        self._element_bytes = 0
        self._returned_at = 0.0
        self._pool: DaemonPool | None = None
        self._pending: collections.deque[Future[tuple[list[Any], float, float]]] = (
            collections.deque()
        )
        # Threads started at the first block (see _EAGER_READ_S): the (per-element time, CPU
        # share) of their first blocks, until they decide to keep the threads or to move back.
        self._trial: list[tuple[float, float]] | None = None
        self._draining = False  # moving back: no more threaded reads, the pending ones first
        self._moved = False  # moved back once: no second start at a first block
        self._rest: list[Any] = []  # what follows a failed element in its block
        self._rest_index = 0  # the index of self._rest[0]

    @property
    def threads(self) -> list[threading.Thread]:
        """The reader threads started (none while reading in the consuming thread)."""
        return list(self._pool.threads) if self._pool is not None else []

    def next_block(self) -> list[Any]:
        """The next block of elements (never empty; the caller stops at ``stop``).

        Raises :class:`ElementReadError` at the place of an element whose read raised (it takes
        one index); the next call goes on after it."""
        if self._open is not None and not self._rest:
            return self._pull()
        if self._rest:
            return self._split(self._rest, self._rest_index)
        start = self._next
        block = self._next_block()
        if type(block) is FailedBlock:
            return self._split(block, start)
        return block

    def _split(self, block: list[Any], start: int) -> list[Any]:
        """The good elements of ``block`` (at index ``start``) before its first failure; keeps
        the rest (the failure first) for the next calls, raising the failure at its turn."""
        first = next((k for k, e in enumerate(block) if e.__class__ is FailedElement), len(block))
        if first == 0:
            self._rest, self._rest_index = block[1:], start + 1
            raise ElementReadError(start, block[0].error)
        self._rest, self._rest_index = block[first:], start + first
        return block[:first]

    def _next_block(self) -> list[Any]:
        if self._pool is not None:
            return self._next_threaded()
        if self._timing and len(self._per_element) >= READ_POLICY.samples:
            self._timing = False
            threads = READ_POLICY.threads_for(
                self._per_element, self._shares, self._cpu_shares, self._threads, spare_cpus()
            )
            if threads > 0:
                self._start_threads(threads)
                return self._next_threaded()
        stop = READ_POLICY.block_end(self._next, self._size, self._stop)
        if self._stream is not None:
            self._open_block(self._next, stop)
            self._next = stop
            return self._pull()
        begin = time.perf_counter()
        cpu_begin = time.thread_time()
        waited_begin = cpu_wait_s() if self._timing else 0.0
        block = read_block(self._getitems, range(self._next, stop))
        self._next = stop
        end = time.perf_counter()
        cpu = time.thread_time() - cpu_begin
        waited = cpu_wait_s() - waited_begin if self._timing else 0.0
        first = self._first_bytes(block[0]) if block else 0
        self._timed(first, len(block), end - begin, end, cpu, waited)
        return block

    def _open_block(self, start: int, stop: int) -> None:
        """Starts streaming the block ``[start, stop)`` (see :meth:`_pull`)."""
        assert self._stream is not None
        try:
            self._open = self._stream(range(start, stop))
        except Exception:  # a node that read its block at once: the block is read again
            self._open = iter(())  # ended at its first element: see _after_stream_error
        self._open_start = self._open_next = start
        self._open_stop = stop
        self._open_read = self._open_cpu = self._open_waited = 0.0
        self._open_first = None

    def _pull(self) -> list[Any]:
        """The next element of the block being streamed, as a block of one.

        An error raised streaming it (or a stream that ends early) belongs to it or, where a
        node below reads its whole block at once, to a later element of the block: the element
        is read again alone; if that fails too, its error is raised at its place and the stream
        goes on after it, else the rest of the block is read as a block (:func:`read_block`).
        The elements already handed out are not made again."""
        stream = self._open
        assert stream is not None
        timing = self._timing
        if timing:
            cpu_begin, waited_begin = time.thread_time(), cpu_wait_s()
        begin = time.perf_counter()
        try:
            element = next(stream)
        except Exception:
            return self._after_stream_error()
        end = time.perf_counter()
        self._open_read += end - begin
        if timing:
            self._open_cpu += time.thread_time() - cpu_begin
            self._open_waited += cpu_wait_s() - waited_begin
        index = self._open_next
        self._open_next = index + 1
        if index + 1 < self._open_stop:
            if self._open_first is None:  # its size, not the element: it is not kept
                self._open_first = (self._first_bytes(element),)
            return [element]
        # The block's last element: the block is timed as one read of its elements.
        first = self._open_first[0] if self._open_first is not None else self._first_bytes(element)
        count = self._open_stop - self._open_start
        self._open, self._open_first = None, None
        self._timed(first, count, self._open_read, end, self._open_cpu, self._open_waited)
        return [element]

    def _first_bytes(self, element: Any) -> int:
        """The size of a block's first ``element`` where :meth:`_timed` will use it (the first
        timed block), else 0 (not computed)."""
        return _nbytes(element) if self._timing and not self._timed_first else 0

    def _after_stream_error(self) -> list[Any]:
        """What :meth:`_pull` hands out after its stream raised at the element ``_open_next``."""
        index, stop = self._open_next, self._open_stop
        self._open, self._open_first = None, None
        alone = read_block(self._getitems, range(index, index + 1))
        if type(alone) is FailedBlock:  # the error was this element's: go on after it
            if index + 1 < stop:
                self._open_block(index + 1, stop)
            return self._split(alone, index)  # raises ElementReadError
        rest = read_block(self._getitems, range(index + 1, stop)) if index + 1 < stop else []
        if type(rest) is FailedBlock:
            return self._split(FailedBlock([*alone, *rest]), index)
        return [*alone, *rest]

    def _timed(
        self, first_bytes: int, count: int, read: float, end: float, cpu: float, waited: float
    ) -> None:
        """Sizes the next block and times the reads for the move to threads, after a block of
        ``count`` elements (the first of ``first_bytes``, see :meth:`_first_bytes`) that took
        ``read`` seconds to read (ending at ``end``), ``cpu`` seconds of CPU and ``waited``
        seconds waiting for a CPU."""
        if read < _GROW_S:
            # A block read at once is read ahead too: it holds at most the process's share of
            # read-ahead bytes (an mp_prefetch worker's share of 64 MiB), as threaded reads do.
            most = READ_POLICY.max_block
            if self._element_bytes:
                most = min(most, max(self._size, read_ahead_bytes() // self._element_bytes))
            self._size = min(most, self._size * 2)
        elif read > _SHRINK_S:
            self._size = max(1, self._size // 2)
        if self._timing:
            begin = end - read
            if self._timed_first:
                other = begin - self._returned_at
                running = max(read - waited, 1e-9)  # READ_POLICY times running time
                self._per_element.append(running / max(count, 1))
                self._shares.append(read / max(read + other, 1e-9))
                self._cpu_shares.append(cpu / running)
            elif count:
                self._element_bytes = first_bytes
                self._timed_first = True
                self._returned_at = end
                running = read - waited
                slow = running / count > _EAGER_READ_S
                if slow and self._next < self._stop and self._trial is None and not self._moved:
                    self._start_eagerly(cpu / max(running, 1e-9))
                return
            self._timed_first = True
            self._returned_at = end

    def _start_eagerly(self, cpu_share: float) -> None:
        """Starts the reader threads after a slow first block, reading ahead up to
        ``prefetch_buffer_size`` elements, on trial (see :data:`_EAGER_READ_S`)."""
        threads = self._threads
        if READ_POLICY.is_cpu_bound(cpu_share):
            threads = min(threads, spare_cpus())
        if threads > 0:
            self._timing = False
            self._trial = []
            self._start_threads(threads, whole_buffer=True)

    def _start_threads(self, threads: int, whole_buffer: bool = False) -> None:
        """Moves reading to ``threads`` threads; blocks keep the size timing chose (so a block
        of costly elements stays small), with at most ``prefetch_buffer_size`` elements,
        :data:`~grainlite.dataset.reading_process._READ_AHEAD_BYTES` and two blocks per thread
        in flight (``whole_buffer``: as many blocks as the first two bounds allow)."""
        in_flight = min(self._buffer, read_ahead_bytes() // max(1, self._element_bytes))
        self._block = READ_POLICY.threaded_block(
            self._buffer, threads, at_most=min(self._size, in_flight)
        )
        blocks = in_flight // self._block
        self._depth = max(1, blocks if whole_buffer else min(blocks, 2 * threads))
        self._pool = DaemonPool(min(threads, self._depth), "grainlite-to-iter")
        self._fill()

    def _fill(self) -> None:
        """Queues threaded reads up to the depth (none while moving back)."""
        assert self._pool is not None
        while len(self._pending) < self._depth and self._next < self._stop and not self._draining:
            stop = min(self._stop, self._next + self._block)
            self._pending.append(self._pool.submit(self._read, range(self._next, stop)))
            self._next = stop

    def _next_threaded(self) -> list[Any]:
        if self._draining and not self._pending:
            self._move_back()
            return self._next_block()
        self._fill()
        block, seconds, cpu = self._pending.popleft().result()
        trial = self._trial
        if trial is not None:
            trial.append((seconds / max(len(block), 1), cpu / max(seconds, 1e-9)))
            if len(trial) >= READ_POLICY.samples:
                # Cheap reads, or reads that keep a CPU busy (the timed rule then decides how
                # many threads the spare CPUs allow): back to the consuming thread.
                self._trial = None
                per_element, cpu_share = np.median(np.array(trial), axis=0)
                cheap = not READ_POLICY.is_slow(float(per_element))
                self._draining = cheap or READ_POLICY.is_cpu_bound(float(cpu_share))
        return block

    def _move_back(self) -> None:
        """Ends the threads started at the first block, whose reads proved cheap: reading goes
        on in the consuming thread, timed again as from the start."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown()
        self._draining, self._moved = False, True
        self._timing = True
        self._timed_first = False
        self._per_element, self._shares, self._cpu_shares = [], [], []

    def close(self) -> None:
        """Cancels the queued reads, ends the threads and waits for them; idempotent."""
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._rest = []
        self._open, self._open_first = None, None  # a dropped stream ends (its counts kept)
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown()
