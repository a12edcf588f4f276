"""Worker striding: worker w of W on host s of S reads s + S*w + S*W*k, for the reader and the
checkpoint alike."""

from __future__ import annotations

import dataclasses
import json

import pytest

import grainlite as grain
from grainlite.engine.position import IteratorPosition
from grainlite.loader.state.decoding import decode
from grainlite.loader.state.encoding import dump
from grainlite.loader.state.layout import Layout
from grainlite.loader.striding import WorkerSlice

pytestmark = pytest.mark.timeout(30)

LAYOUTS = [(0, 1, 1), (0, 1, 3), (1, 2, 1), (1, 2, 3), (2, 3, 2)]  # shard_index, shard_count, W


def _by_hand(length: int, shard_index: int, shard_count: int, worker: int, workers: int):
    """The host's indices are those equal to shard_index mod shard_count; workers deal them out."""
    host = [i for i in range(length) if i % shard_count == shard_index]
    return host[worker::workers]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda t: "s{}-of-{}-W{}".format(*t))
def test_each_worker_reads_every_wth_index_of_its_hosts_share(layout):
    shard_index, shard_count, workers = layout
    sampler = grain.IndexSampler(23, grain.NoSharding(), num_epochs=1)
    for worker in range(workers):
        part = WorkerSlice.of(sampler, shard_index, shard_count, worker, workers)
        expected = _by_hand(23, shard_index, shard_count, worker, workers)
        assert part.positions() == len(expected)
        assert [part.index(m) for m in range(len(expected))] == expected
        assert part.indices(0, len(expected)).tolist() == expected


def test_a_sampler_without_a_length_gives_an_open_slice():
    class Endless:
        def __getitem__(self, index):
            raise IndexError(index)

    part = WorkerSlice.of(Endless(), 1, 2, 1, 3)
    assert (part.first, part.stride, part.end, part.positions()) == (3, 6, None, None)


def test_position_is_the_inverse_of_index_and_none_off_the_slice():
    part = WorkerSlice.striding(1, 2, 1, 3)  # 3, 9, 15, ...
    assert [part.position(part.index(m)) for m in (-1, 0, 1, 7)] == [-1, 0, 1, 7]
    assert [part.position(i) for i in (4, 10, 2)] == [None, None, None]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda t: "s{}-of-{}-W{}".format(*t))
def test_the_checkpoint_stores_the_index_the_reader_read_last(layout):
    shard_index, shard_count, workers = layout
    sampler = grain.IndexSampler(40, grain.NoSharding(), num_epochs=1)
    codec = Layout(workers, shard_index, shard_count, repr(sampler), "src", False)
    counts = [w + 2 for w in range(workers)]  # elements each worker has delivered
    position = IteratorPosition(counts, 0, [False] * workers)
    stored = json.loads(dump(position, codec))["last_seen_indices"]
    for worker in range(workers):
        read = WorkerSlice.of(sampler, shard_index, shard_count, worker, workers)
        assert dataclasses.replace(codec.worker_slice(worker), end=read.end) == read
        assert stored[str(worker)] == read.index(counts[worker] - 1)
    assert decode(dump(position, codec), codec).states == counts


def test_a_slice_with_holes_reads_them_right_before_its_native_tail():
    # Native: 1, 4, 7, 10, 13 (first 1, stride 3, end 15); holes 2 and 5 take positions 1 and 2,
    # just before the tail's first position (3: index 10).
    worker = WorkerSlice(1, 3, 15, head=(2, 5), head_start=1)
    assert worker.tail_start == 3
    assert [worker.index(p) for p in range(1, 5)] == [2, 5, 10, 13]
    assert worker.indices(0, 5).tolist() == [1, 2, 5, 10, 13]
    assert worker.indices(2, 4).tolist() == [5, 10]
    assert [worker.position(i) for i in (2, 5, 10, 13)] == [1, 2, 3, 4]
    assert worker.position(4) is None  # a native index before the tail: not read any more
    assert worker.positions() == 5


def test_holes_may_take_negative_positions_and_outlast_the_native_slice():
    worker = WorkerSlice(0, 4, 6, head=(1, 2, 3), head_start=-1)  # native: 0, 4; no tail left
    assert worker.positions() == 2
    assert worker.indices(-1, worker.positions()).tolist() == [1, 2, 3]
    longer = WorkerSlice(0, 4, 6, head=(1, 2, 3), head_start=0)  # the holes end at position 3
    assert longer.positions() == 3
    assert longer.indices(0, longer.positions()).tolist() == [1, 2, 3]
