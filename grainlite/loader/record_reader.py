"""The read stage of one process: iterates a worker's positions in order, chunk by chunk, in the
consuming thread or read ahead by reader threads.

A worker reads the global sampler indices of its :class:`~grainlite.loader.striding.WorkerSlice`,
position by position, below the sampler's length. Reads happen in chunks, each read by the
function of :mod:`grainlite.loader.chunk_reads`. With reader threads, several chunks are read
ahead in parallel and handed over in submission order, so the order never depends on timing.

Reader threads only pay off when reads are slow (network, cold disks) and a large part of the
work: for a fast source (a list, a range, memory, a local ArrayRecord file) handing chunks between
threads costs more than the reads, and where transforms dominate (image decoding) threads only
compete with them for the interpreter. So every reader starts in the consuming thread, timing its
reads and the consumer's work, and moves to its ``ReadOptions`` threads only where
:data:`~grainlite.options.READ_POLICY` says so (reads slower than 20 µs per record *and* more than
a quarter of the time), the rule the Dataset API's block reader follows: a read is timed by its
running time (its wall time less its thread's wait for a CPU, so other processes busy on the
machine do not make a cheap read look slow), and reads that keep a CPU busy get no more threads
than this process's spare CPUs (its share of them in a worker process). Which thread reads never
changes what is read or in which order. Where chunks are served by big list reads ahead
(:mod:`grainlite.sources.list_reads`), reads never move to reader threads.

Stats: each chunk's read (or, with reader threads, the wait for it) is timed into the reader's
:class:`~grainlite.stats.counters.StageCounter`: two clock reads per chunk, not per record.
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from grainlite.cpus import cpu_wait_s, usable_cpu_count
from grainlite.loader.chunk_reads import Chunk, make_chunk_reader
from grainlite.loader.striding import WorkerSlice
from grainlite.options import READ_POLICY, ReadOptions
from grainlite.stats.counters import StageCounter, clock
from grainlite.stats.tracing import span


class RecordReader:
    """Iterates chunks of (rng seeds, data) for one worker's positions from ``start`` on.

    Args:
      sampler: the sampler (``record_keys`` and ``seed`` make reads vectorized).
      source: a random-access data source.
      worker: which global indices this worker reads.
      start: the first position to read (positions before it were consumed before a restore).
      options: reader threads and read-ahead depth.
      counter: where chunk read times and record counts go (None: not counted).
      rngs: whether any transform takes the records' generators; False spares computing the
        seeds of a vectorized sampler (chunks then carry None for them).
      processes: how many processes of this host share its CPUs (the worker count; 1 at
        ``worker_count=0``): reads that keep a CPU busy get at most this process's spare share.
    """

    def __init__(
        self,
        sampler: Any,
        source: Any,
        worker: WorkerSlice,
        start: int,
        options: ReadOptions,
        counter: StageCounter | None = None,
        rngs: bool = True,
        processes: int = 1,
    ) -> None:
        self._counter = counter
        self._processes = max(1, processes)
        spare = max(0, int(usable_cpu_count() / self._processes) - 1)
        self._read, self._list_reads = make_chunk_reader(
            sampler, source, worker, rngs, start, spare, self._processes
        )
        synchronous = options.synchronous or self._list_reads is not None
        total = worker.positions()
        self._stop = sys.maxsize if total is None else total
        self._next = start
        self._options = options
        self._threads = options.num_threads  # reader threads, once reads move to them
        self._pool: ThreadPoolExecutor | None = None
        self._pending: collections.deque[tuple[int, Future[Chunk]]] = collections.deque()
        if synchronous:  # reads served by list reads ahead stay in this thread too
            self._chunk = READ_POLICY.max_block
            self._depth = 0  # never leaves the consuming thread
        else:
            self._chunk = READ_POLICY.threaded_block(
                options.prefetch_buffer_size, options.num_threads
            )
            self._depth = max(1, options.prefetch_buffer_size // self._chunk)

    def __iter__(self) -> Iterator[Chunk]:
        yield from self._iterate_synchronously()
        if self._depth and self._next < self._stop:
            yield from self._iterate_threaded()

    def _iterate_synchronously(self) -> Iterator[Chunk]:
        """Reads in this thread: for good without reader threads, else until reads prove slow."""
        size = READ_POLICY.first_read
        timing = bool(self._depth)
        first_chunk = True
        per_record: list[float] = []  # running seconds per record, one entry per timed chunk
        shares: list[float] = []  # the read's share of read + transform time, per timed chunk
        cpu_shares: list[float] = []  # the read's CPU time over its running time, per chunk
        counter = self._counter
        cpu = waited = 0.0
        while self._next < self._stop:
            if timing and len(per_record) >= READ_POLICY.samples:
                spare = max(0, int(usable_cpu_count() / self._processes) - 1)
                threads = READ_POLICY.threads_for(
                    per_record, shares, cpu_shares, self._options.num_threads, spare
                )
                if threads:
                    self._threads = threads
                    return  # reads are slow and a large part of the work: hand over to threads
                timing = False  # stay in this thread for good
            m1 = READ_POLICY.block_end(self._next, size, self._stop)
            if timing:
                cpu, waited = time.thread_time(), cpu_wait_s()
            begin = clock()
            with span(counter.name if counter is not None else "read"):  # while a trace records
                chunk = self._read(self._next, m1)
            end = clock()
            if timing:  # the read's CPU time and wait for a CPU
                cpu, waited = time.thread_time() - cpu, cpu_wait_s() - waited
            if counter is not None:
                counter.add(end - begin, len(chunk[1]), len(chunk[1]))
            if len(chunk[1]) < m1 - self._next:
                self._next = self._stop
                if chunk[1]:
                    yield chunk
                return
            self._next = m1
            if chunk[1]:
                yield chunk
            if timing and not first_chunk:
                read, other = end - begin, clock() - end  # other: the consumer's transforms
                running = max(read / 1e9 - waited, 1e-9)  # clock() counts nanoseconds
                per_record.append(running / len(chunk[1]))
                shares.append(read / max(read + other, 1e-9))
                cpu_shares.append(cpu / running)
            first_chunk = False
            size = min(READ_POLICY.max_block, size * 2)

    def _submit(self) -> None:
        assert self._pool is not None
        m1 = min(self._stop, self._next + self._chunk)
        self._pending.append((m1 - self._next, self._pool.submit(self._read, self._next, m1)))
        self._next = m1

    def _iterate_threaded(self) -> Iterator[Chunk]:
        self._pool = ThreadPoolExecutor(self._threads, "grainlite-reader")
        while True:
            while len(self._pending) < self._depth and self._next < self._stop:
                self._submit()
            if not self._pending:
                return
            wanted, future = self._pending.popleft()
            begin = clock()
            with span(self._counter.name if self._counter is not None else "read"):
                chunk = future.result()
            if self._counter is not None:
                self._counter.add(clock() - begin, len(chunk[1]), len(chunk[1]))
            if chunk[1]:
                yield chunk
            if len(chunk[1]) < wanted:
                return

    def close(self) -> None:
        """Stops reading ahead: pending reads are cancelled and the threads end (the list
        reads' thread is waited for)."""
        if self._list_reads is not None:
            self._list_reads.close()
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
