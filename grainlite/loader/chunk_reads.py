"""The read function of a sampler/source pair: ``read(m0, m1)`` for a worker's positions, and the
first keys hinted to the source before workers start.

:func:`make_chunk_reader` builds the function that reads one chunk of a worker's positions
[m0, m1): record keys for the whole chunk come from one vectorized sampler call where the sampler
offers ``record_keys`` (computed a key block at a time, chunks cut from it), else index by index,
and the source is read with one ``__getitems__`` call where it has one. It is apart from the
reader that iterates chunks (:mod:`grainlite.loader.record_reader`) because what is read, and
with which keys and rng seeds, never depends on which thread reads it or when.

Where :meth:`~grainlite.options.ReadPolicy.list_read_blocks` says so (local ArrayRecord files of
small records, a CPU to spare), the sampler's keys are also read ahead in big index-list reads, up
to 65,536 keys at once, in one background thread (:mod:`grainlite.sources.list_reads`); chunks
are then served from those blocks, checked key by key, and read directly where they are not (the
first block's worth of keys, a block whose read failed: its error is raised by the chunk's own
read, as before).

A source that takes read-ahead hints (:data:`~grainlite.options.READ_POLICY`) is told the keys a
little ahead of each read, and :func:`hint_first_keys` tells it the sampler's first keys from the
training process just before worker processes start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from grainlite.loader.striding import WorkerSlice
from grainlite.options import READ_POLICY
from grainlite.sources.list_reads import ListReads
from grainlite.sources.protocol import read_many

# Record keys are computed this many positions at a time (one sampler call costs about as much
# for 4096 positions as for 256), and chunks are cut from them.
_KEY_BLOCK = 4096


# One chunk: (rng seeds or rng objects per record, or None when no record has an rng; the data).
Chunk = tuple[list[Any] | None, list[Any]]


def make_chunk_reader(
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
    first ``tell_ahead`` keys of the sampler, from the training process just before its worker
    processes start: a remote source fetches the files they need while the workers start.
    Advisory: a sampler that cannot say its keys cheaply gives no hint."""
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


def copy_first_reads(pipeline: Any, workers: int, source: Any) -> None:
    """Tells a remote source (``prefetch_first_reads``) the keys of the first worker's first
    positions, before the workers start: those of the reads that hold its first batch
    (:meth:`~grainlite.options.ReadPolicy.first_copies`). The source fetches just those records
    by range, so the first batch (the first worker's) does not wait for every whole file.
    Advisory, as every hint: a sampler that cannot say its keys cheaply gives none, and a
    failure is left for the reads."""
    prefetch = getattr(source, "prefetch_first_reads", None)
    record_keys = getattr(pipeline.sampler, "record_keys", None)
    count = READ_POLICY.first_copies(pipeline.first_batch_records, READ_POLICY.first_read)
    if prefetch is None or record_keys is None or count <= 0:
        return
    if not getattr(source, "takes_key_hints", False):
        return
    try:
        worker = pipeline.worker_slice(0, workers)
        last = worker.positions()
        stop = count if last is None else min(count, last)
        keys = np.asarray(record_keys(worker.indices(0, stop)), dtype=np.int64)
        length = len(source)
        prefetch(keys % length if length else keys)
    except Exception:  # a hint never fails a loader
        return
