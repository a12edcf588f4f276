"""With more local workers than CPUs, a worker's credit waits for the slabs of the element it
was earned by (grainlite.engine.flow.Credits), so each worker writes every element into the same
shared memory: one slab per worker where the user drops each element before the next few, as a
training loop does, instead of two. A user who keeps elements still gets every element, in order,
in new slabs. Real worker processes and real shared memory; a slab is told by the address the
parent maps it at (each slab is mapped once)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import grainlite as grain
from grainlite.engine import flow
from grainlite_tests.support import ray_pipelines as rp

pytestmark = pytest.mark.timeout(120)

_COUNT = 60


class Large(grain.MapTransform):
    """Element ``x`` as a 1 MiB array of ``x`` (it travels in a slab)."""

    def map(self, element: int) -> np.ndarray:
        return rp.large_array(element)


def _iterator(api: str, workers: int) -> Any:
    """``workers`` workers with 1 credit each, elements 0..59 in order as 1 MiB arrays."""
    if api == "loader":
        return iter(
            grain.DataLoader(
                data_source=grain.RangeDataSource(0, _COUNT, 1),
                sampler=grain.SequentialSampler(_COUNT, grain.NoSharding()),
                operations=[Large()],
                worker_count=workers,
                worker_buffer_size=1,
                read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=1),
            )
        )
    dataset = grain.MapDataset.range(_COUNT).to_iter_dataset(grain.ReadOptions(num_threads=0))
    options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=1)
    return iter(dataset.map(Large()).mp_prefetch(options))


def _slab_of(array: np.ndarray) -> int:
    """The address the parent mapped the array's slab at (the start of the whole mapping)."""
    base: Any = array
    while isinstance(base.base, np.ndarray):
        base = base.base
    return int(base.__array_interface__["data"][0])


def _slabs_per_worker(api: str, workers: int, keep: bool) -> tuple[list[int], list[int]]:
    """The elements read (all of them) and how many slabs each worker's elements came in; each
    element dropped before the next is taken unless ``keep``."""
    iterator = _iterator(api, workers)
    slabs: list[set[int]] = [set() for _ in range(workers)]
    values, kept = [], []
    try:
        for position, element in enumerate(iterator):
            values.append(int(element[0, 0]))
            slabs[position % workers].add(_slab_of(element))
            if keep:
                kept.append(element)
            del element
    finally:
        iterator.close()
    return values, [len(s) for s in slabs]


@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_with_more_workers_than_cpus_each_worker_reuses_one_slab(monkeypatch, api):
    monkeypatch.setattr(flow, "usable_cpu_count", lambda: 1)  # 4 workers on 1 CPU: lead 2
    values, slabs = _slabs_per_worker(api, 4, keep=False)
    assert values == list(range(_COUNT))
    assert slabs == [1, 1, 1, 1]


@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_with_a_cpu_each_workers_make_ahead_into_a_second_slab(monkeypatch, api):
    # Credits go back at once (the workers make ahead): while the user holds one element, its
    # worker writes the next ones into other slabs (how many depends on when the release comes).
    monkeypatch.setattr(flow, "usable_cpu_count", lambda: 64)
    values, slabs = _slabs_per_worker(api, 4, keep=False)
    assert values == list(range(_COUNT))
    assert min(slabs) >= 2


@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_a_user_who_keeps_every_element_gets_them_all_in_new_slabs(monkeypatch, api):
    # No slab ever comes back: each credit is paid when its worker is among the next two to be
    # taken, so the stream goes on (no hang) and every element has a slab of its own.
    monkeypatch.setattr(flow, "usable_cpu_count", lambda: 1)
    values, slabs = _slabs_per_worker(api, 4, keep=True)
    assert values == list(range(_COUNT))
    assert slabs == [_COUNT // 4] * 4
