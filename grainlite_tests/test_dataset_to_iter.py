"""``MapDataset.to_iter_dataset`` against the installed grain: order, holes, ``allow_nones``, the
``{"next_index": N}`` state and its errors; block reads, reader threads and their end on close,
exhaustion, errors and garbage collection; the worker-slicing hook."""

from __future__ import annotations

import gc
import json
import pickle
import threading
import time

import grain
import numpy as np
import pytest

import grainlite
import grainlite.dataset as gd
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.to_iter import PrefetchIterDataset, ToIterDataset
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step

THREAD_PREFIX = "grainlite-to-iter"


def _odd(x):
    return x % 2 == 1


def _states(iterator):
    out = [iterator.get_state()]
    for element in iterator:
        out.append((element, iterator.get_state()))
    return out


def _reader_threads():
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def _wait_until(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class _SlowSource:
    """A source whose reads wait on I/O (they release the interpreter lock), so reading moves to
    reader threads."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        time.sleep(0.0003)
        if key == self.fail_at:
            raise KeyError(f"record {key} is broken")
        return key


@pytest.mark.parametrize("allow_nones", [False, True], ids=["skip-holes", "allow-nones"])
def test_elements_and_state_after_each_match_grain(allow_nones):
    def build(lib):
        return lib.MapDataset.range(11).filter(_odd).to_iter_dataset(allow_nones=allow_nones)

    assert _states(iter(build(gd))) == _states(iter(build(grain)))


def test_state_after_trailing_holes_is_the_dataset_length_as_in_grain():
    ours = iter(MapDataset.range(10).filter(lambda x: x < 5).to_iter_dataset())
    assert list(ours) == [0, 1, 2, 3, 4] and ours.get_state() == {"next_index": 10}


def test_node_and_iterator_have_grains_names():
    ds = MapDataset.range(3).to_iter_dataset()
    assert type(ds).__name__ == type(grain.MapDataset.range(3).to_iter_dataset()).__name__
    assert type(iter(ds)).__name__ == "PrefetchDatasetIterator"
    assert ToIterDataset is PrefetchIterDataset


@pytest.mark.parametrize("next_index", [0, 2, 3], ids=["start", "middle", "end"])
def test_set_state_moves_to_next_index_like_grain(next_index):
    ours = iter(MapDataset.range(3).to_iter_dataset())
    theirs = iter(grain.MapDataset.range(3).to_iter_dataset())
    for it in (ours, theirs):
        it.set_state({"next_index": next_index})
    assert _states(ours) == _states(theirs)


@pytest.mark.parametrize(
    "state, error",
    [
        ({"next_index": 7}, IndexError),
        ({"next_index": -1}, IndexError),
        ({}, KeyError),
        ({"next_index": "a"}, TypeError),
    ],
    ids=["past-end", "negative", "missing", "str"],
)
def test_bad_states_raise_grains_error_types(state, error):
    with pytest.raises(error):
        iter(grain.MapDataset.range(3).to_iter_dataset()).set_state(state)
    with pytest.raises(error):
        iter(MapDataset.range(3).to_iter_dataset()).set_state(state)


@pytest.mark.parametrize("next_index", [np.int64(2), np.int32(0)], ids=["int64", "int32"])
def test_a_numpy_integer_next_index_resumes_where_grains_does(next_index):
    ours = iter(MapDataset.range(3).to_iter_dataset())
    theirs = iter(grain.MapDataset.range(3).to_iter_dataset())
    for it in (ours, theirs):
        it.set_state({"next_index": next_index})
    assert [int(x) for x in ours] == [int(x) for x in theirs]
    assert ours.get_state() == {"next_index": 3} and type(ours.get_state()["next_index"]) is int


def test_a_next_index_that_is_no_integer_is_a_type_error_quoting_a_bounded_value():
    with pytest.raises(TypeError) as raised:
        iter(MapDataset.range(3).to_iter_dataset()).set_state({"next_index": "7" * 10_000})
    assert str(raised.value).startswith("Checkpoint `next_index` must be an int (got '777")
    assert len(str(raised.value)) < 400


def test_out_of_range_state_message_names_value_rule_and_fix():
    with pytest.raises(IndexError) as raised:
        iter(MapDataset.range(3).to_iter_dataset()).set_state({"next_index": 7})
    assert str(raised.value) == (
        "Checkpoint `next_index` 7 is out of range for dataset of length 3: it must be in "
        "[0, 3]; restore a state saved from an iterator over this same dataset."
    )


def test_a_state_saved_by_grain_resumes_here_and_the_other_way_round():
    def build(lib):
        return lib.MapDataset.range(20).filter(_odd).to_iter_dataset()

    theirs = iter(build(grain))
    for _ in range(4):
        next(theirs)
    ours = iter(build(gd))
    ours.set_state(json.loads(json.dumps(theirs.get_state())))
    assert list(ours) == list(theirs)
    ours, theirs = iter(build(gd)), iter(build(grain))
    next(ours)
    theirs.set_state(ours.get_state())
    assert list(theirs) == list(ours)


@pytest.mark.parametrize(
    "read_options",
    [None, grainlite.ReadOptions(num_threads=0), grainlite.ReadOptions(2, 4)],
    ids=["default", "no-threads", "2-threads"],
)
def test_resumes_at_every_step(read_options):
    ds = MapDataset.range(40).filter(_odd).to_iter_dataset(read_options=read_options)
    assert_dataset_resumes_at_every_step(lambda: iter(ds))


def test_reads_go_through_the_parents_getitems_in_growing_blocks():
    calls = []

    class Recording(MapDataset):
        def __init__(self):
            super().__init__()

        def __len__(self):
            return 600

        def __getitem__(self, index):
            raise AssertionError("block reads must not read one index at a time")

        def _getitems(self, indices):
            calls.append(list(indices))
            return list(indices)

    assert list(Recording().to_iter_dataset()) == list(range(600))
    assert [i for block in calls for i in block] == list(range(600))
    assert len(calls[0]) == 1 and max(len(b) for b in calls) > 1


def test_a_users_subclass_without_getitems_is_read_one_index_at_a_time():
    class Plain(MapDataset):
        def __init__(self):
            super().__init__()

        def __len__(self):
            return 5

        def __getitem__(self, index):
            return None if index == 2 else index * 3

    assert list(Plain().to_iter_dataset()) == [0, 3, 9, 12]


def test_grains_read_options_object_is_accepted_and_a_bad_one_is_a_type_error():
    options = grain.ReadOptions(num_threads=1, prefetch_buffer_size=2)
    assert list(MapDataset.range(4).to_iter_dataset(read_options=options)) == [0, 1, 2, 3]
    with pytest.raises(TypeError, match=r"read_options=...\) must be a ReadOptions \(got 3"):
        MapDataset.range(4).to_iter_dataset(read_options=3)


def test_no_thread_starts_before_the_first_next_and_the_iterator_pickles():
    ds = MapDataset.source(_SlowSource(50)).to_iter_dataset()
    iterator = iter(ds)
    assert not _reader_threads()
    clone = pickle.loads(pickle.dumps(iterator))
    assert list(clone) == list(range(50))
    iterator.close()


def test_slow_reads_move_to_reader_threads_in_order():
    iterator = iter(MapDataset.source(_SlowSource(400)).to_iter_dataset())
    assert list(iterator) == list(range(400))
    assert iterator.get_state() == {"next_index": 400}


def test_close_mid_read_leaves_no_reader_thread_and_next_then_raises_value_error():
    iterator = iter(MapDataset.source(_SlowSource(5000)).to_iter_dataset())
    for _ in range(300):
        next(iterator)
    assert _reader_threads(), "slow reads should have started reader threads"
    iterator.close()
    assert _wait_until(lambda: not _reader_threads()), _reader_threads()
    assert iterator.get_state() == {"next_index": 300}
    with pytest.raises(ValueError, match="was closed and cannot advance"):
        next(iterator)
    iterator.close()  # idempotent


def test_garbage_collection_ends_the_reader_threads():
    iterator = iter(MapDataset.source(_SlowSource(5000)).to_iter_dataset())
    for _ in range(300):
        next(iterator)
    assert _reader_threads()
    del iterator
    gc.collect()
    assert _wait_until(lambda: not _reader_threads()), _reader_threads()


def test_an_error_in_a_read_reaches_the_caller_at_its_place_and_the_threads_go_on_after_it():
    iterator = iter(MapDataset.source(_SlowSource(2000, fail_at=700)).to_iter_dataset())
    with pytest.raises(KeyError, match="record 700 is broken"):
        for _ in iterator:
            pass
    assert iterator.get_state() == {"next_index": 701}
    assert _reader_threads()
    assert list(iterator) == list(range(701, 2000))
    assert _wait_until(lambda: not _reader_threads()), _reader_threads()


def test_context_manager_closes_the_iterator():
    with iter(MapDataset.source(_SlowSource(3000)).to_iter_dataset()) as iterator:
        for _ in range(300):
            next(iterator)
    assert _wait_until(lambda: not _reader_threads())


def test_set_slice_reads_a_workers_share_and_counts_within_it():
    ds = MapDataset.range(10).to_iter_dataset(allow_nones=True)
    options = ds.read_options
    ds.set_slice(slice(1, None, 3))
    assert list(ds) == [1, 4, 7]
    assert ds.allow_nones and ds.read_options is options
    iterator = iter(ds)
    next(iterator)
    assert iterator.get_state() == {"next_index": 1}


@pytest.mark.parametrize("sequential", [False, True])
def test_set_slice_gives_each_worker_grains_share_in_place(sequential):
    def shares(lib):
        out = []
        for worker in range(3):
            ds = lib.MapDataset.range(10).filter(_odd).to_iter_dataset()
            ds.set_slice(slice(worker, None, 3), sequential)
            iterator = iter(ds)
            out.append((list(iterator), iterator.get_state()))
        return out

    assert shares(gd) == shares(grain)


def test_set_state_while_threads_read_ahead_restarts_from_the_new_position():
    iterator = iter(MapDataset.source(_SlowSource(3000)).to_iter_dataset())
    for _ in range(300):
        next(iterator)
    assert _reader_threads()
    iterator.set_state({"next_index": 10})
    assert _wait_until(lambda: not _reader_threads()), "the old reader's threads must end"
    assert [next(iterator) for _ in range(5)] == [10, 11, 12, 13, 14]
    iterator.close()
