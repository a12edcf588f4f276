"""``MapDataset.source`` and ``MapDataset.range`` against the installed grain: lengths, elements
(indices past the end and negative ones wrap), block reads and error types."""

from __future__ import annotations

import pickle

import grain
import numpy as np
import pytest

import grainlite
from grainlite.dataset.map_dataset import MapDataset

RANGE_ARGS = [(5,), (0,), (2, 10, 3), (10, 2, -1), (-3, 4), (7, 7), (0, 100, 7)]


def _read(ds, indices):
    return [ds[i] for i in indices]


@pytest.mark.parametrize("args", RANGE_ARGS, ids=[str(a) for a in RANGE_ARGS])
def test_range_matches_grain_in_length_and_elements_including_wrapped_indices(args):
    ours, theirs = MapDataset.range(*args), grain.MapDataset.range(*args)
    assert len(ours) == len(theirs)
    if len(theirs):
        indices = list(range(-2 * len(theirs), 3 * len(theirs)))
        assert _read(ours, indices) == _read(theirs, indices)
        assert ours._getitems(indices) == _read(theirs, indices)
        assert ours._getitems(np.array(indices)) == _read(theirs, indices)


def test_range_elements_are_python_ints_from_block_reads():
    values = MapDataset.range(3, 20, 4)._getitems(range(4))
    assert values == [3, 7, 11, 15] and all(type(v) is int for v in values)


def test_range_past_int64_reads_exact_python_ints():
    ds = MapDataset.range(2**70, 2**70 + 10, 3)
    assert ds._getitems([0, 1, 5]) == [2**70, 2**70 + 3, 2**70 + 3]


@pytest.mark.parametrize(
    "args, error",
    [((0, 10, 0), ValueError), (("a",), TypeError), ((1.5,), TypeError)],
    ids=["zero-step", "str", "float"],
)
def test_range_rejects_what_grain_rejects_with_the_same_error_type(args, error):
    with pytest.raises(error):
        grain.MapDataset.range(*args)
    with pytest.raises(error):
        MapDataset.range(*args)


@pytest.mark.parametrize(
    "source",
    [[10, 20, 30], (1, 2), np.arange(6) * 2, "abc"],
    ids=["list", "tuple", "numpy", "str"],
)
def test_source_matches_grain_in_length_and_elements(source):
    ours, theirs = MapDataset.source(source), grain.MapDataset.source(source)
    assert type(ours).__name__ == type(theirs).__name__ == "SourceMapDataset"
    assert len(ours) == len(theirs)
    indices = list(range(-len(source) - 2, 3 * len(source)))
    assert _read(ours, indices) == _read(theirs, indices)
    assert ours._getitems(indices) == _read(theirs, indices)


class _BatchedSource:
    """A source with a batched read, recording how it is called."""

    def __init__(self, n):
        self.n, self.batched, self.single = n, [], 0

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        self.single += 1
        return key * 10

    def __getitems__(self, keys):
        self.batched.append(list(keys))
        return [k * 10 for k in keys]


def test_source_block_reads_use_the_sources_batched_read_with_wrapped_keys():
    source = _BatchedSource(5)
    assert MapDataset.source(source)._getitems([4, 5, -1, 12]) == [40, 0, 40, 20]
    assert source.batched == [[4, 0, 4, 2]] and source.single == 0


def test_source_reads_grainlites_in_memory_source_in_one_batched_call():
    with grainlite.InMemoryDataSource([b"a", b"bb", b"ccc"]) as source:
        assert MapDataset.source(source)._getitems([2, 0, 4]) == [b"ccc", b"a", b"bb"]


def test_empty_source_raises_zero_division_as_grain_does():
    with pytest.raises(ZeroDivisionError):
        grain.MapDataset.source([])[0]
    with pytest.raises(ZeroDivisionError, match="the source is empty"):
        MapDataset.source([])[0]
    assert len(MapDataset.source([])) == 0


