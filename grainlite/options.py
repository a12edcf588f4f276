"""Options of the DataLoader: how each process reads, and how many processes there are."""

from __future__ import annotations

import logging
from dataclasses import dataclass

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
    time (reads and transforms). What is read, and in which order, is the same either way.
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
            "pass per_worker_buffer_size=N with N >= 1 to keep up to N finished elements ready "
            "per worker (0 is accepted and works as 1)."
        )
        self.per_worker_buffer_size = int_option(
            self.per_worker_buffer_size,
            0,
            wrong_type=f"MultiprocessingOptions per_worker_buffer_size must be an int, got "
            f"{{type}} {{value}}; {buffer_fix}",
            too_small=f"MultiprocessingOptions per_worker_buffer_size must be greater than or "
            f"equal to 0, got {{value}}; {buffer_fix}",
        )
