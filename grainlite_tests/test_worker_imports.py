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


class MaskedArraysSeen(grain.MapTransform):
    def map(self, element: bytes) -> bool:
        return "numpy.ma" in sys.modules


@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_a_worker_reading_shuffled_records_of_several_files_does_not_import_numpy_ma(tmp_path, api):
    # numpy's own np.unique imports numpy.ma (tens of ms) at its first call in a process.
    from array_record.python.array_record_module import ArrayRecordWriter

    paths = []
    for file in range(3):
        paths.append(str(tmp_path / f"part-{file}.array_record"))
        writer = ArrayRecordWriter(paths[-1], "group_size:1")
        for index in range(40):
            writer.write(f"{file}:{index}".encode())
        writer.close()
    source = grain.ArrayRecordDataSource(paths)
    if api == "loader":
        seen = grain.DataLoader(
            data_source=source,
            sampler=grain.IndexSampler(120, grain.NoSharding(), shuffle=True, num_epochs=1, seed=1),
            operations=[MaskedArraysSeen()],
            worker_count=2,
        )
    else:
        seen = (
            grain.MapDataset.source(source)
            .shuffle(seed=1)
            .map(MaskedArraysSeen())
            .to_iter_dataset()
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
        )
    assert list(seen) == [False] * 120
