"""``draw_timeline``: a Chrome trace JSON of ``stats().timeline(path)`` drawn as a PNG.

One lane per process (the training process on top, then each worker), each span a bar coloured
by its stage kind (:data:`grainlite.stats.timeline.KIND_COLOURS`: read, transform, batch,
transport, the consumer's wait, device transfers), with a legend; time in seconds from the first
span. Nested spans (a DataLoader transform holds the Batch span of the record it made) are drawn
on top of each other, the inner one over the outer. matplotlib (the ``image`` extra) is imported
when drawing, with its Agg renderer: no display, no window, no change to pyplot's global state.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from grainlite._optional import require
from grainlite.stats.timeline import KIND_COLOURS


def draw_timeline(
    trace: str | os.PathLike[str], path: str | os.PathLike[str], *, width: float = 12.0
) -> Path:
    """Draws the Chrome trace JSON at ``trace`` (from ``stats().timeline``) into the PNG ``path``.

    Args:
      trace: the JSON file ``iterator.stats().timeline(...)`` wrote.
      path: where the PNG goes.
      width: the figure's width in inches (each lane is half an inch high).

    Returns:
      ``path`` as a Path.
    """
    figure_module = require("matplotlib.figure", "image", "draw_timeline")
    backend = require("matplotlib.backends.backend_agg", "image", "draw_timeline")
    patches = require("matplotlib.patches", "image", "draw_timeline")
    events: list[dict[str, Any]] = json.loads(Path(trace).read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    order = {
        e["pid"]: e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"
    }
    lanes = sorted(names, key=lambda pid: order.get(pid, pid))
    figure = figure_module.Figure(figsize=(width, 1.0 + 0.5 * max(1, len(lanes))))
    backend.FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    seen: set[str] = set()
    for lane, pid in enumerate(lanes):
        spans = [e for e in events if e.get("ph") == "X" and e["pid"] == pid]
        spans.sort(key=lambda e: -e["dur"])  # longest first: nested spans are drawn over them
        for kind in KIND_COLOURS:
            bars = [(e["ts"] / 1e6, e["dur"] / 1e6) for e in spans if e.get("cat") == kind]
            if bars:
                axes.broken_barh(bars, (lane - 0.4, 0.8), facecolors=KIND_COLOURS[kind])
                seen.add(kind)
    axes.set_yticks(range(len(lanes)), [names[pid] for pid in lanes])
    axes.set_ylim(len(lanes) - 0.5, -0.5)
    axes.set_xlabel("seconds")
    axes.legend(
        handles=[patches.Patch(color=c, label=k) for k, c in KIND_COLOURS.items() if k in seen],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize="small",
    )
    axes.set_title("grainlite timeline")
    figure.tight_layout()
    target = Path(path)
    figure.savefig(target, format="png")
    return target
