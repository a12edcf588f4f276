"""RangeDataSource against Grain's; also the helpers of grainlite.sources.protocol."""

from __future__ import annotations

import pickle

import absl.flags
import cloudpickle
import numpy as np
import pytest

from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sources.protocol import (
    RandomAccessDataSource,
    RecordKeyOutOfRangeError,
    read_many,
    source_repr,
)
from grainlite.sources.range import RangeArgumentError, RangeDataSource

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags; they must count as parsed.
grain = pytest.importorskip("grain.python")

pytestmark = pytest.mark.timeout(30)

VALID_RANGES = [
    (0, 8, 1),
    (0, 0, 1),
    (3, 3, -2),
    (0, 10, 3),
    (0, 9, 3),
    (5, 0, -1),
    (10, 2, -3),
    (-7, 7, 2),
    (-7, -20, -4),
    (100, 1000, 37),
    (2**40, 2**40 + 5, 1),
    (0, 1, 10**6),
]


def test_length_records_and_repr_match_grain_for_many_ranges():
    for start, stop, step in VALID_RANGES:
        ours, theirs = RangeDataSource(start, stop, step), grain.RangeDataSource(start, stop, step)
        case = f"RangeDataSource({start}, {stop}, {step})"
        assert len(ours) == len(theirs), case
        assert [ours[k] for k in range(len(ours))] == [theirs[k] for k in range(len(theirs))], case
        assert repr(ours) == repr(theirs), case
        assert ours.__getitems__(list(range(len(ours)))) == [ours[k] for k in range(len(ours))]


def test_impossible_arguments_fail_with_grains_assertion_errors():
    for start, stop, step in [(0, 8, 0), (8, 0, 1), (0, -1, 1), (0, 1, -1), (5, 9, -2)]:
        with pytest.raises(AssertionError) as theirs:
            grain.RangeDataSource(start, stop, step)
        with pytest.raises(RangeArgumentError) as ours:
            RangeDataSource(start, stop, step)
        assert isinstance(ours.value, AssertionError)
        assert isinstance(ours.value, GrainliteValueError)
        assert str(ours.value).startswith(str(theirs.value)), (start, stop, step)


def test_a_zero_step_names_the_rule_and_the_fix():
    with pytest.raises(RangeArgumentError) as error:
        RangeDataSource(0, 8, 0)
    assert str(error.value) == (
        "step can't be zero. RangeDataSource step must be non-zero (got step=0); pass step=1 to "
        "count up or step=-1 to count down."
    )


def test_a_backward_range_names_the_length_and_the_fix():
    with pytest.raises(RangeArgumentError) as error:
        RangeDataSource(8, 0, 2)
    assert str(error.value) == (
        "length can't be negative. RangeDataSource(start=8, stop=0, step=2) counts up from start "
        "but stop lies the other way, giving length -4; swap start and stop or flip the sign of "
        "step."
    )


def test_a_non_integer_argument_is_a_type_error():
    with pytest.raises(GrainliteTypeError) as error:
        RangeDataSource(0.5, 8, 1)
    assert str(error.value) == (
        "RangeDataSource start must be an int (got float 0.5); pass a whole number, e.g. "
        "start=int(x)."
    )


def test_numpy_integers_work_as_arguments_and_keys():
    source = RangeDataSource(np.int64(2), np.int32(12), np.uint8(5))
    assert repr(source) == "RangeDataSource(start=2, stop=12, step=5)"
    assert source[np.int64(1)] == 7
    assert source[True] == 7
    assert type(source[np.int16(0)]) is int


@pytest.mark.parametrize("key", [-1, 8, 2**70], ids=["minus one", "length", "huge"])
def test_keys_outside_the_range_raise_index_error_with_grains_text(key):
    source = RangeDataSource(0, 8, 1)
    with pytest.raises(IndexError) as error:
        source[key]
    assert str(error.value) == (
        f"Index {key} out of range for 8: RangeDataSource keys must be in [0, 8); read a key in "
        f"that range, e.g. key % len(source) (here {key % 8}), which is how the DataLoader wraps "
        "sampler keys."
    )
    with pytest.raises(IndexError) as grains:
        grain.RangeDataSource(0, 8, 1)[key]
    assert str(error.value).startswith(str(grains.value))


def test_a_non_integer_key_is_a_type_error():
    with pytest.raises(GrainliteTypeError) as error:
        RangeDataSource(0, 8, 1)[2.0]
    assert str(error.value) == (
        "RangeDataSource keys must be ints (got float 2.0); pass an int or a numpy integer."
    )


def test_batched_reads_equal_single_reads_for_any_key_order():
    source = RangeDataSource(-50, 10**6, 7)
    keys = np.random.default_rng(3).integers(0, len(source), 500)
    expected = [source[k] for k in keys.tolist()]
    assert source.__getitems__(keys.tolist()) == expected
    assert source.__getitems__(keys) == expected
    assert source.__getitems__(keys.astype(np.uint32)) == expected
    assert source.__getitems__([]) == []


def test_batched_reads_report_the_first_bad_key():
    source = RangeDataSource(0, 8, 1)
    with pytest.raises(RecordKeyOutOfRangeError, match=r"^Index 9 out of range for 8"):
        source.__getitems__([3, 9, -1])
    with pytest.raises(GrainliteTypeError, match=r"got float 1\.5"):
        source.__getitems__([1, 1.5])


def test_batched_reads_of_ranges_beyond_int64_stay_exact():
    source = RangeDataSource(2**63 - 2, 2**63 + 4, 1)
    assert source.__getitems__([0, 5]) == [2**63 - 2, 2**63 + 3]


def test_pickles_to_an_equal_source():
    source = RangeDataSource(1, 30, 4)
    for dumps, loads in [(pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)]:
        copy = loads(dumps(source))
        assert repr(copy) == repr(source)
        assert [copy[k] for k in range(len(copy))] == list(range(1, 30, 4))


# grainlite.sources.protocol


@pytest.mark.parametrize(
    "source, expected",
    [
        ([1, 2], "<class 'list'>"),
        ((1, 2), "<class 'tuple'>"),
        (np.arange(3), "<class 'numpy.ndarray'>"),
        (RangeDataSource(0, 3, 1), "RangeDataSource(start=0, stop=3, step=1)"),
    ],
    ids=["list", "tuple", "ndarray", "range source"],
)
def test_source_repr_hides_in_memory_data_as_grain_does(source, expected):
    assert source_repr(source) == expected
    data_loader = pytest.importorskip("grain._src.python.data_loader")
    assert data_loader._source_repr(source) == expected


def test_lists_and_range_sources_satisfy_the_protocol():
    assert isinstance([1], RandomAccessDataSource)
    assert isinstance(RangeDataSource(0, 1, 1), RandomAccessDataSource)
    assert not isinstance(object(), RandomAccessDataSource)


class _CountingSource:
    def __init__(self):
        self.batched_calls = 0

    def __len__(self):
        return 10

    def __getitem__(self, key):
        return key * 2

    def __getitems__(self, keys):
        self.batched_calls += 1
        return [key * 2 for key in keys]


def test_read_many_uses_getitems_where_the_source_has_it():
    source = _CountingSource()
    assert read_many(source)([1, 4]) == [2, 8]
    assert source.batched_calls == 1


def test_read_many_falls_back_to_getitem():
    assert read_many([10, 11, 12])([2, 0]) == [12, 10]
