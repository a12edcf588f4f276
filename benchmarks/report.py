"""Medians over repeats, the Markdown tables, the target checks and the docs page update."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.workloads import WORKLOADS, configs_for

START, END = "<!-- results:start -->", "<!-- results:end -->"
METRICS = (
    "records_per_s",
    "batches_per_s",
    "steady_records_per_s",
    "time_to_first_batch_s",
    "peak_pss_mb",
    "peak_rss_mb",
    "cpu_us_per_record",
)


def medians(runs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(workload, config) -> the median of every metric over its successful runs.

    A configuration with any failed run is reported as failed, with the first error.
    """
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        grouped.setdefault((run["workload"], run["config"]), []).append(run)
    out = {}
    for key, group in grouped.items():
        failed = [run for run in group if "error" in run]
        if failed:
            out[key] = {"error": failed[0]["error"], "repeats": len(group)}
            continue
        row: dict[str, Any] = {m: statistics.median(run[m] for run in group) for m in METRICS}
        row["records"] = statistics.median(run["records"] for run in group)
        row["repeats"] = len(group)
        out[key] = row
    return out


def _ratio(table: dict, workload: str, top: str, bottom: str, metric: str) -> float | None:
    a, b = table.get((workload, top)), table.get((workload, bottom))
    if not a or not b or "error" in a or "error" in b or not b[metric]:
        return None
    return a[metric] / b[metric]


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if value < 100 else f"{value:.0f}"


def grain_peer(config: str) -> str | None:
    """The grain-defaults configuration a row is compared with: the same API, the same worker
    count (grainlite's Dataset API with grain's Dataset API, anything else with grain's
    DataLoader); None for bare and for grain's own default rows."""
    if config == "bare" or config.startswith(("grain-w", "grain-ds-")):
        return None
    if config.startswith("grainlite-ds-"):
        return f"grain-ds-w{config[-1]}"
    return f"grain-w{config[-1]}"


