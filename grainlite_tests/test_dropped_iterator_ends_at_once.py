"""An iterator dropped mid-stream without ``close()`` (``del it``) ends its worker processes and
removes their shared memory at once, by reference counting, in both APIs: nothing of it waits for
Python's cyclic garbage collector, which may not run for a long time (or, as here, not at all).
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import numpy as np
import pytest
from leak_check import alive

import grainlite as grain
from grainlite import shm

pytestmark = pytest.mark.timeout(60)


def plus_one(x: Any) -> np.ndarray:
    return np.full(4, x + 1, dtype=np.int64)


class PlusOne(grain.MapTransform):
    def map(self, element: Any) -> np.ndarray:
        return plus_one(element)


def _iterator(api: str) -> Any:
    if api == "DataLoader":
        loader = grain.DataLoader(
            data_source=grain.RangeDataSource(0, 400, 1),
            sampler=grain.SequentialSampler(400, grain.NoSharding()),
            operations=[PlusOne(), grain.Batch(4)],
            worker_count=2,
        )
        return iter(loader)
    options = grain.MultiprocessingOptions(num_workers=2)
    dataset = grain.MapDataset.range(400).map(plus_one).to_iter_dataset().batch(4)
    return iter(dataset.mp_prefetch(options))


def _segments_of(pids: set[int]) -> list[str]:
    return [name for name in shm.list_segments() if shm.owner_pid(name) in pids]


@pytest.mark.parametrize("api", ["DataLoader", "mp_prefetch"])
def test_a_dropped_iterator_ends_its_workers_and_segments_without_garbage_collection(api):
    iterator = _iterator(api)
    element = next(iterator)
    assert int(np.asarray(element)[0][0]) == 1
    del element
    workers = set(iterator._stream.pids())
    owners = workers | {os.getpid()}
    assert len(workers) == 2 and all(alive(pid) for pid in workers)
    deadline = time.monotonic() + 10  # the workers make their slabs as they make ahead
    while not _segments_of(owners) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _segments_of(owners), "the running stream holds segments"
    gc.collect()
    gc.disable()  # only reference counting may free the iterator and what it holds
    try:
        del iterator
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
            any(alive(pid) for pid in workers) or _segments_of(owners)
        ):
            time.sleep(0.02)
        assert [pid for pid in workers if alive(pid)] == []
        assert _segments_of(owners) == []
    finally:
        gc.enable()
