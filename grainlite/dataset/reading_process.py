"""What this process's reads may use of the host, and how it hands out what it reads.

The training process reads with all the CPUs it may use and up to :data:`_READ_AHEAD_BYTES` of
elements in flight. An ``mp_prefetch`` worker is one of several processes sharing the CPUs and
the memory of a host, so its pipeline declares it (:func:`share_cpus`, :func:`stream_blocks`):
CPU-bound reads then get threads only for its share of the CPUs, it reads ahead at most its share
of the bytes, and it hands out the elements of a block one by one as each is made.

This is process-wide state, declared once and asked by every
:class:`~grainlite.dataset.read_ahead.BlockReader` (and by the iterator's list reads), apart from
the reader that follows it, so that the reader module is about reading and this one about the
process it reads in.
"""

from __future__ import annotations

from grainlite.cpus import usable_cpu_count

# At most this many bytes of elements read ahead (and at least one block).
_READ_AHEAD_BYTES = 64 << 20

# The CPUs this process's reads may use; None: all it may use (see share_cpus).
_cpus_for_reads: float | None = None
_workers_sharing = 1  # the mp_prefetch workers this process is one of (share_cpus)
# The bytes this process may read ahead (see share_cpus).
_read_ahead_bytes = _READ_AHEAD_BYTES
# Whether blocks read in the consuming thread hand out each element as it is made (in an
# mp_prefetch worker: see stream_blocks).
_streaming = False


def stream_blocks() -> None:
    """Declares this process an ``mp_prefetch`` worker: from now on, a block read in the
    consuming thread is still one read of the source, but its elements are handed out one by
    one as each is made (the transformations run element by element, through ``stream``), so
    an element is sent before the next one is made: a transformation that hangs on one element
    holds back none made before it, as Grain's element-by-element reads do."""
    global _streaming
    _streaming = True


def share_cpus(workers: int) -> None:
    """Declares this process one of ``workers`` processes sharing the CPUs and the memory (an
    ``mp_prefetch`` worker): CPU-bound reads then use threads only for this process's share
    beyond its own, and it reads ahead at most its share of :data:`_READ_AHEAD_BYTES`."""
    global _cpus_for_reads, _read_ahead_bytes, _workers_sharing
    _workers_sharing = max(1, workers)
    _cpus_for_reads = usable_cpu_count() / max(1, workers)
    _read_ahead_bytes = _READ_AHEAD_BYTES // max(1, workers)


def reading_processes() -> int:
    """The processes that read this stream: 1 in the training process, the worker count in an
    ``mp_prefetch`` worker (:func:`share_cpus`)."""
    return 1 if _cpus_for_reads is None else _workers_sharing


def spare_cpus() -> int:
    """CPUs beyond the consuming thread's that CPU-bound reader threads may use here."""
    cpus = usable_cpu_count() if _cpus_for_reads is None else _cpus_for_reads
    return max(0, int(cpus) - 1)


def streams_blocks() -> bool:
    """Whether blocks read in the consuming thread are streamed (see :func:`stream_blocks`)."""
    return _streaming


def read_ahead_bytes() -> int:
    """The bytes this process may read ahead (see :func:`share_cpus`)."""
    return _read_ahead_bytes