def workload_table(table: dict, workload: str) -> str:
    """One Markdown table: a row per configuration, medians and ratios vs bare and vs grain."""
    lines = [
        "| configuration | records/s | batches/s | first batch (s) | peak PSS tree (MB) "
        "| peak RSS tree (MB) | CPU µs/record | vs bare | vs grain defaults, same API and W |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for config in configs_for(WORKLOADS[workload]):
        row = table.get((workload, config.name))
        if row is None:
            continue
        if "error" in row:
            lines.append(f"| {config.label} | FAILED: {row['error'][:80]} |||||||")
            continue
        vs_bare = _ratio(table, workload, config.name, "bare", "records_per_s")
        peer = grain_peer(config.name)
        vs_grain = _ratio(table, workload, config.name, peer, "records_per_s") if peer else None
        lines.append(
            f"| {config.label} | {_fmt(row['records_per_s'])} | {_fmt(row['batches_per_s'])} "
            f"| {_fmt(row['time_to_first_batch_s'], 3)} | {_fmt(row['peak_pss_mb'], 0)} "
            f"| {_fmt(row['peak_rss_mb'], 0)} | {_fmt(row['cpu_us_per_record'])} "
            f"| {'—' if config.name == 'bare' else _fmt(vs_bare)} "
            f"| {'—' if peer is None else _fmt(vs_grain, 1)} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class Target:
    """A goal: ``metric`` of ``config`` (over ``versus``'s, if given) compared with ``bound``."""

    text: str
    workload: str
    config: str
    metric: str
    bound: float
    versus: str | None = None
    at_most: bool = False
    versus_workload: str | None = None  # ``versus`` on another workload (default: the same)

    def value(self, table: dict) -> float | None:
        """The measured value (a ratio when ``versus`` is set), or None if not measured."""
        if self.versus is not None:
            a = table.get((self.workload, self.config))
            b = table.get((self.versus_workload or self.workload, self.versus))
            if not a or not b or "error" in a or "error" in b or not b[self.metric]:
                return None
            return float(a[self.metric] / b[self.metric])
        row = table.get((self.workload, self.config))
        return None if not row or "error" in row else row[self.metric]


_W0 = (("DataLoader", "grainlite-w0"), ("Dataset API", "grainlite-ds-w0"))
_W2 = (("DataLoader", "grainlite-w2"), ("Dataset API", "grainlite-ds-w2"))

TARGETS = (
    Target("small: grainlite W=0 / grain W=0 records/s ≥ 100", "small", "grainlite-w0",
           "records_per_s", 100, "grain-w0"),
    Target("small: grainlite W=2 / grain W=2 records/s ≥ 100", "small", "grainlite-w2",
           "records_per_s", 100, "grain-w2"),
    Target("small-mem: grainlite W=0 (list) / bare records/s ≥ 0.5", "small-mem",
           "grainlite-w0", "records_per_s", 0.5, "bare"),
    Target("small-mem: grainlite W=0 (InMemoryDataSource) / bare records/s ≥ 0.5", "small-mem",
           "grainlite-shm-w0", "records_per_s", 0.5, "bare"),
    Target("images: grainlite W=0 / bare records/s ≥ 0.95", "images", "grainlite-w0",
           "records_per_s", 0.95, "bare"),
    Target("images: grainlite W=2 / bare records/s ≥ 1.5", "images", "grainlite-w2",
           "records_per_s", 1.5, "bare"),
    Target("small-mem: grainlite W=0 (list) / bare records/s ≥ 0.9", "small-mem",
           "grainlite-w0", "records_per_s", 0.9, "bare"),
    # The Dataset API (issue 13).
    *(Target(f"{w}: grainlite Dataset API in-process / bare records/s ≥ 0.9", w,
             "grainlite-ds-w0", "records_per_s", 0.9, "bare")
      for w in ("images", "small", "small-mem")),
    Target("images: grainlite Dataset API mp_prefetch W=2 / bare records/s ≥ 1.5", "images",
           "grainlite-ds-w2", "records_per_s", 1.5, "bare"),
    *(Target(f"{w}: grainlite / grain Dataset API, {where}, records/s ≥ 10", w,
             f"grainlite-ds-w{n}", "records_per_s", 10, f"grain-ds-w{n}")
      for w in ("small", "small-mem")
      for n, where in ((0, "in-process"), (2, "mp_prefetch W=2"))),
    # Honest speed, both APIs (issue 32): every element made in a worker.
    *(Target(f"{w}: grainlite {api} W=2 time to first batch ≤ 0.3 s", w, config,
             "time_to_first_batch_s", 0.3, at_most=True)
      for w in ("images", "small", "small-mem") for api, config in _W2),
    *(Target(f"images: grainlite {api} W=2 peak PSS of the process tree ≤ 300 MB", "images",
             config, "peak_pss_mb", 300, at_most=True) for api, config in _W2),
    *(Target(f"images: grainlite {api} W=2 / bare records/s ≥ 2.7", "images", config,
             "records_per_s", 2.7, "bare") for api, config in _W2),
    *(Target(f"small-mem: grainlite {api} W=0 / bare records/s ≥ 0.95", "small-mem", config,
             "records_per_s", 0.95, "bare") for api, config in _W0),
    *(Target(f"grainlite {api} W=0: small (ArrayRecord) / small-mem records/s ≥ 0.5", "small",
             config, "records_per_s", 0.5, config, versus_workload="small-mem")
      for api, config in _W0),
)  # fmt: skip


def target_rows(table: dict) -> list[tuple[str, float | None, bool | None]]:
    """(target, measured value, passed) for every target whose workload was run."""
    rows = []
    for target in TARGETS:
        if not any(key[0] == target.workload for key in table):
            continue
        value = target.value(table)
        passed = (
            None
            if value is None
            else (value <= target.bound if target.at_most else value >= target.bound)
        )
        rows.append((target.text, value, passed))
    return rows


def markdown(table: dict, header: str) -> str:
    """The whole results section: a header, one table per workload, then the targets."""
    blocks = [header]
    for workload in WORKLOADS:
        if any(key[0] == workload for key in table):
            blocks.append(f"**{workload}**: {WORKLOADS[workload].description}.")
            blocks.append(workload_table(table, workload))
    rows = target_rows(table)
    if rows:
        lines = ["| target (from the medians above) | measured | result |", "|---|--:|---|"]
        for text, value, passed in rows:
            verdict = "not measured" if passed is None else ("pass" if passed else "**FAIL**")
            lines.append(f"| {text} | {_fmt(value)} | {verdict} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def write_into_page(page: Path, section: str) -> None:
    """Replaces what is between the result markers of ``page`` with ``section``."""
    text = page.read_text()
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{page} has no {START} ... {END} markers")
    page.write_text(pattern.sub(lambda _: f"{START}\n{section}\n{END}", text))
