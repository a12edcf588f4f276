"""The object ``iterator.stats()`` returns: per-stage numbers, a table, JSON, a diagnosis.

Where a stage runs decides what its share is of: a stage in worker processes takes a share of
the workers' time (all workers together), a stage in this process (``worker_count=0``, or the
parent's side of the transport) a share of the wall time since the first ``next()``. The
consumer's wait is the time ``next()`` was blocked on workers; with no workers every ``next()``
runs the pipeline itself, so the wait is the pipeline's own (estimated) time.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grainlite.stats.counters import ParentCounters, merge_stages


@dataclass(frozen=True)
class StageStats:
    """One stage of the table.

    Attributes:
      name: the stage (``"read (ArrayRecordDataSource)"``, a transform's class name, ``"Batch"``,
        ``"transport"``, ``"wait for data"``).
      kind: ``read``, ``transform``, ``batch``, ``transport`` or ``wait``.
      where: ``workers``, ``in-process``, ``parent`` or ``consumer``.
      seconds: total time (an estimate scaled from the timed sample where ``sampled``).
      share: ``seconds`` over the workers' total time (``where == "workers"``) or the wall time.
      elements_in: elements that entered the stage.
      elements_out: elements that left it (a Batch turns many into one).
      sampled: True if only a sample of its calls was timed.
    """

    name: str
    kind: str
    where: str
    seconds: float
    share: float
    elements_in: int
    elements_out: int
    sampled: bool = False

    @property
    def seconds_per_element(self) -> float:
        """``seconds`` per element that entered (0 before any did)."""
        return self.seconds / self.elements_in if self.elements_in else 0.0


@dataclass(frozen=True)
class BufferStats:
    """The workers' output buffers: which side waits for the other.

    Attributes:
      size: elements each worker may have finished and not yet taken (``worker_buffer_size``).
      mean_waiting: on average, how many finished elements were already waiting when a worker
        sent one (near ``size``: the consumer is behind; near 0: the consumer takes them at once).
      blocked_share: the share of the workers' time spent blocked on a full buffer.
    """

    size: int
    mean_waiting: float
    blocked_share: float


@dataclass(frozen=True)
class Stats:
    """Where an iterator's time went: ``print(iterator.stats())`` for a table.

    Attributes:
      stages: one row per stage, in the order elements flow.
      worker_count: worker processes (0: the pipeline runs in the consumer's process).
      wall_seconds: from the first ``next()`` to now (or to the end of the stream).
      wait_seconds: how long the consumer was blocked in ``next()`` waiting for data.
      elements_delivered: elements ``next()`` returned.
      time_to_first_element: seconds from the first ``next()`` to the first element, worker
        start-up included (None before it).
      buffer: the workers' buffers (None without workers).
      usable_cpus: the CPUs this process may use, for the diagnosis.
      api: ``"loader"`` (a DataLoader) or ``"dataset"`` (a Dataset API iterator): how the
        diagnosis spells the options.
      notes: extra lines for the table.
      spans: the timeline's spans of every process (``timeline_seconds``; empty when off), for
        :meth:`timeline`.
      start_up_seconds: seconds from the first ``next()`` until the stream was warm: until the
        first element made by a worker process arrived (every element is, so it equals
        ``time_to_first_element`` once that is known). None: the same as
        ``time_to_first_element``.
    """

    stages: list[StageStats]
    worker_count: int
    wall_seconds: float
    wait_seconds: float
    elements_delivered: int
    time_to_first_element: float | None
    buffer: BufferStats | None
    usable_cpus: int
    api: str = "loader"
    notes: list[str] = field(default_factory=list)
    start_up_seconds: float | None = None
    spans: list[Any] = field(default_factory=list, repr=False, compare=False)

    @property
    def wait_share(self) -> float:
        """The share of the time after start-up that the consumer spent waiting for data
        (start-up, worker processes included, is left out of both: it is
        ``start_up_seconds``, or ``time_to_first_element``)."""
        first = self.start_up_seconds or self.time_to_first_element or 0.0
        after = self.wall_seconds - first
        return max(0.0, self.wait_seconds - first) / after if after > 0 else 0.0

    @property
    def diagnosis(self) -> str:
        """One line: the bottleneck and the option to change (:mod:`grainlite.stats.diagnosis`)."""
        from grainlite.stats.diagnosis import diagnose

        return diagnose(self)

    def to_dict(self) -> dict[str, Any]:
        """Every number, as JSON-able values (``json.dumps(stats.to_dict())`` works)."""
        result = asdict(self)
        del result["spans"]
        for row, stage in zip(result["stages"], self.stages):
            row["seconds_per_element"] = stage.seconds_per_element
        result["wait_share"] = self.wait_share
        result["diagnosis"] = self.diagnosis
        return result

    def timeline(self, path: str | os.PathLike[str], seconds: float | None = None) -> Path:
        """Writes the last ``seconds`` (default: the ``timeline_seconds`` option) of every
        process's spans to ``path`` as a Chrome trace JSON (Perfetto, ``chrome://tracing``);
        returns the path. See :mod:`grainlite.stats.timeline`.

        Raises:
          GrainliteValueError: the timeline was not recording (the option is off).
        """
        from grainlite.stats import timeline, tracing

        if not self.spans:
            from grainlite.errors import GrainliteValueError

            raise GrainliteValueError(
                "stats().timeline() has no spans: the timeline records only with the "
                "grain.config option timeline_seconds set (e.g. "
                "grain.config.update('timeline_seconds', 60), or "
                "GRAINLITE_TIMELINE_SECONDS=60) before the iterator starts."
            )
        return timeline.write(self.spans, path, seconds or tracing.timeline_seconds() or 60.0)

    def __str__(self) -> str:
        from grainlite.stats.table import render

        return render(self)


def _rows(stages: list[dict[str, Any]], where: str, total: float) -> list[StageStats]:
    timed = sum(s["seconds"] for s in stages)
    if total > 0 and timed > total:  # sampled estimates overshot the time there was: scale down
        stages = [{**s, "seconds": s["seconds"] * total / timed} for s in stages]
    return [
        StageStats(
            name=s["name"],
            kind=s["kind"],
            where=where,
            seconds=s["seconds"],
            share=s["seconds"] / total if total > 0 else 0.0,
            elements_in=s["in"],
            elements_out=s["out"],
            sampled=s["sampled"],
        )
        for s in stages
    ]


def build(
    parent: ParentCounters,
    local_stages: list[dict[str, Any]],
    usable_cpus: int | None = None,
    delivered: int | None = None,
    api: str = "loader",
) -> Stats:
    """The stats of an iterator from its counters.

    Args:
      parent: the consumer's counters (and the workers' latest snapshots).
      local_stages: snapshots of the stages that run in this process.
      usable_cpus: for the diagnosis; default :func:`~grainlite.cpus.usable_cpu_count`.
      delivered: elements the iterator returned, where ``parent`` does not count them.
      api: ``"loader"`` or ``"dataset"`` (see :attr:`Stats.api`).
    """
    if usable_cpus is None:
        from grainlite.cpus import usable_cpu_count

        usable_cpus = usable_cpu_count()
    wall = parent.wall_seconds()
    rows: list[StageStats] = []
    buffer = None
    workers = list(parent.workers.values())
    if parent.worker_count and workers:
        worker_time = sum(w["wall"] for w in workers)
        stages = merge_stages([w["stages"] for w in workers])
        sent = sum(w["sent"] for w in workers)
        stages.append(
            {
                "name": "transport",
                "kind": "transport",
                "seconds": sum(w["encode"] for w in workers),
                "in": sent,
                "out": sent,
                "sampled": False,
            }
        )
        rows += _rows(stages, "workers", worker_time)
        buffer = BufferStats(
            size=max(w["buffer"] for w in workers),
            mean_waiting=sum(w["in_flight"] for w in workers) / sent if sent else 0.0,
            blocked_share=(
                sum(w["blocked"] for w in workers) / worker_time if worker_time > 0 else 0.0
            ),
        )
    rows += _rows(local_stages, "in-process", wall)
    if delivered is None:
        delivered = parent.delivered
    if parent.worker_count:
        transport = {
            "name": "transport",
            "kind": "transport",
            "seconds": parent.transport_ns / 1e9,
            "in": parent.delivered,
            "out": parent.delivered,
            "sampled": False,
        }
        rows += _rows([transport], "parent", wall)
        # next() blocked on a worker, turned its message into an element, ran the nodes above.
        wait = (parent.wait_ns + parent.transport_ns) / 1e9
        wait += sum(row.seconds for row in rows if row.where == "in-process")
    else:  # every next() ran the pipeline: the wait is the pipeline's time
        wait = sum(row.seconds for row in rows)
    rows.append(
        StageStats(
            "wait for data",
            "wait",
            "consumer",
            wait,
            wait / wall if wall > 0 else 0.0,
            delivered,
            delivered,
        )
    )
    from grainlite.stats import timeline, tracing

    recorder = tracing.recorder()
    spans = timeline.collect(parent, recorder) if recorder is not None or parent.spans else []
    return Stats(
        stages=rows,
        worker_count=parent.worker_count,
        wall_seconds=wall,
        wait_seconds=wait,
        elements_delivered=delivered,
        time_to_first_element=parent.first_seconds(),
        buffer=buffer,
        usable_cpus=usable_cpus,
        api=api,
        start_up_seconds=parent.warm_seconds(),
        spans=spans,
    )
