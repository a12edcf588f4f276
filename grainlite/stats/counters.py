"""The always-on counters: cheap enough for the per-element path, JSON-able when read.

Counting is exact; timing is exact where the code already works in chunks (a reader's block read,
a batch's stacking, one element's trip from a worker to the parent) and sampled where it would cost
two clock reads per element and stage: the DataLoader's transform chain and the Dataset API's
element-wise iterators time one element now and then (:class:`SampleGaps`: densely for the first
elements, then about one in 8, one in 32, and one in :data:`SAMPLE_MEAN_GAP`; gaps drawn from a
fixed pseudo-random sequence, so a sample never locks onto a batch boundary). Each timed element
stands for the elements since the previous one: its time is weighted by that gap, so the estimate
stays fair when the sampling rate or the cost per element changes. ``GRAINLITE_STATS=0`` in the
environment turns the timing off (the benchmark of its overhead compares both).
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any

from grainlite.stats import tracing

SAMPLE_MEAN_GAP = 64
"""In the long run, about one element in this many is timed in sampled stages."""

# (how many gaps, their mean) before the steady SAMPLE_MEAN_GAP: dense at first, so short runs
# get numbers too (about 5,000 elements in all).
_SCHEDULE = ((16, 2), (112, 8), (128, 32))
_BLOCK = 1024  # steady gaps drawn at a time

ENABLED = os.environ.get("GRAINLITE_STATS", "1") not in ("0", "off", "false")
"""Timing on (the default); read once at import, in each process."""

REPORT_EVERY_S = 0.5
"""A worker reports its counters after an element once this long has passed since the last."""

REPORT_WHEN_BLOCKED_S = 0.1
"""... or this long, when it has just waited on a full buffer (it is idle then: reporting is free,
and the parent learns early that the consumer is the slow side)."""

clock = time.perf_counter_ns


class SampleGaps:
    """Deterministic gaps between timed elements, never periodic in a batch size: 16 gaps of mean
    2, 112 of mean 8, 128 of mean 32, then mean :data:`SAMPLE_MEAN_GAP` (each gap uniform in
    1 .. 2 * mean - 1, from a fixed seed). Drawn in blocks: :meth:`next_gap` is a list pop."""

    __slots__ = ("_pending", "_random")

    def __init__(self) -> None:
        import numpy as np  # here, not at import: the worker engine imports this module

        self._random = np.random.default_rng(12345)
        self._pending: list[int] = []
        for count, mean in reversed(_SCHEDULE):  # popped from the end: the first block last
            self._pending += self._draw(count, mean)

    def _draw(self, count: int, mean: int) -> list[int]:
        gaps: list[int] = self._random.integers(1, 2 * mean, size=count).tolist()
        return gaps[::-1]

    def next_gap(self) -> int:
        """How many elements until the next timed one (1 in a worker that puts its spans in
        ``jax.profiler`` traces: every element is timed, see :mod:`grainlite.stats.tracing`)."""
        if tracing.EVERY_ELEMENT:
            return 1
        pending = self._pending
        if not pending:
            pending += self._draw(_BLOCK, SAMPLE_MEAN_GAP)
        return pending.pop()


class StageCounter:
    """One stage's counts and time, in the process that runs it.

    Attributes:
      name: the stage's name in the table (``"Decode"``, ``"read (ArrayRecordDataSource)"``).
      kind: ``read``, ``transform``, ``batch``, ``transport`` or ``wait``.
      ns: nanoseconds measured over ``timed`` calls; for a sampled stage (``weighted``), each
        timed call's time multiplied by the calls it stands for: then ``ns`` is the estimate.
      timed: how many calls were timed.
      calls: how many calls there were (timed or not).
      elements_in: elements that entered.
      elements_out: elements that left.
    """

    __slots__ = ("calls", "elements_in", "elements_out", "kind", "name", "ns", "timed", "weighted")

    def __init__(self, name: str, kind: str, weighted: bool = False) -> None:
        self.name, self.kind, self.weighted = name, kind, weighted
        self.ns = self.timed = self.calls = self.elements_in = self.elements_out = 0

    def add(self, ns: int, elements_in: int, elements_out: int) -> None:
        """One timed call that took ``ns`` and moved these elements."""
        self.ns += ns
        self.timed += 1
        self.calls += 1
        self.elements_in += elements_in
        self.elements_out += elements_out

    def seconds(self) -> float:
        """The (estimated) total time of all calls, in seconds."""
        if self.weighted or not self.timed:
            return self.ns / 1e9
        return self.ns * (self.calls / self.timed) / 1e9

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy: ``name``, ``kind``, ``seconds``, ``in``, ``out``, ``sampled``."""
        return {
            "name": self.name,
            "kind": self.kind,
            "seconds": self.seconds(),
            "in": self.elements_in,
            "out": self.elements_out,
            "sampled": self.weighted or self.timed < self.calls,
        }


