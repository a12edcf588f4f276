"""The soak benchmark in its short form: memory and shared memory stay flat over a long stream."""

from __future__ import annotations

import pytest

from benchmarks import soak

pytestmark = pytest.mark.timeout(120)


def test_a_short_soak_at_two_workers_keeps_memory_and_segments_flat():
    result = soak.run(records=400_000, workers=2, every=0.1)
    assert result.records == 400_000 - 400_000 % (2 * soak.BATCH)
    assert len(result.samples) >= 3
    assert set(result.growth) == {"parent", "worker 0", "worker 1"}
    verdicts = result.verdicts
    # Throughput is judged on the full run only: a few seconds on a shared machine are too noisy.
    assert verdicts["memory flat after warm-up"], result.growth
    assert verdicts["segment count stable after warm-up"], result.segment_counts


def test_the_summary_names_every_promise_and_the_growth_of_each_process():
    result = soak.SoakResult(records=1000, workers=2, seconds=1.0)
    result.samples = [soak.Sample(0.5, 500, 1000.0, {"parent": 30.0}, 0)]
    result.growth, result.segment_counts, result.slowdown = {"parent": 0.08}, [0], 0.0
    text = soak.summary(result)
    assert "parent +8.0%" in text
    assert "memory flat after warm-up: BROKEN" in text
    assert "throughput stable: held" in text
