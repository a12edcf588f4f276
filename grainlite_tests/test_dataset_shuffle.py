"""``MapDataset.shuffle`` against the installed grain: the permutation of every epoch (seed plus
epoch, through grainlite's index shuffle), the index passed down, block reads, seeds and errors."""

from __future__ import annotations

import sys

import grain
import numpy as np
import pytest

import grainlite.dataset as gd
from grainlite.dataset.map_dataset import MapDataset
from grainlite.sampling.index_shuffle import index_shuffle_array


def _counter(x, rng):
    return (x, int(rng.bit_generator.state["state"]["counter"][3]))


@pytest.mark.parametrize("length", [1, 2, 5, 37, 20_000])
@pytest.mark.parametrize("seed", [0, 5, 2**32 - 1])
def test_every_epoch_matches_grain(length, seed):
    ours, theirs = (
        MapDataset.range(length).shuffle(seed),
        grain.MapDataset.range(length).shuffle(seed),
    )
    indices = [*range(min(3 * length, 400)), -1, -length - 3, 10**9, sys.maxsize - 1]
    expected = [theirs[i] for i in indices]
    assert len(ours) == len(theirs)
    assert [ours[i] for i in indices] == expected
    assert ours._getitems(indices) == expected
    assert ours._getitems(np.array(indices[:-1])) == expected[:-1]


def test_epoch_e_is_index_shuffle_with_seed_plus_e_wrapping_at_2_to_the_32():
    seed, n = 2**32 - 2, 6
    ds = MapDataset.range(n).shuffle(seed)
    for epoch, epoch_seed in enumerate([2**32 - 2, 2**32 - 1, 0, 1]):
        expected = index_shuffle_array(np.arange(n), n - 1, epoch_seed).tolist()
        assert [ds[epoch * n + k] for k in range(n)] == expected


def test_the_index_passed_down_carries_the_epoch_like_grain():
    def build(lib):
        return lib.MapDataset.range(4).random_map(_counter, seed=1).shuffle(5)

    assert [build(gd)[i] for i in range(12)] == [build(grain)[i] for i in range(12)]


def test_seed_from_an_upstream_seed_node_matches_grain():
    def build(lib):
        return lib.MapDataset.range(10).seed(7).shuffle().shuffle()

    assert [build(gd)[i] for i in range(25)] == [build(grain)[i] for i in range(25)]


def test_filtered_elements_stay_holes_at_their_shuffled_places():
    def build(lib):
        return lib.MapDataset.range(9).filter(lambda x: x % 3 == 0).shuffle(1)

    assert build(gd)._getitems(range(18)) == [build(grain)[i] for i in range(18)]


@pytest.mark.parametrize("seed", [-1, 2**32, 2**63], ids=["negative", "2**32", "2**63"])
def test_seed_outside_uint32_is_a_value_error_as_in_grain(seed):
    with pytest.raises(ValueError):
        grain.MapDataset.range(4).shuffle(seed)
    with pytest.raises(ValueError, match="seed"):
        MapDataset.range(4).shuffle(seed)


def test_seed_out_of_range_message_says_the_rule_and_fix():
    with pytest.raises(ValueError) as raised:
        MapDataset.range(4).shuffle(2**32)
    assert str(raised.value) == (
        "Seed must be an integer between 0 and 2**32-1 (got seed=4294967296); pass a seed in "
        "that range, e.g. seed % 2**32."
    )


def test_empty_dataset_has_length_zero_and_reading_it_is_zero_division():
    ds = MapDataset.range(0).shuffle(3)
    assert len(ds) == 0
    with pytest.raises(ZeroDivisionError):
        ds[0]


def test_block_reads_spanning_epochs_shuffle_each_epoch_separately():
    ds = MapDataset.range(7).shuffle(9)
    indices = [13, 0, 6, 7, 20, 14, 3]
    assert ds._getitems(indices) == [ds[i] for i in indices]


def test_slices_of_a_shuffle_are_views():
    ds = MapDataset.range(10).shuffle(3)
    assert list(ds[2:5]) == [ds[2], ds[3], ds[4]]