@pytest.mark.parametrize(
    ("empty", "index", "what"),
    [
        (MapDataset.source([]), "x" * 100_000, "SourceMapDataset index 'xxx"),
        (MapDataset.range(0), "x" * 100_000, "RangeMapDataset index 'xxx"),
        (
            MapDataset.concatenate([MapDataset.range(0)]),
            10**1000,
            "ConcatenateMapDataset index 1000",
        ),
    ],
    ids=["source", "range", "concatenate"],
)
def test_reading_an_empty_node_quotes_the_index_briefly(empty, index, what):
    with pytest.raises(ZeroDivisionError) as raised:
        empty[index]
    message = str(raised.value)
    assert message.startswith(what) and "cannot be read" in message and len(message) < 500


def test_source_index_of_the_wrong_type_is_a_type_error_naming_the_node():
    with pytest.raises(TypeError):
        grain.MapDataset.source([1, 2])["a"]
    with pytest.raises(
        TypeError,
        match=r"SourceMapDataset indices must be integers or slices \(got 'a' of type str\)",
    ):
        MapDataset.source([1, 2])["a"]


def test_source_and_range_slices_are_views():
    assert list(MapDataset.source([1, 2, 3])[0:2]) == list(grain.MapDataset.source([1, 2, 3])[0:2])
    assert list(MapDataset.range(10)[::3]) == [0, 3, 6, 9]


def test_sources_pickle_and_read_the_same_after():
    for ds in (MapDataset.range(3, 9), MapDataset.source(list("abcdef"))):
        clone = pickle.loads(pickle.dumps(ds))
        assert clone._getitems(range(8)) == ds._getitems(range(8))


class _FailsAtKey:
    """Records ``key * 10``; reading record ``bad`` raises ``error`` (with or without a batched
    ``__getitems__``, which fails for any block holding ``bad``)."""

    def __init__(self, length, bad, error=ValueError):
        self.length, self.bad, self.error = length, bad, error

    def __len__(self):
        return self.length

    def __getitem__(self, key):
        if key == self.bad:
            raise self.error(f"cannot decode record {key}")
        return key * 10


class _BatchedFailsAtKey(_FailsAtKey):
    def __getitems__(self, keys):
        return [self[k] for k in keys]


def _notes(error):
    return " ".join(getattr(error, "__notes__", []))


@pytest.mark.parametrize("kind", [_FailsAtKey, _BatchedFailsAtKey])
def test_a_source_error_in_a_dataset_block_read_names_the_failing_record_key(kind):
    ds = MapDataset.source(kind(10, 7)).map(lambda x: x + 1)
    iterator = iter(ds.to_iter_dataset())
    assert [next(iterator) for _ in range(7)] == [k * 10 + 1 for k in range(7)]
    with pytest.raises(ValueError, match="cannot decode record 7") as caught:
        next(iterator)
    name = kind.__name__
    assert f"grainlite: the data source {name} failed reading record key 7." in _notes(caught.value)
    assert [next(iterator) for _ in range(2)] == [81, 91]  # the stream goes on after it


def test_a_source_that_serves_fewer_records_than_its_len_names_the_key_and_the_fix():
    ds = MapDataset.source(_FailsAtKey(5, 3, IndexError))
    with pytest.raises(IndexError) as caught:
        ds._getitems([5, 6, 7, 8, 9])  # indices past the end wrap: record keys 0..4
    assert _notes(caught.value) == (
        "grainlite: the data source _FailsAtKey failed reading record key 3; its len() is 5: if "
        "__getitem__ serves fewer records, fix __len__ (the sampler reads keys 0..len-1)."
    )


def test_a_sequentially_sliced_source_names_the_record_key_of_the_whole_source():
    ds = MapDataset.source(_FailsAtKey(10, 7))
    ds.set_slice(slice(1, None, 2), sequential_slice=True)  # worker 1 of 2: records 5..9
    assert ds._getitems([0, 1]) == [50, 60]
    with pytest.raises(ValueError, match="cannot decode record 7") as caught:
        ds._getitems([0, 1, 2, 3])
    assert "failed reading record key 7." in _notes(caught.value)
