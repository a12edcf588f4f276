"""A large list of ``bytes`` records travels to the workers as one buffer and comes back equal.

The records are what pickle would have sent: the same values (trailing zero bytes, empty records
and records of mixed lengths included), in a ``list``, read by real worker processes of both APIs.
A worker keeps records of one length in their buffer (``FixedSizeRecords``) and reads them as the
list would. Lists that are short, or hold anything but ``bytes``, pickle as they always did.
"""

from __future__ import annotations

import copy
import gc
import os
import pickle
import pickletools

import pytest

import grainlite as grain
from grainlite.engine.packed_records import MIN_RECORDS, FixedSizeRecords, packed

pytestmark = pytest.mark.timeout(180)

COUNT = MIN_RECORDS + 100


def _fixed_records() -> list[bytes]:
    # 16 bytes each, most ending in zero bytes (what a ShareableList would strip).
    return [i.to_bytes(8, "little") + bytes(8) for i in range(COUNT)]


def _mixed_records() -> list[bytes]:
    return [bytes([i % 251]) * (i % 7) + b"\x00" * (i % 3) for i in range(COUNT)]


def _bytes_objects_in(blob: bytes) -> int:
    """How many bytes objects a pickle holds (one per record when a list goes as it is)."""
    names = ("SHORT_BINBYTES", "BINBYTES", "BINBYTES8")
    return sum(1 for opcode, _, _ in pickletools.genops(blob) if opcode.name in names)


@pytest.mark.parametrize("make", [_fixed_records, _mixed_records])
def test_a_large_list_of_bytes_pickles_as_one_buffer_and_unpickles_as_an_equal_list(make):
    records = make()
    blob = pickle.dumps(packed(records), pickle.HIGHEST_PROTOCOL)
    assert _bytes_objects_in(blob) <= 2
    back = pickle.loads(blob)
    assert type(back) is list
    assert back == records
    assert {type(record) for record in back} == {bytes}


def test_a_list_of_empty_records_comes_back_equal():
    records = [b""] * COUNT
    assert pickle.loads(pickle.dumps(packed(records))) == records


@pytest.mark.parametrize(
    "records",
    [
        [b"ab"] * (MIN_RECORDS - 1),  # short
        [b"ab"] * COUNT + ["text"],  # not all bytes
        [bytearray(b"ab")] * COUNT,  # bytes-like but not bytes: must come back a bytearray
        tuple([b"ab"] * COUNT),  # not a list
    ],
    ids=["short", "mixed-types", "bytearrays", "tuple"],
)
def test_other_sources_are_left_as_they_are(records):
    assert packed(records) is records


def test_copies_of_a_dataset_and_a_pipeline_over_a_large_list_read_the_list():
    records = _fixed_records()
    dataset = grain.MapDataset.source(records)
    assert copy.copy(dataset)._source is records  # a shallow copy shares the list
    assert copy.deepcopy(dataset)._source == records
    assert copy.copy(dataset)[5] == records[5]
    loader = grain.DataLoader(
        data_source=records,
        sampler=grain.IndexSampler(len(records), grain.NoSharding(), num_epochs=1),
    )
    assert copy.copy(loader._pipeline).source is records
    assert copy.deepcopy(loader._pipeline).source == records


class Where(grain.MapTransform):
    def map(self, record: bytes) -> tuple[bytes, int]:
        return record, os.getpid()


def _loader(records: list[bytes], operation: grain.MapTransform, workers: int) -> grain.DataLoader:
    return grain.DataLoader(
        data_source=records,
        sampler=grain.IndexSampler(len(records), grain.NoSharding(), num_epochs=1),
        operations=[operation],
        worker_count=workers,
    )


def _check(made: list[tuple[bytes, int]], records: list[bytes]) -> None:
    assert sorted(record for record, _ in made) == sorted(records)
    assert os.getpid() not in {pid for _, pid in made}


@pytest.mark.parametrize("make", [_fixed_records, _mixed_records])
def test_the_data_loaders_workers_read_every_record_of_a_list_source(make):
    records = make()
    loader = _loader(records, Where(), workers=2)
    assert _bytes_objects_in(loader._pipeline.pickled()) < 10
    with iter(loader) as iterator:
        _check(list(iterator), records)


@pytest.mark.parametrize("make", [_fixed_records, _mixed_records])
def test_mp_prefetch_workers_read_every_record_of_a_list_source(make):
    records = make()
    dataset = (
        grain.MapDataset.source(records)
        .map(Where())
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    iterator = iter(dataset)
    try:
        assert _bytes_objects_in(iterator._pipeline.pickled()) < 10
        made = list(iterator)
    finally:
        iterator.close()
    _check(made, records)


class HoldsRecordsInPlace(grain.MapTransform):
    """Any record -> whether this process holds a list's records as one buffer."""

    def map(self, record: bytes) -> bool:
        return any(type(held) is FixedSizeRecords for held in gc.get_objects())


@pytest.mark.parametrize("make, in_place", [(_fixed_records, True), (_mixed_records, False)])
def test_workers_of_both_apis_keep_records_of_one_length_in_their_buffer(make, in_place):
    records = make()
    loader = _loader(records, HoldsRecordsInPlace(), workers=1)
    with iter(loader) as iterator:
        assert next(iterator) is in_place
    dataset = grain.MapDataset.source(records).map(HoldsRecordsInPlace()).to_iter_dataset()
    iterator = iter(dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=1)))
    try:
        assert next(iterator) is in_place
    finally:
        iterator.close()
    assert not any(type(held) is FixedSizeRecords for held in gc.get_objects())  # not here


def test_sequential_slices_of_records_in_place_read_as_the_list_would():
    records = _fixed_records()

    def read(source):
        dataset = grain.MapDataset.source(source).to_iter_dataset()
        options = grain.MultiprocessingOptions(num_workers=2)
        iterator = iter(dataset.mp_prefetch(options, sequential_slice=True))
        try:
            return list(iterator)
        finally:
            iterator.close()

    assert read(records) == read(tuple(records))  # a tuple pickles as it is


def test_records_in_place_index_slice_and_read_blocks_as_the_list_does():
    records = _fixed_records()
    data = b"".join(records)
    view = FixedSizeRecords(data, 16, len(records))
    assert len(view) == len(records)
    for key in (0, 1, 4096, -1, -len(records), len(records) - 1):
        assert view[key] == records[key]
    for bad in (len(records), -len(records) - 1):
        with pytest.raises(IndexError):
            view[bad]
    for part in (slice(10, 20), slice(-5, None), slice(None, 3), slice(7, 2), slice(1, 40, 3)):
        assert list(view[part]) == records[part]
    assert type(view[10:20]) is FixedSizeRecords
    keys = [5, 0, -1, 4095, 5]
    assert view.__getitems__(keys) == [records[k] for k in keys]
    assert {type(record) for record in view.__getitems__(keys)} == {bytes}
    assert pickle.loads(pickle.dumps(view)) == records  # outside a worker: a list again
    with pytest.raises(ValueError, match="not 3 records of 16 bytes"):
        FixedSizeRecords(bytes(47), 16, 3)


def test_a_source_read_in_place_is_named_as_the_list_it_stands_for():
    records = _fixed_records()
    in_place = FixedSizeRecords(b"".join(records), 16, len(records))
    assert str(grain.MapDataset.source(in_place)) == str(grain.MapDataset.source(records))
