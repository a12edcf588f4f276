"""Sampled timing of the DataLoader's push chain (:mod:`grainlite.loader.stages`).

Most elements go through the chain untouched. For a sample of them
(:class:`~grainlite.stats.counters.SampleGaps`), :meth:`ChainTimer.timed_push` points each stage's
``next`` at a probe in front of the following stage for the length of that one push, then back. A
probe times the stage it fronts and subtracts what the stages after it took, so each stage gets its
own (exclusive) time, even where a FlatMap fans out, a Filter drops or a Batch holds the element;
the time is weighted by the records the sample stands for (the gap since the previous one).

Element counts are exact and cost nothing per element: a Map's output count is its input count;
Filter, FlatMap, Batch and custom operations count only what changes the number (drops, outputs,
batches).
"""

from __future__ import annotations

import sys
from typing import Any

from grainlite.stats.counters import ENABLED, SampleGaps, StageCounter, clock
from grainlite.stats.tracing import span

# Stage attributes that hold the count which makes a stage's output differ from its input.
_COUNT_ATTRIBUTE = {"filter": "dropped", "flat_map": "produced", "operation": "produced"}


class _Probe:
    """Times one push of the stage it fronts, less the time of the stages after it.

    ``shared`` is ``[time of the stages after, weight of this sample]``, one list for the chain.
    (Stages catch their transforms' exceptions; an interrupt here only loses this sample.)
    """

    __slots__ = ("counter", "shared", "stage")

    def __init__(self, stage: Any, counter: StageCounter, shared: list[int]) -> None:
        self.stage, self.counter, self.shared = stage, counter, shared

    def push(self, data: Any, rng: Any, state: Any) -> None:
        shared = self.shared
        saved, shared[0] = shared[0], 0
        with span(self.counter.name):  # a profiler span while a trace records
            begin = clock()
            self.stage.push(data, rng, state)
            elapsed = clock() - begin
        counter = self.counter
        counter.ns += (elapsed - shared[0]) * shared[1]
        counter.timed += 1
        shared[0] = saved + elapsed

    def flush(self, state: Any) -> None:
        self.stage.flush(state)


def operation_names(operations: tuple[Any, ...]) -> list[str]:
    """Table names: the class name, with ``operations[i]`` where two share a class name."""
    names = [type(op).__name__ for op in operations]
    return [
        f"{name} (operations[{i}])" if names.count(name) > 1 else name
        for i, name in enumerate(names)
    ]


class ChainTimer:
    """The counters of one process's DataLoader pipeline, kept across restarts of its chain.

    Args:
      kinds: each operation's kind (``map``, ``filter``, ``batch``, ...), in order.
      names: each operation's name in the table.
      source_name: the data source's class name, for the read stage.
    """

    def __init__(self, kinds: list[str], names: list[str], source_name: str) -> None:
        self.kinds = kinds
        self.read = StageCounter(f"read ({source_name})", "read")
        self.stages = [
            StageCounter(name, "batch" if kind == "batch" else "transform", weighted=True)
            for kind, name in zip(kinds, names)
        ]
        self._counts = [0] * len(kinds)  # drops/outputs/batches of chains already retired
        self._chain: list[Any] = []
        self._links: list[tuple[Any, Any]] = []
        self._restore: list[tuple[Any, Any]] = []
        self._first: Any = None
        self._gaps = SampleGaps()
        self._shared = [0, 1]  # the probes' [time of later stages, weight of this sample]
        self._pushed = 0  # records pushed into chains already retired
        self.origin = self.position = 0  # this chain's first position; set at each delivery

    def pushed(self) -> int:
        """Records pushed into the chain as of the last element delivered."""
        return self._pushed + self.position - self.origin

    def attach(self, head: Any, base: int) -> None:
        """Starts timing a newly built chain (a restart builds one) that reads from position
        ``base``; the counts of the last chain carry on."""
        self._retire()
        self._pushed += self.position - self.origin
        self.origin = self.position = base
        chain = []
        stage = head
        for _ in self.kinds:
            chain.append(stage)
            stage = stage.next
        self._chain = chain
        probes = [_Probe(s, c, self._shared) for s, c in zip(chain, self.stages)]
        self._first = probes[0] if probes else None
        self._links = list(zip(chain[:-1], probes[1:]))
        self._restore = [(s, s.next) for s in chain[:-1]]

    def _retire(self) -> None:
        for i, stage in enumerate(self._chain):
            self._counts[i] += self._stage_count(i, stage)
        self._chain = []

    def _stage_count(self, i: int, stage: Any) -> int:
        if self.kinds[i] == "batch":
            return int(stage.batches)
        attribute = _COUNT_ATTRIBUTE.get(self.kinds[i])
        return int(getattr(stage, attribute)) if attribute else 0

    def first_sample(self, count: int) -> int:
        """The position of the first element to time after ``count`` (never, with timing off)."""
        if not ENABLED or self._first is None:
            return sys.maxsize
        self._shared[1] = gap = self._gaps.next_gap()
        return count + gap

    def timed_push(self, data: Any, rng: Any, count: int) -> int:
        """Pushes one element through the chain with every stage timed; returns the next sample.

        The element stands for the gap since the previous sample: its times count that often.
        """
        for stage, probe in self._links:
            stage.next = probe
        try:
            self._first.push(data, rng, count)
        finally:
            for stage, following in self._restore:
                stage.next = following
        self._shared[1] = gap = self._gaps.next_gap()
        return count + gap

    def stage_snapshots(self) -> list[dict[str, Any]]:
        """The read stage and every operation, with exact counts and estimated times."""
        snapshots = [self.read.snapshot()]
        elements = self.pushed()
        for i, counter in enumerate(self.stages):
            kind = self.kinds[i]
            changed = self._counts[i]
            if i < len(self._chain):
                changed += self._stage_count(i, self._chain[i])
            counter.calls = counter.elements_in = elements
            if kind == "filter":
                elements -= changed
            elif kind in ("flat_map", "operation", "batch"):
                elements = changed
            counter.elements_out = elements
            snapshots.append(counter.snapshot())
        return snapshots
