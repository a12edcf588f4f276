"""``MapDataset.batch`` and ``IterDataset.batch`` against the installed grain: lengths, every index
(wrapped ones too), stacked pytrees, states at every step, restores both ways, errors, and the
block reads that make them fast."""

from __future__ import annotations

import collections
import json
import pickle
import weakref

import cloudpickle
import grain
import numpy as np
import pytest

import grainlite as lite
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.flat_map import FlatMapMapDataset
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite_tests.support.contracts import (
    assert_dataset_resumes_at_every_step,
    run_with_states,
    to_plain,
)

SIZES = [(1, 1), (7, 3), (9, 3), (10, 3), (10, 4), (5, 12), (10, 10)]


def _plain_reads(ds, indices):
    return [to_plain(ds[i]) for i in indices]


@pytest.mark.parametrize("drop_remainder", [False, True], ids=["keep-short", "drop-short"])
@pytest.mark.parametrize("size, batch_size", SIZES, ids=[f"{n}by{b}" for n, b in SIZES])
def test_map_batch_matches_grain_in_length_and_every_index(size, batch_size, drop_remainder):
    ours = MapDataset.range(size).batch(batch_size, drop_remainder=drop_remainder)
    theirs = grain.MapDataset.range(size).batch(batch_size, drop_remainder=drop_remainder)
    assert len(ours) == len(theirs)
    if not len(theirs):
        with pytest.raises(ZeroDivisionError):
            theirs[0]
        with pytest.raises(ZeroDivisionError, match="has no batches"):
            ours[0]
        return
    indices = list(range(-2 * len(theirs), 3 * len(theirs)))
    expected = _plain_reads(theirs, indices)
    assert _plain_reads(ours, indices) == expected
    assert [to_plain(b) for b in ours._getitems(indices)] == expected
    assert [to_plain(b) for b in ours._getitems(np.array(indices))] == expected


class CountingReads(MapDataset):
    """A user's MapDataset that records every ``_getitems`` call and every single read."""

    def __init__(self, size):
        super().__init__()
        self.size, self.block_calls, self.single_reads = size, [], 0

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        self.single_reads += 1
        return index % self.size

    def _getitems(self, indices):
        self.block_calls.append(list(indices))
        return [i % self.size for i in indices]


def test_map_batch_reads_a_batch_with_one_parent_block_read():
    parent = CountingReads(10)
    batched = parent.batch(4)
    assert batched[2].tolist() == [8, 9]
    assert parent.block_calls == [[8, 9]] and parent.single_reads == 0


def test_map_batch_reads_a_block_of_batches_with_one_parent_block_read():
    parent = CountingReads(10)
    batches = parent.batch(4)._getitems([0, 2, 1, 5])
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [8, 9], [4, 5, 6, 7], [8, 9]]
    # Batch 5 is batch 2 of the parent's second epoch: indices 18 and 19, as Grain reads them.
    assert parent.block_calls == [[0, 1, 2, 3, 8, 9, 4, 5, 6, 7, 18, 19]]
    assert parent.single_reads == 0


class LiveArrays:
    """Makes large arrays (each 32 KB) and counts how many are alive at most at once."""

    def __init__(self):
        self.live = self.most = 0

    def make(self, index):
        array = np.full((64, 128), index, dtype=np.float32)
        self.live += 1
        self.most = max(self.most, self.live)
        weakref.finalize(array, self._gone)
        return array

    def _gone(self):
        self.live -= 1


@pytest.mark.parametrize("read", ["to_iter_dataset", "getitem", "block"])
def test_map_batch_fills_its_rows_as_large_elements_are_made_never_holding_them_all(read):
    arrays = LiveArrays()
    batched = MapDataset.range(100).map(arrays.make).batch(32)
    if read == "to_iter_dataset":
        batches = list(batched.to_iter_dataset())
    elif read == "getitem":
        batches = [batched[i] for i in range(len(batched))]
    else:
        batches = batched._getitems(list(range(len(batched))))
    expected = [np.stack([np.full((64, 128), i, np.float32) for i in rows]) for rows in
                [range(0, 32), range(32, 64), range(64, 96), range(96, 100)]]  # fmt: skip
    assert len(batches) == 4
    for got, want in zip(batches, expected, strict=True):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
    # Each element is copied into its row as it is made, and freed: never a batch of them.
    assert arrays.most <= 2, arrays.most


