"""A worker imports only what its pipeline needs: cloudpickle only for code sent by value.

The pipelines here are made of classes importable by name, so their pickles load with plain
pickle; a worker of either API must not pay cloudpickle's import (tens of milliseconds at every
start).
"""

from __future__ import annotations

import sys

import pytest

import grainlite as grain

pytestmark = pytest.mark.timeout(120)


class ImportsSeen(grain.MapTransform):
    def map(self, element: int) -> tuple[int, bool]:
        return element, "cloudpickle" in sys.modules


def test_a_data_loader_worker_does_not_import_cloudpickle():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 4, 1),
        sampler=grain.IndexSampler(4, grain.NoSharding(), num_epochs=1),
        operations=[ImportsSeen()],
        worker_count=2,
    )
    with iter(loader) as iterator:
        assert [seen for _, seen in iterator] == [False] * 4


def test_an_mp_prefetch_worker_does_not_import_cloudpickle():
    dataset = (
        grain.MapDataset.range(4)
        .map(ImportsSeen())
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    iterator = iter(dataset)
    try:
        assert [seen for _, seen in iterator] == [False] * 4
    finally:
        iterator.close()
