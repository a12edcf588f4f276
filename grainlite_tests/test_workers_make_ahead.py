"""A local worker makes its next element while it waits for a credit only where each worker has a
CPU (grainlite.engine.flow.makes_ahead): with more workers than CPUs it makes an element only
once it may send it, so it holds no element (and no slab) beyond its credits. Real worker
processes; what they made is counted in a file each element appends to."""

from __future__ import annotations

import time

import pytest

import grainlite as grain
from grainlite.engine import flow
from grainlite_tests.support import ray_pipelines as rp

pytestmark = pytest.mark.timeout(120)


def _settled_count(log, at_least: int) -> int:
    """The elements made, once the workers have made at least ``at_least`` and then nothing
    more for a second."""
    deadline = time.monotonic() + 30
    count = 0
    while time.monotonic() < deadline:
        count = len(log.read_text().splitlines()) if log.exists() else 0
        if count >= at_least:
            break
        time.sleep(0.02)
    time.sleep(1.0)  # time enough to make more, if anything let them
    return len(log.read_text().splitlines())


@pytest.mark.parametrize("api", ["loader", "dataset"])
@pytest.mark.parametrize(("cpus", "made"), [(64, 5), (1, 3)], ids=["a-cpu-each", "fewer-cpus"])
def test_workers_make_an_element_ahead_of_their_credit_only_with_a_cpu_each(
    tmp_path, monkeypatch, api, cpus, made
):
    # 2 workers, 1 credit each, 1 element taken: worker 0 sent elements 0 and 2, worker 1 sent
    # element 1; each makes one more (4 and 3) while it waits, where it has a CPU of its own.
    monkeypatch.setattr(flow, "usable_cpu_count", lambda: cpus)
    log = tmp_path / "made"
    if api == "loader":
        iterator = iter(
            grain.DataLoader(
                data_source=grain.RangeDataSource(0, 100, 1),
                sampler=grain.SequentialSampler(100, grain.NoSharding()),
                operations=[rp.Logged(str(log))],
                worker_count=2,
                worker_buffer_size=1,
                read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=1),
            )
        )
    else:
        dataset = grain.MapDataset.range(100).to_iter_dataset(grain.ReadOptions(num_threads=0))
        options = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=1)
        iterator = iter(dataset.map(rp.Logged(str(log))).mp_prefetch(options))
    try:
        assert int(next(iterator)) == 0
        assert _settled_count(log, made) == made
        assert [int(next(iterator)) for _ in range(20)] == list(range(1, 21))
    finally:
        iterator.close()  # type: ignore[attr-defined]
