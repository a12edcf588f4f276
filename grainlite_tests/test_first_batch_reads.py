"""The reads that make a first batch: both APIs' readers end their reads at every power of two
(READ_POLICY.block_end), so a first batch of 128 records waits for no read past it, and a remote
source is told to copy first (``prefetch_first_reads``) just the records of those reads
(READ_POLICY.first_copies), as many as the first batch needs, from the batch the pipeline says."""

from __future__ import annotations

import threading

import pytest

import grainlite as grain
from grainlite.options import READ_POLICY

LENGTH = 4096


class RangeReads:
    """A source of ``key -> key`` that records the keys of each read (one ``__getitems__``)."""

    def __init__(self, length: int = LENGTH) -> None:
        self.length = length
        self.reads: list[list[int]] = []
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: int) -> int:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys) -> list[int]:
        with self.lock:
            self.reads.append([int(key) for key in keys])
        return [int(key) for key in keys]


def _crossed(reads: list[list[int]], first: int) -> list[tuple[int, int, int]]:
    """The reads ``[start, stop)`` of consecutive positions that hold a power of two from
    ``first`` up to 256, or a multiple of 256, other than at their start: ``(start, stop, that
    position)``."""
    marks = {1 << k for k in range(9) if 1 << k >= first} | set(range(256, LENGTH + 1, 256))
    crossed, start = [], 0
    for read in reads:
        stop = start + len(read)
        crossed += [(start, stop, m) for m in marks if start < m < stop]
        start = stop
    return crossed


def test_the_data_loader_reader_ends_a_read_at_every_power_of_two():
    source = RangeReads()
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.SequentialSampler(LENGTH, grain.NoSharding()),
        worker_count=0,
        read_options=grain.ReadOptions(num_threads=0),
    )
    assert list(loader) == list(range(LENGTH))
    ends = [sum(len(read) for read in source.reads[: i + 1]) for i in range(len(source.reads))]
    assert ends[:8] == [8, 16, 32, 64, 128, 256, 512, 768]
    assert _crossed(source.reads, READ_POLICY.first_read) == []


def test_the_dataset_api_block_reader_ends_a_block_at_every_power_of_two():
    source = RangeReads()
    options = grain.ReadOptions(num_threads=0)  # blocks stay in the consuming thread
    dataset = grain.MapDataset.source(source).to_iter_dataset(read_options=options)
    assert list(dataset) == list(range(LENGTH))
    # Blocks double while reads are cheap and halve while slow: they grow on a range.
    assert max(len(read) for read in source.reads) >= 16
    assert _crossed(source.reads, READ_POLICY.first_block) == []


class FirstReads(RangeReads):
    """A source that takes read-ahead hints and records the keys it is told to copy first."""

    takes_key_hints = True

    def __init__(self, length: int = LENGTH) -> None:
        super().__init__(length)
        self.first: list[list[int]] = []

    def __getstate__(self) -> dict:
        return {"length": self.length}  # the workers' copy: nothing recorded travels

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["length"])

    def prefetch_keys(self, keys) -> None:
        """Read-ahead hints: nothing to fetch here."""

    def prefetch_first_reads(self, keys) -> None:
        self.first.append([int(key) for key in keys])


class Odd(grain.FilterTransform):
    def filter(self, element: int) -> bool:
        return element % 2 == 1


class Double(grain.MapTransform):
    def map(self, element: int) -> int:
        return 2 * element


@pytest.mark.parametrize(
    ("operations", "copied"),
    [
        ([grain.Batch(100)], 128),  # the reads end at 8, 16, ..., 128
        ([Double(), grain.Batch(64)], 64),
        ([grain.Batch(3)], READ_POLICY.first_read),  # the first read holds 8 records
        ([Odd(), grain.Batch(64)], READ_POLICY.first_copy_records),  # the count is the data's
        ([], READ_POLICY.first_copy_records),  # no batch
        ([grain.Batch(300)], 0),  # more than first_copy_records: the whole files come as soon
    ],
)
def test_the_data_loader_copies_the_records_of_the_reads_of_its_first_batch(operations, copied):
    source = FirstReads()
    sampler = grain.IndexSampler(LENGTH, grain.NoSharding(), shuffle=True, seed=3, num_epochs=1)
    loader = grain.DataLoader(
        data_source=source, sampler=sampler, operations=operations, worker_count=2
    )
    with iter(loader):
        pass
    # Worker 0 of 2 reads the sampler's even indices.
    expected = [[sampler[2 * i].record_key for i in range(copied)]] if copied else []
    assert source.first == expected


def _plus_one(element: int) -> int:
    return element + 1


@pytest.mark.parametrize(
    ("build", "rows", "copied"),
    [
        (lambda ds: ds.to_iter_dataset().batch(100), 1, 128),  # blocks end at 1, 2, ..., 128
        (lambda ds: ds.to_iter_dataset().map(_plus_one).batch(10).batch(4), 1, 64),
        (lambda ds: ds.batch(16).to_iter_dataset().batch(4), 16, 64),  # 4 indices of 16 records
        (lambda ds: ds.to_iter_dataset().filter(bool).batch(8), 1, READ_POLICY.first_copy_records),
        (lambda ds: ds.to_iter_dataset(), 1, READ_POLICY.first_copy_records),  # no batch
        (lambda ds: ds.to_iter_dataset().batch(300), 1, 0),
    ],
)
def test_mp_prefetch_copies_the_records_of_the_reads_of_its_first_element(build, rows, copied):
    source = FirstReads()
    dataset = build(grain.MapDataset.source(source).shuffle(seed=3))
    with iter(dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))) as iterator:
        next(iterator)
    # Worker 0 of 2 reads the even indices of the MapDataset under to_iter_dataset.
    shuffled = grain.MapDataset.source(list(range(LENGTH))).shuffle(seed=3)
    indices = [2 * i for i in range(copied // rows)]
    expected = [shuffled[index * rows + row] for index in indices for row in range(rows)]
    assert source.first == ([expected] if copied else [])