def _size_of(index):
    """Elements 16-31 hold 32 KB (rows pay), the others 16 bytes (stacked at the end)."""
    return 64 * 128 if 16 <= index < 32 else 4


class CallLog:
    """Two map functions that log their calls: ``make`` an element, then ``scale`` it."""

    def __init__(self):
        self.calls = []

    def make(self, index):
        self.calls.append(("make", index))
        return np.full(_size_of(index), index, dtype=np.float32)

    def scale(self, array):
        self.calls.append(("scale", int(array[0])))
        return array * 2


def _patterns(calls, batch_size):
    """Per batch of logged calls: ``"block"`` (every element made, then every one scaled, as
    one block read of the parents) or ``"rows"`` (each made and scaled before the next)."""
    patterns = []
    for start in range(0, len(calls), 2 * batch_size):
        batch = calls[start : start + 2 * batch_size]
        kinds = [kind for kind, _ in batch]
        if kinds == ["make"] * batch_size + ["scale"] * batch_size:
            patterns.append("block")
        elif kinds == ["make", "scale"] * batch_size:
            patterns.append("rows")
        else:
            patterns.append(f"neither: {batch}")
    return patterns


def test_map_batch_reads_small_elements_in_one_block_after_a_first_batch_and_large_ones_by_rows():
    log = CallLog()
    batched = MapDataset.range(48).map(log.make).map(log.scale).batch(8)
    batches = [batched[i] for i in range(6)]
    for i, got in enumerate(batches):
        want = np.stack([np.full(_size_of(k), 2 * k, np.float32) for k in range(8 * i, 8 * i + 8)])
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
    # Batch 0 is made row by row and its first element says rows do not pay for 16 bytes:
    # batch 1 is one block read. Batch 2's elements (32 KB) come in that block read too, and
    # say rows pay: batch 3 is made row by row, so is batch 4, whose small elements send the
    # node back to block reads for batch 5.
    assert _patterns(log.calls, 8) == ["rows", "block", "block", "rows", "rows", "block"]


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_of_elements_that_grow_and_shrink_are_the_stacked_elements_at_any_worker_count(
    workers,
):
    batched = MapDataset.range(48).map(CallLog().make).batch(8).to_iter_dataset()
    if workers:
        batched = batched.mp_prefetch(lite.MultiprocessingOptions(num_workers=workers))
    want = [
        np.stack([np.full(_size_of(k), k, np.float32) for k in range(8 * i, 8 * i + 8)])
        for i in range(6)
    ]
    with iter(batched) as iterator:
        got = list(iterator)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


def _recording(base):
    class Recording(base):
        """A user's MapDataset that records the indices it is asked for (no wrap-around)."""

        def __init__(self, size):
            super().__init__()
            self.size, self.asked = size, []

        def __len__(self):
            return self.size

        def __getitem__(self, index):
            self.asked.append(index)
            return index

    return Recording


@pytest.mark.parametrize("drop_remainder", [False, True], ids=["keep-short", "drop-short"])
def test_map_batch_past_the_end_reads_the_parents_later_epochs_like_grain(drop_remainder):
    indices = list(range(-7, 12))
    ours_parent, theirs_parent = _recording(MapDataset)(7), _recording(grain.MapDataset)(7)
    ours = ours_parent.batch(3, drop_remainder=drop_remainder)
    theirs = theirs_parent.batch(3, drop_remainder=drop_remainder)
    assert _plain_reads(ours, indices) == _plain_reads(theirs, indices)
    assert ours_parent.asked == theirs_parent.asked
    assert [to_plain(b) for b in ours._getitems(indices)] == _plain_reads(theirs, indices)


class PlainUserDataset(MapDataset):
    """A user's MapDataset with only the public contract (``_getitems`` from the base class)."""

    def __init__(self, values):
        super().__init__()
        self.values = values

    def __len__(self):
        return len(self.values)

    def __getitem__(self, index):
        return self.values[index % len(self.values)]


class GrainPlainUserDataset(grain.MapDataset):
    def __init__(self, values):
        super().__init__()
        self.values = values

    def __len__(self):
        return len(self.values)

    def __getitem__(self, index):
        return self.values[index % len(self.values)]