def merge_stages(groups: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Adds up stage snapshots of the same name (e.g. from every worker), first-seen order."""
    merged: dict[str, dict[str, Any]] = {}
    for stages in groups:
        for stage in stages:
            total = merged.get(stage["name"])
            if total is None:
                merged[stage["name"]] = dict(stage)
            else:
                total["seconds"] += stage["seconds"]
                total["in"] += stage["in"]
                total["out"] += stage["out"]
                total["sampled"] = total["sampled"] or stage["sampled"]
    return list(merged.values())


class WorkerCounters:
    """One worker process's view: what it spends outside the pipeline, and its buffer.

    Attributes:
      started_ns: when production began (the worker's own clock).
      encode_ns: time putting elements into shared memory and the channel (transport).
      blocked_ns: time waiting for a credit: the buffer was full, the consumer is the slow side.
      sent: elements sent.
      in_flight: the sum, over sends, of elements already sent and not yet taken (occupancy).
      buffer: the buffer size (credits) this worker runs with.
      pipeline: an object whose ``stage_snapshots()`` lists the pipeline's stages, or None.
      profiler_port: the port of the worker's ``jax.profiler`` server (0: none; see
        :mod:`grainlite.stats.tracing`), reported so the parent registers the worker.
    """

    __slots__ = (
        "blocked_ns",
        "buffer",
        "encode_ns",
        "in_flight",
        "pipeline",
        "profiler_port",
        "sent",
        "started_ns",
    )

    def __init__(self, buffer: int) -> None:
        self.started_ns = clock()
        self.encode_ns = self.blocked_ns = self.sent = self.in_flight = 0
        self.buffer = buffer
        self.pipeline: Any = None
        self.profiler_port = 0  # the worker's jax.profiler server (0: none)

    def snapshot(self) -> dict[str, Any]:
        """JSON-able cumulative numbers, sent to the parent now and then (see the protocol)."""
        stages = self.pipeline.stage_snapshots() if self.pipeline is not None else []
        return {
            "stages": stages,
            "wall": (clock() - self.started_ns) / 1e9,
            "encode": self.encode_ns / 1e9,
            "blocked": self.blocked_ns / 1e9,
            "sent": self.sent,
            "in_flight": self.in_flight,
            "buffer": self.buffer,
            "profiler_port": self.profiler_port,
            **_new_spans(),
        }


def _new_spans() -> dict[str, Any]:
    """``{"spans": [...]}``: the timeline's spans recorded since the last report, if it records."""
    recorder = tracing.recorder()
    return {"spans": recorder.drain()} if recorder is not None else {}


class ParentCounters:
    """The consumer's side, kept by an iterator across restarts of its stream.

    Attributes:
      started_ns: when the first ``next()`` started (0: not yet).
      first_ns: when the first element was returned (0: not yet).
      warm_ns: when the first element made by a worker process was returned (0: not yet, or no
        workers); every element of a worker stream is made by a worker, so it equals ``first_ns``
        there.
      ended_ns: when the stream ended or was closed (0: still running).
      wait_ns: time ``next()`` spent blocked on workers (worker streams only).
      transport_ns: time turning worker messages into elements (shared memory mapping, unpickling).
      delivered: elements returned.
      workers: the latest snapshot of each worker (cumulative numbers).
      worker_count: how many worker processes (0: in this process).
    """

    __slots__ = (
        "delivered",
        "ended_ns",
        "first_ns",
        "spans",
        "started_ns",
        "transport_ns",
        "wait_ns",
        "warm_ns",
        "worker_count",
        "workers",
    )

    def __init__(self, worker_count: int = 0) -> None:
        self.started_ns = self.first_ns = self.ended_ns = self.warm_ns = 0
        self.wait_ns = self.transport_ns = self.delivered = 0
        self.workers: dict[int, dict[str, Any]] = {}
        self.worker_count = worker_count
        self.spans: dict[tuple[int, int], collections.deque[Any]] = {}  # (worker, pid) -> spans

    def keep_spans(self, worker: int, pid: int, spans: list[Any]) -> None:
        """Keeps a worker's timeline spans (the newest :data:`~grainlite.stats.tracing.
        SPAN_LIMIT` per worker process)."""
        kept = self.spans.get((worker, pid))
        if kept is None:
            kept = self.spans[(worker, pid)] = collections.deque(maxlen=tracing.SPAN_LIMIT)
        kept.extend(tuple(span) for span in spans)

    def start(self) -> None:
        """Marks the start of iteration (worker start-up counts from here); idempotent."""
        if not self.started_ns:
            self.started_ns = clock()
        self.ended_ns = 0

    def first_element(self) -> None:
        """Marks the first element returned; idempotent."""
        if not self.first_ns:
            self.first_ns = clock()

    def warm(self) -> None:
        """Marks the first element made by a worker returned (and the first element); idempotent."""
        if not self.warm_ns:
            self.warm_ns = clock()
        if not self.first_ns:
            self.first_ns = self.warm_ns

    def warm_seconds(self) -> float | None:
        """Seconds from the first ``next()`` to the first element made by a worker, or None."""
        return (self.warm_ns - self.started_ns) / 1e9 if self.warm_ns else None

    def end(self) -> None:
        """Marks the end of iteration: wall time stops growing."""
        if self.started_ns and not self.ended_ns:
            self.ended_ns = clock()

    def wall_seconds(self) -> float:
        """Seconds from the first ``next()`` to now (or to the end)."""
        if not self.started_ns:
            return 0.0
        return ((self.ended_ns or clock()) - self.started_ns) / 1e9

    def first_seconds(self) -> float | None:
        """Seconds from the first ``next()`` to the first element, or None before it."""
        return (self.first_ns - self.started_ns) / 1e9 if self.first_ns else None
