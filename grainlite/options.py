"""Options of the DataLoader: how each process reads, and how many processes there are."""

from __future__ import annotations

import logging
import statistics  # np.median's first call imports more of NumPy: ~30 ms of a start
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from grainlite.checks import int_option

_log = logging.getLogger("grainlite")


def _check_count(name: str, value: object) -> int:
    """``value`` if it is an int >= 0 (0 switches the reader threads off); Grain's wording."""
    fix = f"pass {name}=N with N >= 0 (0 reads in the consuming thread, without reader threads)."
    return int_option(
        value,
        0,
        wrong_type=f"ReadOptions.{name} must be an int, got {{type}} {{value}}; {fix}",
        too_small=f"{name} must be non-negative, got {{value}}; {fix}",
    )


@dataclass(slots=True)
class ReadOptions:
    """How one process reads records: ``num_threads`` reader threads keep up to
    ``prefetch_buffer_size`` records read ahead of the transforms.

    The defaults (16 threads, 500 records) are Grain's, so a pipeline tuned for Grain behaves the
    same.
    Readers only run the sampler and the data source; transforms always run in the consuming
    thread, in order. ``num_threads=0`` or ``prefetch_buffer_size=0`` reads synchronously in the
    consuming thread. These settings are per process: with 4 workers and 16 threads, 64 threads
    read.

    Threads are a cost where reads are fast (memory, a list, a local ArrayRecord file read in
    batches): each process first reads in its own thread, timing the source, and starts its reader
    threads only if reads take more than about 20 µs per record and more than a quarter of the
    time (reads and transforms; :data:`READ_POLICY`). What is read, and in which order, is the
    same either way.
    """

    num_threads: int = 16
    prefetch_buffer_size: int = 500

    def __post_init__(self) -> None:
        self.num_threads = _check_count("num_threads", self.num_threads)
        self.prefetch_buffer_size = _check_count("prefetch_buffer_size", self.prefetch_buffer_size)
        if 0 < self.prefetch_buffer_size < self.num_threads:
            _log.warning(
                "prefetch_buffer_size=%d is smaller than num_threads=%d: at most %d threads can "
                "have work; raise prefetch_buffer_size to at least num_threads.",
                self.prefetch_buffer_size,
                self.num_threads,
                self.prefetch_buffer_size,
            )

    @property
    def synchronous(self) -> bool:
        """True when reads happen in the consuming thread (no reader threads)."""
        return self.num_threads == 0 or self.prefetch_buffer_size == 0


@dataclass(slots=True)
class MultiprocessingOptions:
    """The process settings of a DataLoader, as Grain reports them.

    ``num_workers`` worker processes (0: everything runs in the calling process), each keeping at
    most ``per_worker_buffer_size`` finished elements ready for the parent (0 works as 1). Both
    must be ints >= 0: anything else raises here, where Grain accepts it and fails later (or
    never).
    """

    num_workers: int = 0
    per_worker_buffer_size: int = 1
    enable_profiling: bool = False

    def __post_init__(self) -> None:
        workers_fix = "pass num_workers=0 to run in this process, or N >= 1 for N worker processes."
        self.num_workers = int_option(
            self.num_workers,
            0,
            wrong_type=f"MultiprocessingOptions num_workers must be an int, got {{type}} "
            f"{{value}}; {workers_fix}",
            too_small=f"MultiprocessingOptions num_workers must be greater than or equal to 0, "
            f"got {{value}}; {workers_fix}",
        )
        buffer_fix = (
            "pass per_worker_buffer_size=N with N >= 0 to keep up to N finished elements ready "
            "per worker (0 works as 1)."
        )
        self.per_worker_buffer_size = int_option(
            self.per_worker_buffer_size,
            0,
            wrong_type=f"MultiprocessingOptions per_worker_buffer_size must be an int, got "
            f"{{type}} {{value}}; {buffer_fix}",
            too_small=f"MultiprocessingOptions per_worker_buffer_size must be greater than or "
            f"equal to 0, got {{value}}; {buffer_fix}",
        )


