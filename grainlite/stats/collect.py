"""The stats of a Dataset API iterator: the counters of every node in its tree.

Nodes that count carry a ``_stats_stage`` (a :class:`~grainlite.stats.counters.StageCounter`, or
an :class:`ElementTimer` for sampled element-wise nodes); ``to_iter_dataset``'s iterator and
``mp_prefetch``'s carry ``_stats_counters`` (a :class:`~grainlite.stats.counters.ParentCounters`:
the clock, and for ``mp_prefetch`` the workers' reports). Nodes without counters (a user's own
iterator, most experimental nodes) are walked through and left out of the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grainlite.stats.counters import (
    ENABLED,
    ParentCounters,
    SampleGaps,
    StageCounter,
    merge_stages,
)

if TYPE_CHECKING:
    from grainlite.stats.report import Stats

_NEVER = 1 << 62


class ElementTimer:
    """Sampled timing for an element-wise iterator (map, filter, random_map, map_with_index).

    The iterator counts down ``_countdown`` in its ``__next__`` and calls its timed variant when
    it reaches 0; :meth:`timed` adds the measured time and returns the next countdown.
    """

    __slots__ = ("counter", "dropped", "gap", "gaps")

    def __init__(self, name: str) -> None:
        self.counter = StageCounter(name, "transform", weighted=True)
        self.gaps = SampleGaps()
        self.gap = self.first()
        self.dropped = 0  # elements a filter rejected

    def first(self) -> int:
        """The first countdown (effectively never, with timing off)."""
        return self.gaps.next_gap() if ENABLED else _NEVER

    def timed(self, ns: int) -> int:
        """One timed call took ``ns``; returns the countdown to the next timed call.

        The call stands for the ``gap`` calls since the previous timed one: weighted by it.
        """
        counter = self.counter
        counter.ns += ns * self.gap
        counter.timed += 1
        counter.calls += self.gap
        self.gap = self.gaps.next_gap()
        return self.gap

    def snapshot(self, countdown: int) -> dict[str, Any]:
        """The stage, counting the calls made since the last timed one."""
        counter = self.counter
        calls = counter.calls + (self.gap - countdown if countdown < _NEVER else 0)
        out = calls
        snapshot = counter.snapshot()
        snapshot["in"], snapshot["out"] = out + self.dropped, out
        snapshot["sampled"] = True
        return snapshot


def stage_snapshot(iterator: Any) -> dict[str, Any] | None:
    """The stage of one iterator, or None if it does not count."""
    stage = getattr(iterator, "_stats_stage", None)
    if stage is None:
        return None
    if isinstance(stage, ElementTimer):
        return stage.snapshot(iterator._countdown)
    snapshot: dict[str, Any] = stage.snapshot()
    return snapshot


def iterator_rows(iterator: Any) -> list[dict[str, Any]]:
    """The rows of one iterator: its ``_stats_rows()`` where it has several, else its stage."""
    rows = getattr(iterator, "_stats_rows", None)
    if rows is not None:
        return list(rows())
    own = stage_snapshot(iterator)
    return [] if own is None else [own]


def _children(iterator: Any) -> tuple[Any, ...]:
    return tuple(getattr(iterator, "_parents", ()) or ())


def stage_snapshots(iterator: Any) -> list[dict[str, Any]]:
    """Every counting node below and including ``iterator``, sources first (for a worker)."""
    stages: list[dict[str, Any]] = []
    for child in _children(iterator):
        stages += stage_snapshots(child)
    return stages + iterator_rows(iterator)


def unique_names(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows, a second node of the same name called ``name (2)`` (and so on), so that rows
    are added up by name only across workers, never across nodes."""
    seen: dict[str, int] = {}
    result = []
    for row in rows:
        count = seen[row["name"]] = seen.get(row["name"], 0) + 1
        result.append(row if count == 1 else {**row, "name": f"{row['name']} ({count})"})
    return result


def _split(iterator: Any) -> tuple[list[dict[str, Any]], Any]:
    """The stages above the first node with its own clock, and that node (or None)."""
    if getattr(iterator, "_stats_counters", None) is not None:
        return [], iterator
    below: list[dict[str, Any]] = []
    clocked = None
    for child in _children(iterator):
        stages, found = _split(child)
        below += stages
        clocked = clocked or found
    return below + iterator_rows(iterator), clocked


def dataset_stats(iterator: Any) -> Stats:
    """The stats of a Dataset API iterator tree (see the module docstring)."""
    from grainlite.stats.report import build  # on first stats(): every Dataset node imports this

    above, clocked = _split(iterator)
    if clocked is None:
        counters = ParentCounters(0)
        local = above
    else:
        counters = clocked._stats_counters
        local = above if counters.worker_count else [*iterator_rows(clocked), *above]
    delivered = local[-1]["out"] if local else counters.delivered
    return build(counters, unique_names(local), delivered=delivered, api="dataset")


class IteratorStats:
    """A Dataset pipeline's counters in a worker process (the engine's ``stats=`` object):
    the worker's iterator tree, plus the totals of the trees a restart replaced."""

    def __init__(self) -> None:
        self.iterator: Any = None
        self._retired: list[dict[str, Any]] = []

    def attach(self, iterator: Any) -> None:
        """Counts ``iterator`` from now on; the last one's numbers are kept."""
        if self.iterator is not None:
            retired = unique_names(stage_snapshots(self.iterator))
            self._retired = merge_stages([self._retired, retired])
        self.iterator = iterator

    def stage_snapshots(self) -> list[dict[str, Any]]:
        """The worker's stages (cumulative over restarts)."""
        current = stage_snapshots(self.iterator) if self.iterator is not None else []
        return merge_stages([self._retired, unique_names(current)])


def callable_name(fn: Any) -> str:
    """A transform's table name: the class of a bound method's object (``Decode`` for
    ``Decode().map``), else the function's name."""
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type) and type(owner).__module__ != "builtins":
        return type(owner).__name__
    return str(getattr(fn, "__name__", type(fn).__name__))
