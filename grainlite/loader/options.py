"""Options of the DataLoader: how each process reads, and how many processes there are."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from grainlite.errors import GrainliteTypeError, GrainliteValueError

_log = logging.getLogger("grainlite")


def _check_count(name: str, value: object) -> None:
    """Raises unless ``value`` is an int >= 0 (0 switches the reader threads off)."""
    fix = f"pass {name}=N with N >= 0 (0 reads in the consuming thread, without reader threads)."
    if isinstance(value, bool) or not isinstance(value, int):
        raise GrainliteTypeError(
            f"ReadOptions.{name} must be an int, got {type(value).__name__} {value!r}; {fix}"
        )
    if value < 0:
        raise GrainliteValueError(f"{name} must be non-negative, got {value}; {fix}")


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
        _check_count("num_threads", self.num_threads)
        _check_count("prefetch_buffer_size", self.prefetch_buffer_size)
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
    most ``per_worker_buffer_size`` finished elements ready for the parent.
    """

    num_workers: int = 0
    per_worker_buffer_size: int = 1
    enable_profiling: bool = False