Point = collections.namedtuple("Point", "x y")
PYTREES = {
    "dicts": [
        {"b": np.full((2,), i, np.float32), "a": (i, f"s{i}", np.int32(i))} for i in range(5)
    ],
    "namedtuples": [Point(i, [i, 1.5 * i]) for i in range(5)],
    "bytes": [b"ab", b"c", b"def", b"", b"g"],
    "strings": ["x", "yy", "zzz", "", "w"],
    "uint8-scalars": [np.array(i, dtype=np.uint8) for i in range(5)],
    "mixed-int-float": [1, 2.5, 3, 4.5, 5],
    "none-leaves": [{"a": None, "b": i} for i in range(5)],
    "bools": [True, False, True, True, False],
    "images": [np.full((2, 3, 3), i, np.uint8) for i in range(5)],
}


@pytest.mark.parametrize("kind", list(PYTREES))
def test_batch_stacks_pytrees_exactly_as_grain_dataset_batch(kind):
    values = PYTREES[kind]
    for batch_size in (1, 2, 5):
        ours = PlainUserDataset(values).batch(batch_size)
        theirs = GrainPlainUserDataset(values).batch(batch_size)
        indices = range(len(theirs))
        assert _plain_reads(ours, indices) == _plain_reads(theirs, indices), batch_size
        ours_iter = [to_plain(b) for b in MapDataset.source(values).to_iter_dataset().batch(2)]
        theirs_iter = [
            to_plain(b) for b in grain.MapDataset.source(values).to_iter_dataset().batch(2)
        ]
        assert ours_iter == theirs_iter


UPSTREAM_HOLES = {
    "filter": lambda m: m.range(10).filter(lambda x: x % 2),
    "filter-map": lambda m: m.range(10).filter(lambda x: x % 2).map(lambda x: x),
    "filter-shuffle": lambda m: m.range(10).filter(lambda x: x % 2).shuffle(1),
    "filter-slice": lambda m: m.range(10).filter(lambda x: x % 2)[1:5],
    "filter-repeat": lambda m: m.range(10).filter(lambda x: x % 2).repeat(2),
    "mix-with-filter": lambda m: m.mix([m.range(10).filter(lambda x: x % 2), m.range(5)]),
}
FILTER_MESSAGE = (
    "`MapDataset.batch` can not follow `MapDataset.filter` because `MapDataset.filter` can "
    "discard elements, which would leave holes inside batches. Convert `MapDataset` to "
    "`IterDataset` with `to_iter_dataset()` before calling `batch`."
)


@pytest.mark.parametrize("build", list(UPSTREAM_HOLES.values()), ids=list(UPSTREAM_HOLES))
def test_map_batch_refuses_a_filter_anywhere_upstream_like_grain(build):
    with pytest.raises(ValueError):
        build(grain.MapDataset).batch(2)
    with pytest.raises(ValueError) as raised:
        build(MapDataset).batch(2)
    assert str(raised.value) == FILTER_MESSAGE


class Halves(grain.experimental.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element):
        return [element, -element]


def test_map_batch_refuses_a_flat_map_upstream_like_grain():
    with pytest.raises(ValueError):
        grain.experimental.FlatMapMapDataset(grain.MapDataset.range(4), Halves()).batch(2)
    with pytest.raises(ValueError, match="can not follow `FlatMapMapDataset`"):
        FlatMapMapDataset(MapDataset.range(4), Halves()).batch(2)


def _keep_from_three(values, ds_class):
    class KeepFromThree(ds_class):
        """A user's node that returns None for elements below 3 (undetectable holes)."""

        def __init__(self, parent):
            super().__init__(parent)

        def __len__(self):
            return len(self._parent)

        def __getitem__(self, index):
            value = self._parent[index]
            return value if value >= 3 else None

    return KeepFromThree(values)


def test_map_batch_of_user_holes_behaves_like_grain():
    ours = _keep_from_three(MapDataset.range(9), MapDataset)
    theirs = _keep_from_three(grain.MapDataset.range(9), grain.MapDataset)
    assert ours.batch(3)[0] is None and theirs.batch(3)[0] is None  # all holes: None
    assert to_plain(ours.batch(3)[1]) == to_plain(theirs.batch(3)[1])
    with pytest.raises(ValueError):
        theirs.batch(2)[1]
    with pytest.raises(ValueError, match=r"None at positions \[0\]: .*to_iter_dataset\(\)"):
        ours.batch(2)[1]
    # A custom batch_fn receives the holes as they are, in a list.
    assert ours.batch(2, batch_fn=lambda xs: xs)[1] == theirs.batch(2, batch_fn=lambda xs: xs)[1]


