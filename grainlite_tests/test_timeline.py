"""With ``timeline_seconds`` set, ``stats().timeline(path)`` writes every process's spans as a
Chrome trace JSON (no JAX): well-formed events, one track per process, stage totals that agree
with ``stats()``; ``grainlite.tools.draw_timeline`` draws it as a PNG.

Real loaders with 2 worker processes (both APIs), read to the end so every worker's last report
(with its last spans) has arrived.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

import numpy as np
import pytest

import grainlite as grain
from grainlite import config
from grainlite.errors import GrainliteValueError
from grainlite_tests.support.sleepy import Sleep

pytestmark = pytest.mark.timeout(120)

RECORDS = 32


@pytest.fixture
def timeline_on(monkeypatch):
    monkeypatch.setenv(config.TIMELINE_SECONDS_ENV, "")
    config.update("timeline_seconds", 60)
    assert config.get_or_default("timeline_seconds") == 60.0


def loader() -> Any:
    return grain.DataLoader(
        data_source=np.arange(RECORDS),
        sampler=grain.IndexSampler(RECORDS, grain.NoSharding(), shuffle=False, num_epochs=1),
        operations=[Sleep(), grain.Batch(2)],
        worker_count=2,
    )


def dataset() -> Any:
    return (
        grain.MapDataset.source(np.arange(RECORDS))
        .to_iter_dataset()
        .map(Sleep())
        .batch(2)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )


def run_to_the_end(source: Any) -> Any:
    with iter(source) as iterator:
        batches = list(iterator)
        assert len(batches) == RECORDS // 2
        return iterator.stats()


def check_trace(stats: Any, path: Any) -> dict[str, Any]:
    """The JSON is well formed, one track per process; returns it."""
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(names.values())[0].startswith("grainlite worker 0 (pid ")
    assert len(names) == 3  # the training process and the 2 workers
    assert names[os.getpid()] == f"training process (pid {os.getpid()})"
    spans = [e for e in events if e["ph"] == "X"]
    for event in spans:
        assert set(event) == {"name", "cat", "ph", "ts", "dur", "pid", "tid"}
        assert isinstance(event["name"], str) and event["pid"] in names
        assert event["ts"] >= 0 and event["dur"] >= 0  # begin <= end
    assert all(e["ph"] in ("X", "M") for e in events)
    for pid in names:
        assert any(e["pid"] == pid for e in spans), names[pid]
    nexts = [e for e in spans if e["name"] == "grainlite next"]
    assert len(nexts) == RECORDS // 2 + 1  # every element, and the next() that ended the stream
    totals: dict[str, float] = defaultdict(float)
    for event in spans:
        if event["pid"] != os.getpid():
            totals[event["name"]] += event["dur"] / 1e6
    for stage in stats.stages:
        if stage.where == "workers" and stage.kind != "transport":
            assert totals[stage.name] > 0, stage
            # Spans and counters read the clock a few instructions apart: a stage that takes
            # milliseconds in all can differ by a preemption of the worker between the two reads
            # (on a busy machine, several ms), so the 10 % bound holds for stages of >= 50 ms.
            if stage.seconds >= 0.05:
                assert totals[stage.name] == pytest.approx(stage.seconds, rel=0.1), stage
    assert totals["Sleep"] >= RECORDS * 0.02
    return trace


def test_a_dataloader_s_timeline_is_a_chrome_trace_that_agrees_with_its_stats(
    timeline_on, tmp_path
):
    stats = run_to_the_end(loader())
    path = stats.timeline(tmp_path / "timeline.json")
    check_trace(stats, path)


def test_a_dataset_pipeline_s_timeline_is_a_chrome_trace_that_agrees_with_its_stats(
    timeline_on, tmp_path
):
    stats = run_to_the_end(dataset())
    path = stats.timeline(tmp_path / "timeline.json")
    check_trace(stats, path)


def test_the_timeline_is_drawn_as_a_png_with_one_lane_per_process(timeline_on, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib import image

    from grainlite.tools import draw_timeline

    stats = run_to_the_end(loader())
    png = draw_timeline(stats.timeline(tmp_path / "timeline.json"), tmp_path / "timeline.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.imread(png).shape[0] > 100


def test_the_timeline_keeps_only_its_last_seconds(timeline_on, tmp_path):
    stats = run_to_the_end(loader())
    trace = json.loads(stats.timeline(tmp_path / "t.json", seconds=0.05).read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    ends = [e["ts"] + e["dur"] for e in spans]
    # Every span kept ends in the last 50 ms (one that began before that window is kept whole,
    # so begins are not bounded); 1 ms of slack for the microsecond rounding.
    assert spans and min(ends) >= max(ends) - 0.05e6 - 1e3


def test_without_the_option_a_timeline_says_how_to_turn_it_on(monkeypatch, tmp_path):
    monkeypatch.setenv(config.TIMELINE_SECONDS_ENV, "")
    stats = run_to_the_end(loader())
    with pytest.raises(GrainliteValueError, match="timeline_seconds"):
        stats.timeline(tmp_path / "t.json")
    assert "spans" not in stats.to_dict()
