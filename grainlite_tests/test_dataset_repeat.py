"""``MapDataset.repeat`` against the installed grain: lengths, epochs, ``reseed_each_epoch`` (a
new shuffle and new random numbers per epoch, or the first epoch again) and errors."""

from __future__ import annotations

import sys

import grain
import pytest

import grainlite.dataset as gd
from grainlite.dataset.map_dataset import MapDataset


def _counter(x, rng):
    return (x, int(rng.bit_generator.state["state"]["counter"][3]))


def _pipelines(lib):
    m = lib.MapDataset
    return {
        "two-epochs": m.range(3).repeat(2),
        "endless": m.range(3).repeat(),
        "random-map-reseeded": m.range(3).random_map(_counter, seed=2).repeat(2),
        "random-map-same-each-epoch": m.range(3)
        .random_map(_counter, seed=2)
        .repeat(2, reseed_each_epoch=False),
        "shuffle-reseeded": m.range(4).shuffle(3).repeat(3),
        "shuffle-same-each-epoch": m.range(4).shuffle(3).repeat(3, reseed_each_epoch=False),
        "repeat-of-repeat": m.range(3).repeat(2).repeat(3),
        "finite-then-endless": m.range(3).repeat(2).repeat(),
        "filter": m.range(5).filter(lambda x: x % 2).repeat(2),
    }


@pytest.mark.parametrize("name", list(_pipelines(grain)))
def test_repeat_matches_grain_in_length_and_elements(name):
    ours, theirs = _pipelines(gd)[name], _pipelines(grain)[name]
    assert len(ours) == len(theirs)
    indices = list(range(14))
    assert [ours[i] for i in indices] == [theirs[i] for i in indices]
    assert ours._getitems(indices) == [theirs[i] for i in indices]


def test_negative_indices_match_grain_when_epochs_are_the_same():
    ours = MapDataset.range(3).repeat(2, reseed_each_epoch=False)
    theirs = grain.MapDataset.range(3).repeat(2, reseed_each_epoch=False)
    assert [ours[i] for i in range(-4, 0)] == [theirs[i] for i in range(-4, 0)]
    assert ours._getitems(range(-4, 0)) == [theirs[i] for i in range(-4, 0)]


def test_endless_length_is_sys_maxsize_and_empty_stays_empty():
    assert len(MapDataset.range(3).repeat()) == sys.maxsize
    assert len(MapDataset.range(0).repeat()) == len(MapDataset.range(0).repeat(3)) == 0


def test_reseeded_epochs_differ_and_unreseeded_epochs_repeat():
    reseeded = list(MapDataset.range(6).shuffle(1).repeat(2))
    same = list(MapDataset.range(6).shuffle(1).repeat(2, reseed_each_epoch=False))
    assert reseeded[:6] != reseeded[6:] and same[:6] == same[6:]


@pytest.mark.parametrize("epochs", [0, -1])
def test_non_positive_epochs_are_value_errors_as_in_grain(epochs):
    with pytest.raises(ValueError):
        grain.MapDataset.range(3).repeat(epochs)
    with pytest.raises(ValueError, match=f"num_epochs must be positive, but got {epochs}"):
        MapDataset.range(3).repeat(epochs)


def test_repeating_an_endless_dataset_is_a_value_error_as_in_grain():
    with pytest.raises(ValueError):
        grain.MapDataset.range(3).repeat().repeat()
    with pytest.raises(ValueError) as raised:
        MapDataset.range(3).repeat().repeat()
    assert str(raised.value) == (
        "Repeating already infinite dataset RepeatMapDataset(num_epochs=None) does nothing: its "
        "length is sys.maxsize (endless); drop this repeat(), or give the repeat below it a "
        "num_epochs."
    )


def test_non_integer_epochs_are_type_errors():
    with pytest.raises(TypeError, match=r"repeat\(num_epochs=...\) must be an int or None"):
        MapDataset.range(3).repeat(1.5)


def test_to_iter_over_a_repeat_reads_every_epoch_in_order():
    assert list(MapDataset.range(3).repeat(2).to_iter_dataset()) == [0, 1, 2, 0, 1, 2]


@pytest.mark.parametrize("epochs", [1, 2])
def test_repeating_an_endless_dataset_a_number_of_times_is_a_value_error_as_in_grain(epochs):
    for library_map_dataset in (grain.MapDataset, MapDataset):
        with pytest.raises(ValueError, match="Repeating already infinite dataset"):
            library_map_dataset.range(3).repeat().repeat(epochs)
