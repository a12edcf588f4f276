"""Grain's ``pick_performance_config``: worker count and read buffer from a RAM budget.

It reads ``samples_to_check`` elements of the dataset in the calling process (as Grain does: the
point is to look at them, not to train on them), takes their mean size -- the ``nbytes`` of every
numpy leaf, ``sys.getsizeof`` of any other leaf -- and fits the rest into ``ram_budget_mb``
(MiB):

* ``num_workers``: as many elements as the budget holds, at most ``max_workers`` (default: the
  machine's CPU count, ``os.cpu_count()``); 0 when one element is bigger than the budget;
* ``per_worker_buffer_size``: 1;
* ``read_options``: 16 threads and a read-ahead of as many elements as the budget holds, at most
  ``max_buffer_size`` (default 1000).

The numbers are Grain 0.2.18's, so a config picked for a Grain pipeline is the same here.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import numpy as np

from grainlite.checks import int_option
from grainlite.errors import GrainliteTypeError, shown
from grainlite.options import MultiprocessingOptions, ReadOptions
from grainlite.tree import leaves_with_paths

_MIB = 1024 * 1024
_DEFAULT_MAX_BUFFER = 1000
_READ_THREADS = 16


@dataclasses.dataclass
class PerformanceConfig:
    """The options ``pick_performance_config`` chose (either may be None when not chosen)."""

    multiprocessing_options: MultiprocessingOptions | None = None
    read_options: ReadOptions | None = None


def _count(name: str, value: object, minimum: int) -> int:
    return int_option(
        value,
        minimum,
        f"pick_performance_config {name} must be an int (got {{value}} of type {{type}}).",
        f"pick_performance_config {name} must be >= {minimum} (got {{value}}).",
    )


def _leaf_bytes(leaf: Any) -> int:
    if isinstance(leaf, np.ndarray):
        return int(leaf.nbytes)
    return sys.getsizeof(leaf)


def _mean_element_bytes(ds: Any, samples: int) -> float:
    iterator = iter(ds)
    sizes: list[int] = []
    try:
        for _ in range(samples):
            try:
                element = next(iterator)
            except StopIteration:
                break
            sizes.append(sum(_leaf_bytes(leaf) for _, leaf in leaves_with_paths(element)))
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
    return sum(sizes) / len(sizes) if sizes else 0.0


def pick_performance_config(
    ds: Any,
    *,
    ram_budget_mb: int | None,
    max_workers: int | None,
    max_buffer_size: int | None,
    samples_to_check: int = 5,
) -> PerformanceConfig:
    """Options for ``mp_prefetch`` and reads that keep ``ram_budget_mb`` MiB of elements in flight.

    Reads ``samples_to_check`` elements of ``ds`` to measure them (module docstring has the rule).
    """
    if ram_budget_mb is None or isinstance(ram_budget_mb, bool):
        raise GrainliteTypeError(
            f"pick_performance_config needs ram_budget_mb, the megabytes (MiB) of elements it may "
            f"keep in flight (got {shown(ram_budget_mb)}); pass an int, e.g. ram_budget_mb=1024."
        )
    budget = _count("ram_budget_mb", ram_budget_mb, 0) * _MIB
    samples = _count("samples_to_check", samples_to_check, 1)
    workers_cap = (
        os.cpu_count() or 1 if max_workers is None else _count("max_workers", max_workers, 0)
    )
    buffer_cap = (
        _DEFAULT_MAX_BUFFER
        if max_buffer_size is None
        else _count("max_buffer_size", max_buffer_size, 0)
    )
    element_bytes = _mean_element_bytes(ds, samples)
    fits = int(budget // element_bytes) if element_bytes > 0 else sys.maxsize
    return PerformanceConfig(
        multiprocessing_options=MultiprocessingOptions(
            num_workers=min(workers_cap, fits), per_worker_buffer_size=1
        ),
        read_options=ReadOptions(
            num_threads=_READ_THREADS, prefetch_buffer_size=min(buffer_cap, fits)
        ),
    )
