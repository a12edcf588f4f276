"""``DataLoaderIterator.stats()``: the loader's counters turned into a :class:`Stats`."""

from __future__ import annotations

from typing import Any

from grainlite.stats.counters import ParentCounters
from grainlite.stats.report import Stats, build


def delivered_in_process(stages: list[dict[str, Any]]) -> int:
    """Elements a ``worker_count=0`` pipeline gave out: the last stage's output count."""
    return int(stages[-1]["out"]) if stages else 0


def loader_stats(counters: ParentCounters, timer: Any) -> Stats:
    """The stats of a DataLoader iterator.

    Args:
      counters: the iterator's own counters (workers' reports included).
      timer: the in-process pipeline's :class:`~grainlite.stats.chain.ChainTimer`, or None
        (worker processes, or nothing read yet).
    """
    local: list[dict[str, Any]] = []
    if timer is not None and not counters.worker_count:
        local = timer.stage_snapshots()
        counters.delivered = delivered_in_process(local[1:]) if len(local) > 1 else 0
        if len(local) == 1:  # no operations: every record read and pushed is delivered
            counters.delivered = timer.pushed()
    return build(counters, local)
