"""``str(stats)``: the stats as a fixed-width text table, a header line and the diagnosis."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grainlite.stats.counters import SAMPLE_MEAN_GAP

if TYPE_CHECKING:
    from grainlite.stats.report import Stats


def duration(seconds: float) -> str:
    """``seconds`` in the unit that reads best: ``850 ns``, ``12.3 µs``, ``4.56 ms``, ``1.20 s``."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e9:.0f} ns"


def header(stats: Stats) -> str:
    """The first line: processes, wall time, elements, time to first element."""
    if stats.worker_count:
        processes = f"{stats.worker_count} worker process(es)"
    elif stats.api == "loader":
        processes = "in-process (worker_count=0)"
    else:
        processes = "in-process (no mp_prefetch)"
    first = stats.time_to_first_element
    first_text = (
        "no element yet"
        if first is None
        else f"first element after {duration(first)}" + _start_up(stats)
    )
    return (
        f"grainlite stats: {processes}, wall {duration(stats.wall_seconds)}, "
        f"{stats.elements_delivered} element(s) delivered, {first_text}"
    )


def _start_up(stats: Stats) -> str:
    """How worker start-up shows in the header: included in the first element."""
    if not stats.worker_count:
        return ""
    warm = stats.start_up_seconds
    first = stats.time_to_first_element or 0.0
    if warm is None:
        return " (made in this process; none from a worker yet)"
    if warm <= first:
        return " (worker start-up included)"
    return f" (made in this process), first from a worker after {duration(warm)}"


def render(stats: Stats) -> str:
    """The whole text: header, one row per stage, the buffers, the diagnosis."""
    titles = ("stage", "where", "per element", "share", "in", "out")
    rows = [
        (
            stage.name + (" *" if stage.sampled else ""),
            stage.where,
            duration(stage.seconds_per_element),
            f"{stage.share:.1%}",
            str(stage.elements_in),
            str(stage.elements_out),
        )
        for stage in stats.stages
    ]
    widths = [max(len(row[i]) for row in [titles, *rows]) for i in range(len(titles))]

    def line(cells: tuple[str, ...]) -> str:
        first = [cells[0].ljust(widths[0]), cells[1].ljust(widths[1])]
        rest = [cell.rjust(width) for cell, width in zip(cells[2:], widths[2:])]
        return "  ".join(first + rest).rstrip()

    lines = [header(stats), line(titles)] + [line(row) for row in rows]
    if stats.buffer is not None:
        buffer = stats.buffer
        lines.append(
            f"worker buffers: {buffer.size} element(s) each; {buffer.mean_waiting:.2f} finished "
            f"element(s) already waiting per send on average; workers blocked on a full buffer "
            f"{buffer.blocked_share:.1%} of their time"
        )
    lines.append(
        "share: of the workers' time for rows in workers, of the wall time otherwise"
        + (
            f"; * timed on a sample of elements (up to 1 in {SAMPLE_MEAN_GAP}), each weighted by "
            "the elements it stands for"
            if any(stage.sampled for stage in stats.stages)
            else ""
        )
    )
    lines.append(f"the consumer waited for data {stats.wait_share:.1%} of the time after start-up")
    lines.extend(stats.notes)
    lines.append(f"diagnosis: {stats.diagnosis}")
    return "\n".join(lines)