RECORD_OVERHEAD_BYTES = 48
"""About what Python adds to each record held as ``bytes`` in a list (a 33-byte object header
rounded up by the allocator, and a list slot), counted against :attr:`ReadPolicy.list_read_bytes`:
a 16-byte record takes 64 bytes, so 4 MiB holds 65,536 of them."""


@dataclass(frozen=True, slots=True)
class ReadPolicy:
    """When reads leave the consuming thread for ``ReadOptions``' reader threads: the one rule of
    the DataLoader's reader (:mod:`grainlite.loader.record_reader`), the Dataset API's block reader
    (:mod:`grainlite.dataset.read_ahead`) and the stats diagnosis (:mod:`grainlite.stats`).

    Reader threads pay off only where reads are slow (network, cold disks) *and* a large part of
    the work: for a fast source, handing blocks between threads costs more than the reads, and
    where transforms dominate, threads only compete with them for the interpreter. So a reader
    first reads in the consuming thread, timing ``samples`` blocks after the first (whose read
    also opens files and warms caches), and moves to threads only if the median read takes more
    than ``slow_read_s`` per record and more than ``read_share`` of the read + consumer time.
    Medians, so one stall of a busy machine does not send a fast source to threads. A read is
    timed by its running time: its wall time less the time its thread waited for a CPU
    (:func:`~grainlite.cpus.cpu_wait_s`), so a cheap read on a machine busy with other processes
    is still cheap. Reads that keep a CPU busy (their CPU time is more than ``cpu_bound_share``
    of their running time: a decode, not a wait for storage) get no more threads than the CPUs
    spare beyond the consuming thread's (:meth:`threads_for`).

    It also decides, for both APIs, when a source is read ahead in big index-list reads in one
    background thread instead (:meth:`list_read_blocks`: local ArrayRecord files of small
    records, in a process with a CPU to spare); the readers then still ask for blocks of at
    most :attr:`max_block` keys, served from the blocks read ahead, and never move them to
    reader threads (which would read around the blocks read ahead).
    """

    slow_read_s: float = 20e-6
    """Reads slower than this per record can gain from reader threads."""
    read_share: float = 0.25
    """... if they also take more than this share of the read + consumer time."""
    samples: int = 5
    """Blocks timed (after the first) before deciding."""
    first_read: int = 8
    """The records of the DataLoader reader's first read (the reads after it double, up to
    :attr:`max_block`; see :meth:`block_end`): small, so the first elements come soon."""
    first_block: int = 1
    """The elements of the Dataset API block reader's first block (the blocks after it double
    while reads are cheap and halve while they are slow; see :meth:`block_end`)."""
    max_block: int = 256
    """The most records one read asks of a source: a block never holds more, so the first
    elements come soon and a block's memory stays bounded. (Big list reads ahead, where
    :meth:`list_read_blocks` allows them, read up to :attr:`max_list_block` keys at once in
    their own thread and serve these blocks.)"""
    cpu_bound_share: float = 0.5
    """Reads whose CPU time is more than this share of their running time keep a CPU busy."""
    tell_ahead: int = 4096
    """Records a reader tells its source it will read, in order, beyond those it computes keys
    for now, where the source takes the hint (``source.prefetch_keys(keys)``: an ArrayRecord source
    on ``s3://`` or ``gs://`` fetches the files those keys need into its cache). A hint never
    changes what is read or in which order."""

    first_copy_records: int = 256
    """The most records of the first worker's first reads that a remote source fetches by exact
    ranges while the workers start, told by the DataLoader at ``iter()`` and by ``mp_prefetch``
    from the start (``source.prefetch_first_reads(keys)``: an ArrayRecord source on ``s3://`` or
    ``gs://`` puts them in first copies, read before the whole files are cached), so a shuffled
    first batch does not wait for every whole file. How many are copied is
    :meth:`first_copies`: the reads that hold the first batch where the pipeline says its size,
    this many where it does not; 0 turns copies off."""

    list_read_bytes: int = 4 << 20
    """The most bytes one block of big index-list reads holds (:meth:`list_read_blocks`): its
    records' own bytes plus about :data:`RECORD_OVERHEAD_BYTES` of Python's per record. A reader
    holds at most three such blocks (one being taken, one ready, one being read): 12 MiB."""
    max_list_block: int = 65536
    """The most keys one big index-list read asks for. array_record's index-list read costs about
    2.5 ns per record *in the file* per call, whatever the keys asked (3 to 6 ms on a
    1,000,000-record file), so it pays only for blocks of thousands of keys; 65,536 keys of the
    ``small`` workload read in a background thread gave 0.37 of its in-memory rate, 16,384 gave
    0.33 (``python -m benchmarks.array_record_reads``, docs/performance.md)."""

    min_list_block: int = 1024
    """The fewest keys a big list-read block holds: the lever is for small records (at most
    about 4 KB: 1,024 of them within :attr:`list_read_bytes`), whose reads cost mostly the
    per-call work; larger records are read as before, in reader threads where reads are slow."""

    def list_read_blocks(
        self, source: object, spare_cpus: int = 1, processes: int = 1
    ) -> tuple[int, int] | None:
        """The ``(first, most)`` keys per block with which a reader reads ``source`` ahead in a
        background thread, in big index-list reads (:class:`~grainlite.sources.list_reads.
        ListReads`), or None where that does not pay: the source says nothing of its reads
        (``list_read_profile()``: an in-memory source, a remote one), a block within
        :attr:`list_read_bytes` holds fewer keys than :attr:`min_list_block` or than the fewest
        for which one list read pays (records of about 150 KB: 27 keys), the source has fewer
        records than that, the process has no CPU to spare beyond its
        consuming thread's (``spare_cpus``: a worker of as many as there are CPUs): the list read
        costs about as much CPU per record as a range read, and pays only by running beside the
        consumer's work (measured: 0.10 of the memory rate in a thread on a machine busy with
        other work, against 0.17 with range reads), or the reader is one of ``processes`` > 1
        worker processes: the workers are the parallelism there, and each would hold its blocks
        and array_record's buffers of a big read (about 70 MB more per worker on ``small``).

        The source's ``list_read_profile()`` gives ``(fewest keys for which one list read pays,
        mean stored bytes per record)``. The stored size decides; the reader then sizes each
        block by the records' real sizes (measured on a sample of the block before, and of the
        first keys before the first block: compressed records are larger in memory than on
        disk), within :attr:`list_read_bytes` and ``most``, and stops reading ahead where that
        leaves fewer than ``first`` keys."""
        profile = getattr(source, "list_read_profile", None)
        facts = profile() if callable(profile) else None
        if facts is None or spare_cpus < 1 or processes > 1:
            return None
        fewest, record_bytes = facts
        first = max(fewest, self.min_list_block)
        if first > self.max_list_block or len(source) < first:  # type: ignore[arg-type]
            return None
        if self.keys_within_bytes(record_bytes) < first:
            return None
        return first, self.max_list_block

    def keys_within_bytes(self, record_bytes: float) -> int:
        """How many records of ``record_bytes`` bytes one list-read block holds within
        :attr:`list_read_bytes`."""
        return int(self.list_read_bytes // (max(0.0, record_bytes) + RECORD_OVERHEAD_BYTES))

    def is_slow(self, seconds_per_record: float) -> bool:
        """Whether a read of ``seconds_per_record`` is slow enough for reader threads."""
        return seconds_per_record > self.slow_read_s

    def moves_to_threads(
        self, seconds_per_record: Sequence[float], shares: Sequence[float]
    ) -> bool:
        """Whether reads timed at ``seconds_per_record`` per record, taking ``shares`` of the
        read + consumer time (one entry per timed block), move to reader threads."""
        return (
            self.is_slow(statistics.median(seconds_per_record))
            and statistics.median(shares) > self.read_share
        )

    def block_end(self, start: int, size: int, stop: int) -> int:
        """Where a reader's read of at most ``size`` records from position ``start`` ends: at the
        next multiple of ``size``, or ``stop``. The readers of both APIs double their first reads
        (from :attr:`first_read` records for the DataLoader, :attr:`first_block` for the Dataset
        API), so from position 0 their reads end at every power of two: a first batch of 128
        records is read by reads that end at 128, and never waits for a read past it
        (:meth:`first_copies` counts on this)."""
        return min(stop, (start // size + 1) * size)

    def first_copies(self, batch: int | None, first_read: int, records_per_read: int = 1) -> int:
        """The records a remote source copies first (:attr:`first_copy_records`) for a first
        batch of ``batch`` read units (positions of a DataLoader worker, or indices of the
        Dataset API's ``MapDataset``, of ``records_per_read`` records each), read by a reader
        whose first read is ``first_read`` units (:attr:`first_read`, :attr:`first_block`): those
        of the reads that hold it, i.e. up to the first power of two at least ``batch`` and
        ``first_read`` (up to :attr:`max_block`; multiples of it beyond, see :meth:`block_end`).
        Where that is more than :attr:`first_copy_records`, none: such a first batch waits for
        the whole files anyway, and ranged GETs of its records would only slow them. Where
        ``batch`` is None (no batch, or a filter or flat map before it),
        :attr:`first_copy_records`."""
        if batch is None or batch <= 0:
            return self.first_copy_records
        reads = max(batch, first_read)
        if reads <= self.max_block:
            end = 1 << (reads - 1).bit_length()
        else:
            end = -(-reads // self.max_block) * self.max_block
        records = end * max(1, records_per_read)
        return records if records <= self.first_copy_records else 0

    def threaded_block(self, buffer: int, threads: int, at_most: int | None = None) -> int:
        """Records per read in ``threads`` reader threads sharing a ``buffer`` of records read
        ahead (``ReadOptions.prefetch_buffer_size``): the buffer's share of one thread, so
        every thread has a read in flight, at most :attr:`max_block` (and ``at_most``, a
        reader's own bound), at least 1."""
        bound = self.max_block if at_most is None else min(self.max_block, at_most)
        return max(1, min(bound, buffer // threads))

    def prefetcher(self, source: object) -> Callable[[Any], None] | None:
        """The source's ``prefetch_keys(keys)`` hook, which readers call with the keys they
        will read (:attr:`tell_ahead`), or None where the source has none, or says it takes
        none now (``takes_key_hints`` false: an ArrayRecord source of local files, where
        computing the keys ahead would only cost time)."""
        hook = getattr(source, "prefetch_keys", None)
        if not callable(hook) or not getattr(source, "takes_key_hints", True):
            return None
        return hook

    def is_cpu_bound(self, cpu_share: float) -> bool:
        """Whether reads whose CPU time is ``cpu_share`` of their running time keep a CPU busy."""
        return cpu_share > self.cpu_bound_share

    def threads_for(
        self,
        seconds_per_record: Sequence[float],
        shares: Sequence[float],
        cpu_shares: Sequence[float],
        threads: int,
        spare_cpus: int,
    ) -> int:
        """How many reader threads timed reads move to; 0: they stay in the consuming thread.

        Args:
          seconds_per_record: each timed block's running time per record.
          shares: each block's share of the read + consumer time.
          cpu_shares: each block's CPU time over its running time.
          threads: the threads ``ReadOptions`` allows.
          spare_cpus: the CPUs this process may use beyond the consuming thread's.
        """
        if not self.moves_to_threads(seconds_per_record, shares):
            return 0
        if self.is_cpu_bound(statistics.median(cpu_shares)):
            threads = min(threads, spare_cpus)
            if threads == 1 and statistics.median(shares) > 1 - self.read_share:
                return 0  # one thread would only overlap the consumer's small share
        return max(0, threads)


READ_POLICY = ReadPolicy()
"""The read policy every reader uses."""
