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


@dataclass(frozen=True, slots=True)
class ReadPolicy:
    """When reads leave the consuming thread for ``ReadOptions``' reader threads: the one rule of
    the DataLoader's reader (:mod:`grainlite.loader.reader`), the Dataset API's block reader
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
    """

    slow_read_s: float = 20e-6
    """Reads slower than this per record can gain from reader threads."""
    read_share: float = 0.25
    """... if they also take more than this share of the read + consumer time."""
    samples: int = 5
    """Blocks timed (after the first) before deciding."""
    max_block: int = 256
    """The most records one read asks of a source: a block never holds more, so the first
    elements come soon and a block's memory stays bounded."""
    cpu_bound_share: float = 0.5
    """Reads whose CPU time is more than this share of their running time keep a CPU busy."""
    tell_ahead: int = 4096
    """Records a reader tells its source it will read, in order, beyond those it computes keys
    for now, where the source takes the hint (``source.prefetch_keys(keys)``: an ArrayRecord source
    on ``s3://`` or ``gs://`` fetches the files those keys need into its cache). A hint never
    changes what is read or in which order."""

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
