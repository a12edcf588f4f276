"""The read stage of one process: sampler keys and source reads for a worker's positions, in order.

A worker reads the global sampler indices of its :class:`~grainlite.loader.striding.WorkerSlice`,
position by position, below the sampler's length. Reads happen in chunks: record keys for a whole
chunk come from one vectorized sampler call where the sampler offers ``record_keys``, and the
source is read with one ``__getitems__`` call where it has one. With reader threads, several chunks
are read ahead in parallel and handed over in submission order, so the order never depends on
timing.

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
changes what is read or in which order.

Where :meth:`~grainlite.options.ReadPolicy.list_read_blocks` says so (local ArrayRecord files of
small records, a CPU to spare), the sampler's keys are also read ahead in big index-list reads, up
to 65,536 keys at once, in one background thread (:mod:`grainlite.sources.list_reads`); chunks
are then served from those blocks, checked key by key, and read directly where they are not (the
first block's worth of keys, a block whose read failed: its error is raised by the chunk's own
read, as before); reads then never move to reader threads.

Stats: each chunk's read (or, with reader threads, the wait for it) is timed into the reader's
:class:`~grainlite.stats.counters.StageCounter`: two clock reads per chunk, not per record.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from grainlite.cpus import cpu_wait_s, usable_cpu_count
from grainlite.loader.striding import WorkerSlice
from grainlite.options import READ_POLICY, ReadOptions
from grainlite.sources.list_reads import ListReads
from grainlite.sources.protocol import read_many
from grainlite.stats.counters import StageCounter, clock
from grainlite.stats.tracing import span

_FIRST_CHUNK = 8
# Record keys are computed this many positions at a time (one sampler call costs about as much
# for 4096 positions as for 256), and chunks are cut from them.
_KEY_BLOCK = 4096


# One chunk: (rng seeds or rng objects per record, or None when no record has an rng; the data).
Chunk = tuple[list[Any] | None, list[Any]]


def _make_chunk_reader(
    sampler: Any,
    source: Any,
    worker: WorkerSlice,
    rngs: bool = True,
    start: int = 0,
    spare_cpus: int = 0,
    processes: int = 1,
) -> tuple[Callable[[int, int], Chunk], ListReads | None]:
    """Returns ``read(m0, m1)`` reading positions [m0, m1) (a short result: the stream ended),
    and the big list reads ahead from position ``start`` that it takes its records from
    (:mod:`grainlite.sources.list_reads`; None where the source is not read so), which the
    caller owns and closes; ``spare_cpus``: the CPUs this process may use beyond the consuming
    thread's (list reads need one); ``processes``: the processes reading the stream (list reads
    only where one reads it all: the training process at W=0).

    ``read`` may be called from several reader threads at once, for disjoint ranges (never
    while list reads serve it: the reader then stays in the consuming thread). With ``rngs``
    false (no transform takes a generator) a vectorized sampler's per-record rng seeds are not
    computed: every chunk carries None instead.
    """
    source_len = len(source)

    def listed_keys(keys: np.ndarray) -> list[int]:
        if source_len and keys.size and int(keys.max()) >= source_len:
            keys = keys % source_len  # Grain wraps keys past the end of the source.
        return keys.tolist()

    read_data = read_many(source)
    prefetch = READ_POLICY.prefetcher(source)

    record_keys = getattr(sampler, "record_keys", None)
    if record_keys is not None and hasattr(sampler, "seed"):
        last = worker.positions()  # keys are never asked beyond the worker's positions

        def keys_of(m0: int, m1: int) -> np.ndarray:
            keys = np.asarray(record_keys(worker.indices(m0, m1)), dtype=np.int64)
            return keys % source_len if source_len else keys

        list_reads = ListReads.open(
            source, keys_of, start, last, spare_cpus=spare_cpus, processes=processes
        )
        if list_reads is not None:
            read_directly = read_data

            def read_data(keys: list[int]) -> list[Any]:
                records = list_reads.take(keys)
                return read_directly(keys) if records is None else records

        return _vectorized_reader(
            sampler, record_keys, worker, rngs, listed_keys, read_data, prefetch
        ), list_reads
    return _custom_reader(sampler, worker, listed_keys, read_data), None


def _vectorized_reader(
    sampler: Any,
    record_keys: Callable[[np.ndarray], Any],
    worker: WorkerSlice,
    rngs: bool,
    listed_keys: Callable[[np.ndarray], list[int]],
    read_data: Callable[[list[int]], list[Any]],
    prefetch: Callable[[Any], None] | None,
) -> Callable[[int, int], Chunk]:
    """``read(m0, m1)`` for a sampler that computes keys for many positions at once."""
    seed = sampler.seed if rngs else None
    rng_indices = getattr(sampler, "rng_indices", None) if worker.head else None
    last = worker.positions()  # keys are never asked beyond the worker's positions
    # (first position, keys, rng seeds) of the last key block; replaced whole, never mutated,
    # so reader threads sharing it need no lock.
    block: tuple[int, list[int], list[int] | None] = (0, [], None)
    hinted = 0  # positions below this were told to the source (READ_POLICY.tell_ahead)
    hint_lock = threading.Lock()

    def hint(m0: int, stop: int, keys: list[int]) -> None:
        """Tells the source the keys of positions [m0, stop + tell_ahead) not told yet."""
        nonlocal hinted
        assert prefetch is not None
        with hint_lock:
            ahead = stop + READ_POLICY.tell_ahead
            end = ahead if last is None else min(ahead, last)
            begin, hinted = max(m0, hinted), max(hinted, end)
            if begin < stop:
                prefetch(keys[begin - m0 :])
            begin = max(begin, stop)
            if begin < end:
                beyond = worker.indices(begin, end)
                prefetch(listed_keys(np.asarray(record_keys(beyond), dtype=np.int64)))

    def read(m0: int, m1: int) -> Chunk:
        nonlocal block
        first, keys, seeds = block
        if not first <= m0 <= m1 <= first + len(keys):
            stop = max(m1, m0 + _KEY_BLOCK)
            if last is not None:
                stop = max(m1, min(stop, last))
            indices = worker.indices(m0, stop)
            keys = listed_keys(np.asarray(record_keys(indices), dtype=np.int64))
            if prefetch is not None:
                hint(m0, stop, keys)
            if seed is not None and rng_indices is not None:
                indices = rng_indices(indices)  # foreign codes keep their old generator
            seeds = None if seed is None else (indices + seed).tolist()
            first, block = m0, (m0, keys, seeds)
        lo, hi = m0 - first, m1 - first
        return (None if seeds is None else seeds[lo:hi]), read_data(keys[lo:hi])

    return read


def _custom_reader(
    sampler: Any,
    worker: WorkerSlice,
    listed_keys: Callable[[np.ndarray], list[int]],
    read_data: Callable[[list[int]], list[Any]],
) -> Callable[[int, int], Chunk]:
    """``read(m0, m1)`` for a sampler read index by index."""

    def read_custom(m0: int, m1: int) -> Chunk:
        rngs, keys = [], []
        for m in range(m0, m1):
            try:
                metadata = sampler[worker.index(m)]
            except IndexError:
                break
            rngs.append(metadata.rng)
            keys.append(metadata.record_key)
        if not keys:
            return None, []
        data = read_data(listed_keys(np.asarray(keys, dtype=np.int64)))
        return (rngs if any(r is not None for r in rngs) else None), data

    return read_custom


def hint_first_keys(sampler: Any, source: Any) -> None:
    """Tells a source that takes read-ahead hints (:data:`~grainlite.options.READ_POLICY`) the
    first ``tell_ahead`` keys of the sampler, from the training process while worker processes
    start (their interpreters take a second or more): a remote source fetches the files they need
    meanwhile. Advisory: a sampler that cannot say its keys cheaply gives no hint."""
    prefetch = READ_POLICY.prefetcher(source)
    record_keys = getattr(sampler, "record_keys", None)
    if prefetch is None or record_keys is None or not hasattr(sampler, "seed"):
        return
    try:
        count = READ_POLICY.tell_ahead
        if hasattr(sampler, "__len__"):
            count = min(count, len(sampler))
        keys = np.asarray(record_keys(np.arange(count, dtype=np.int64)), dtype=np.int64)
        length = len(source)
        prefetch(keys % length if length else keys)
    except Exception:  # a hint never fails a loader; the workers' reads tell the keys again
        return


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
        self._read, self._list_reads = _make_chunk_reader(
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
        size = _FIRST_CHUNK
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
            m1 = min(self._stop, self._next + size)
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