def test_batch_fn_receives_the_list_of_elements_like_grain():
    def describe(values):
        return type(values).__name__, list(values)

    for build in (lambda m: m.range(7).batch(3, batch_fn=describe),):
        ours, theirs = build(MapDataset), build(grain.MapDataset)
        assert [ours[i] for i in range(4)] == [theirs[i] for i in range(4)]
    ours_iter = list(MapDataset.range(7).to_iter_dataset().batch(3, batch_fn=describe))
    theirs_iter = list(grain.MapDataset.range(7).to_iter_dataset().batch(3, batch_fn=describe))
    assert ours_iter == theirs_iter


@pytest.mark.parametrize(
    "batch_size, error, message",
    [
        (
            0,
            ValueError,
            "batch_size must be positive. Got batch_size=0; pass Batch(batch_size=N) with N >= 1.",
        ),
        (
            -1,
            ValueError,
            "batch_size must be positive. Got batch_size=-1; pass Batch(batch_size=N) with N >= 1.",
        ),
        (
            2.5,
            TypeError,
            "batch_size must be an int, got 2.5 of type float; pass a positive integer such as "
            "Batch(batch_size=32).",
        ),
        (
            "2",
            TypeError,
            "batch_size must be an int, got '2' of type str; pass a positive integer such as "
            "Batch(batch_size=32).",
        ),
        (
            None,
            TypeError,
            "batch_size must be an int, got None of type NoneType; pass a positive integer such as "
            "Batch(batch_size=32).",
        ),
    ],
    ids=["zero", "negative", "float", "str", "none"],
)
def test_batch_size_errors_have_grains_types_and_say_the_fix(batch_size, error, message):
    with pytest.raises(error):
        grain.MapDataset.range(5).batch(batch_size)[0]  # grain checks a float only on reading
    for ds in (MapDataset.range(5), MapDataset.range(5).to_iter_dataset()):
        with pytest.raises(error) as raised:
            ds.batch(batch_size)
        assert str(raised.value) == message


def test_a_batch_fn_that_is_not_callable_is_a_type_error_when_the_batch_is_built():
    with pytest.raises(TypeError):  # grain only fails when a batch is read
        grain.MapDataset.range(5).batch(2, batch_fn=5)[0]
    with pytest.raises(TypeError) as raised:
        MapDataset.range(5).batch(2, batch_fn=5)
    assert str(raised.value) == (
        "batch_fn must be callable or None (got 5 of type int); pass a function from the list "
        "of elements to the batch, or None to stack them."
    )


ITER_PIPELINES = {
    "range": lambda m, bs, drop: m.range(10).to_iter_dataset().batch(bs, drop_remainder=drop),
    "filtered": lambda m, bs, drop: (
        m.range(20).to_iter_dataset().filter(lambda x: x % 3).batch(bs, drop_remainder=drop)
    ),
    "mapped-dicts": lambda m, bs, drop: (
        m.range(9)
        .map(lambda x: {"x": x, "y": np.ones(2) * x})
        .to_iter_dataset()
        .batch(bs, drop_remainder=drop)
    ),
    "batch-of-batches": lambda m, bs, drop: (
        m.range(12).to_iter_dataset().batch(2).batch(bs, drop_remainder=drop)
    ),
}
ITER_CASES = [
    (name, bs, drop) for name in ITER_PIPELINES for bs in (1, 3, 4) for drop in (False, True)
]


def _run_plain(iterator):
    elements, states = run_with_states(iterator)
    return elements, states


@pytest.mark.parametrize(
    "name, batch_size, drop",
    ITER_CASES,
    ids=[f"{n}-{b}-{'drop' if d else 'keep'}" for n, b, d in ITER_CASES],
)
def test_iter_batch_matches_grain_elements_and_states_after_every_step(name, batch_size, drop):
    build = ITER_PIPELINES[name]
    ours = _run_plain(iter(build(MapDataset, batch_size, drop)))
    theirs = _run_plain(iter(build(grain.MapDataset, batch_size, drop)))
    assert ours == theirs


