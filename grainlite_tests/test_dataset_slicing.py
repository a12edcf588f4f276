"""Slices of a ``MapDataset`` against the installed grain: lengths, elements, composition, the
epoch passed down past the end, and Grain bug #1200 (``shuffle → slice → repeat``) fixed."""

from __future__ import annotations

import grain
import numpy as np
import pytest

import grainlite.dataset as gd
from grainlite.dataset.map_dataset import MapDataset

SLICES = [
    slice(1, 10, 2),
    slice(None, None, -1),
    slice(-5, None),
    slice(100, 200),
    slice(5, 2),
    slice(None, None, 3),
    slice(8, 2, -2),
]


def _counter(x, rng):
    return (x, int(rng.bit_generator.state["state"]["counter"][3]))


@pytest.mark.parametrize("sl", SLICES, ids=[str(s) for s in SLICES])
def test_slices_match_grain_in_length_and_elements_past_the_end(sl):
    ours, theirs = MapDataset.range(20).map(int)[sl], grain.MapDataset.range(20).map(int)[sl]
    assert type(ours).__name__ == type(theirs).__name__ == "SliceMapDataset"
    assert len(ours) == len(theirs)
    if len(theirs):
        indices = list(range(-len(theirs), 3 * len(theirs)))
        assert [ours[i] for i in indices] == [theirs[i] for i in indices]
        assert ours._getitems(indices) == [theirs[i] for i in indices]


@pytest.mark.parametrize(
    "sl", SLICES[:3] + SLICES[5:], ids=[str(s) for s in SLICES[:3] + SLICES[5:]]
)
def test_epoch_passed_down_past_the_end_matches_grain_without_a_shuffle(sl):
    def build(lib):
        return lib.MapDataset.range(20).random_map(_counter, seed=1)[sl]

    ours, theirs = build(gd), build(grain)
    indices = list(range(3 * len(theirs)))
    assert ours._getitems(indices) == [theirs[i] for i in indices]


def test_composed_slices_match_grain():
    for build in (
        lambda lib: lib.MapDataset.range(20)[1:10:2][::3],
        lambda lib: lib.MapDataset.range(20)[1:10:2][1:],
        lambda lib: lib.MapDataset.range(20).slice(slice(2, None)).slice(slice(None, None, -2)),
    ):
        ours, theirs = build(gd), build(grain)
        assert len(ours) == len(theirs) and list(ours) == list(theirs)


def test_shuffle_slice_repeat_keeps_every_epoch_inside_the_slice_grain_bug_1200():
    first = MapDataset.range(10).shuffle(1)[0:5]
    repeated = first.repeat(3)
    epoch_elements = set(first)
    assert all(repeated[i] in epoch_elements for i in range(len(repeated)))
    assert list(repeated) == list(first) * 3
    leaky = grain.MapDataset.range(10).shuffle(1)[0:5].repeat(3)
    assert set(leaky) - epoch_elements, "grain 0.2.18 leaks here; if not, the bug was fixed"


def test_slice_over_a_slice_of_a_shuffle_also_stays_inside():
    inner = MapDataset.range(12).map(int).shuffle(4)[::2]
    view = inner[1:4]
    assert {view[i] for i in range(30)} == set(view)


def test_slices_of_endless_datasets_have_grains_lengths_and_far_indices():
    def build(lib):
        return lib.MapDataset.range(3).repeat()

    for sl in (slice(5, None), slice(None, None, 2), slice(2, 10)):
        ours, theirs = build(gd)[sl], build(grain)[sl]
        assert len(ours) == len(theirs)
        far = [0, 1, len(theirs) - 1]
        assert [ours[i] for i in far] == [theirs[i] for i in far]
        assert ours._getitems(far) == [theirs[i] for i in far]


def test_numpy_index_arrays_read_like_lists():
    ds = MapDataset.range(20)[3:15:4]
    assert ds._getitems(np.arange(7)) == ds._getitems(list(range(7)))


def test_slice_of_something_else_is_a_value_error_as_in_grain():
    with pytest.raises(ValueError):
        grain.MapDataset.range(3).slice(3)
    with pytest.raises(ValueError, match=r"slice\(sl\) needs a Python slice \(got 3 of type int\)"):
        MapDataset.range(3).slice(3)


def test_zero_step_is_a_value_error_as_in_grain():
    with pytest.raises(ValueError):
        grain.MapDataset.range(3)[::0]
    with pytest.raises(ValueError):
        MapDataset.range(3)[::0]


def test_reading_an_empty_slice_is_zero_division():
    with pytest.raises(ZeroDivisionError):
        MapDataset.range(3)[5:][0]


def test_slice_of_something_else_names_the_type_in_grains_words_and_quotes_a_bounded_value():
    with pytest.raises(ValueError, match=r"^sl is not a slice: <class 'list'>; ") as raised:
        MapDataset.range(3).slice(list(range(10_000)))
    assert "ds[2:10:2]" in str(raised.value)
    assert len(str(raised.value)) < 400
