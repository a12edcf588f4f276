"""``stats.timeline(path)``: the last seconds of every process's spans as a Chrome trace JSON.

With the ``grain.config`` option ``timeline_seconds`` set (environment variable
``GRAINLITE_TIMELINE_SECONDS``), each process of an iterator records its spans, no JAX needed:
the training process its ``grainlite next`` (and device transfers), each worker its read, each
transform by the name ``stats()`` shows, ``Batch`` and ``transport``. Workers send theirs with
their counters (:mod:`grainlite.engine.protocol`'s Stats paragraph), so a timeline holds what the
workers had reported when ``stats()`` was called. Like ``jax_profile_workers``, the option makes
the workers time every element, not a sample. All processes of the machine share the monotonic
clock the spans are taken on, so they line up on one time axis.

:func:`chrome_trace` writes the JSON object format of the Trace Event Format ("X" complete
events, times in microseconds, one process per track with its name in an "M" event), which
Perfetto and ``chrome://tracing`` open; :func:`grainlite.tools.timeline.draw_timeline` draws it
as a PNG with the colours of :data:`KIND_COLOURS`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

KIND_COLOURS = {
    "read": "#4e79a7",
    "transform": "#f28e2b",
    "batch": "#59a14f",
    "transport": "#e15759",
    "wait": "#9c9c9c",
    "device": "#b07aa1",
}
"""One colour per kind of stage (the ``kind`` column of :meth:`Stats.to_dict`'s rows, plus
``device`` for device prefetch transfers)."""


def kind_of(name: str) -> str:
    """The stage kind of a span name: ``read (...)``, ``Batch``, ``transport``, ``grainlite
    next`` (the consumer's wait), ``grainlite device_put``, else a transform."""
    if name.startswith("read (") or name == "read":
        return "read"
    if name == "Batch" or name.startswith("Batch ("):
        return "batch"
    if name == "transport":
        return "transport"
    if name == "grainlite next":
        return "wait"
    if name == "grainlite device_put":
        return "device"
    return "transform"


def collect(counters: Any, recorder: Any) -> list[tuple[str, int, list[Any]]]:
    """Every process's spans: ``(process name, pid, [(name, begin_ns, end_ns), ...])``, the
    training process first (its spans since ``counters`` started: the spans of two iterators
    used at the same time both show there), then each worker process by index."""
    processes: list[tuple[str, int, list[Any]]] = []
    if recorder is not None:  # the process's spans that end after this iterator started
        pid = os.getpid()
        since = counters.started_ns
        spans = [span for span in recorder.spans if span[2] >= since]
        processes.append((f"training process (pid {pid})", pid, spans))
    for (worker, pid), spans in sorted(counters.spans.items()):
        processes.append((f"grainlite worker {worker} (pid {pid})", pid, list(spans)))
    return processes


def chrome_trace(processes: list[tuple[str, int, list[Any]]], seconds: float) -> dict[str, Any]:
    """The Trace Event Format object of the spans that end in the last ``seconds``."""
    ends = [span[2] for _, _, spans in processes for span in spans]
    if not ends:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    newest = max(ends)
    cut = newest - int(seconds * 1e9)
    kept = [(n, p, [s for s in spans if s[2] >= cut]) for n, p, spans in processes]
    origin = min((s[1] for _, _, spans in kept for s in spans), default=cut)
    events: list[dict[str, Any]] = []
    for sort_index, (name, pid, spans) in enumerate(kept):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
        events.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": pid,
                "args": {"sort_index": sort_index},
            }
        )
        for span_name, begin, end in spans:
            events.append(
                {
                    "name": span_name,
                    "cat": kind_of(span_name),
                    "ph": "X",
                    "ts": (begin - origin) / 1e3,
                    "dur": max(0, end - begin) / 1e3,
                    "pid": pid,
                    "tid": pid,
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write(
    processes: list[tuple[str, int, list[Any]]], path: str | os.PathLike[str], seconds: float
) -> Path:
    """Writes :func:`chrome_trace` to ``path``; returns it."""
    target = Path(path)
    target.write_text(json.dumps(chrome_trace(processes, seconds)))
    return target