@pytest.mark.parametrize("name", list(ITER_PIPELINES))
def test_iter_batch_restores_from_grains_states_and_grain_from_ours(name):
    elements, states = _run_plain(iter(ITER_PIPELINES[name](grain.MapDataset, 3, False)))
    for k, state in enumerate(states):
        ours = iter(ITER_PIPELINES[name](MapDataset, 3, False))
        ours.set_state(json.loads(json.dumps(state)))
        assert [to_plain(b) for b in ours] == elements[k:], k
        theirs = iter(ITER_PIPELINES[name](grain.MapDataset, 3, False))
        ours_state = iter(ITER_PIPELINES[name](MapDataset, 3, False))
        for _ in range(k):
            next(ours_state)
        theirs.set_state(ours_state.get_state())
        assert [to_plain(b) for b in theirs] == elements[k:], k


@pytest.mark.parametrize("drop", [False, True], ids=["keep-short", "drop-short"])
def test_iter_batch_resumes_at_every_step(drop):
    assert_dataset_resumes_at_every_step(
        lambda: iter(
            MapDataset.range(23)
            .to_iter_dataset()
            .filter(lambda x: x % 4)
            .batch(3, drop_remainder=drop)
        )
    )


class CountTo(DatasetIterator):
    """A user's iterator over 1..limit with its own state shape."""

    def __init__(self, limit):
        super().__init__()
        self.i, self.limit, self.closed_calls = 0, limit, 0

    def __next__(self):
        if self.i >= self.limit:
            raise StopIteration
        self.i += 1
        return self.i

    def get_state(self):
        return {"i": self.i}

    def set_state(self, state):
        self.i = state["i"]

    def close(self):
        self.closed_calls += 1
        super().close()


class CountToDataset(IterDataset):
    def __init__(self, limit):
        super().__init__()
        self.limit, self.iterators = limit, []

    def __iter__(self):
        self.iterators.append(CountTo(self.limit))
        return self.iterators[-1]


class GrainCountTo(grain.DatasetIterator):
    def __init__(self, limit):
        super().__init__()
        self.i, self.limit = 0, limit

    def __next__(self):
        if self.i >= self.limit:
            raise StopIteration
        self.i += 1
        return self.i

    def get_state(self):
        return {"i": self.i}

    def set_state(self, state):
        self.i = state["i"]


class GrainCountToDataset(grain.IterDataset):
    def __init__(self, limit):
        super().__init__()
        self.limit = limit

    def __iter__(self):
        return GrainCountTo(self.limit)


def test_iter_batch_over_a_users_iterator_keeps_its_state_shape_like_grain():
    ours = _run_plain(iter(CountToDataset(7).batch(2)))
    theirs = _run_plain(iter(GrainCountToDataset(7).batch(2)))
    assert ours == theirs
    assert ours[1][-1] == {"i": 7}


def test_iter_batch_close_reaches_the_parent_iterator():
    dataset = CountToDataset(7)
    with iter(dataset.batch(2)) as iterator:
        next(iterator)
    assert dataset.iterators[0].closed_calls == 1


def _fails_at_four(x):
    if x == 4:
        raise KeyError("boom")
    return x


def test_iter_batch_loses_the_partial_batch_when_the_parent_raises_like_grain():
    def run(m):
        iterator = iter(m.range(10).to_iter_dataset().map(_fails_at_four).batch(3))
        out = [to_plain(next(iterator)), iterator.get_state()]
        with pytest.raises(KeyError):
            next(iterator)
        out.append(iterator.get_state())
        out.append(to_plain(next(iterator)))
        return out

    assert run(MapDataset) == run(grain.MapDataset)


def test_iter_batch_keeps_raising_stop_iteration_at_the_end():
    iterator = iter(MapDataset.range(4).to_iter_dataset().batch(3, drop_remainder=True))
    assert [b.tolist() for b in iterator] == [[0, 1, 2]]
    with pytest.raises(StopIteration):
        next(iterator)
    assert iterator.get_state() == {"next_index": 4}


def test_batch_datasets_travel_by_pickle_and_cloudpickle():
    for ds in (MapDataset.range(10).batch(3), MapDataset.range(10).to_iter_dataset().batch(3)):
        for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
            copy = loads(dumps(ds))
            assert [b.tolist() for b in copy] == [b.tolist() for b in ds]
    ds = MapDataset.range(10).batch(3, batch_fn=lambda xs: sum(xs))
    assert list(cloudpickle.loads(cloudpickle.dumps(ds))) == [3, 12, 21, 9]
