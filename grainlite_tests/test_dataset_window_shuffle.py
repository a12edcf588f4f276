"""WindowShuffleIterDataset / WindowShuffleMapDataset: Grain's order and state, and restores of a
fresh iterator (the case of google/grain#1178)."""

from __future__ import annotations

import grain as real_grain
import pytest

import grainlite as grain
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step
from grainlite_tests.support.stream_checks import assert_matches_grain, rest_after, run

pytestmark = pytest.mark.timeout(60)

CASES = [(10, 3, 1), (12, 6, 1), (6, 3, 5), (4, 1, 2), (9, 4, 0), (0, 3, 1)]
IDS = ["partial-last", "two-full", "exact", "size-one", "seed-zero", "empty"]


def _iter_builder(n, window_size, seed):
    def build(lib):
        parent = lib.MapDataset.range(n).map(lambda x: x * 3).to_iter_dataset()
        return iter(
            lib.experimental.WindowShuffleIterDataset(parent, window_size=window_size, seed=seed)
        )

    return build


@pytest.mark.parametrize(("n", "window_size", "seed"), CASES, ids=IDS)
def test_window_shuffle_iter_matches_grain_and_restores_both_ways(n, window_size, seed):
    assert_matches_grain(_iter_builder(n, window_size, seed))


def test_a_fresh_iterator_restored_before_the_first_element_gives_the_whole_stream():
    # google/grain#1178's case: the state of a new iterator, restored into another new one.
    build = _iter_builder(10, 5, 42)
    expected, states = run(build(real_grain))
    assert rest_after(build, "lite", states[0]) == expected
    assert rest_after(build, "lite", states[7]) == expected[7:]


@pytest.mark.parametrize(("n", "window_size", "seed"), CASES[:-1], ids=IDS[:-1])
def test_window_shuffle_map_matches_grain_at_every_index_and_in_blocks(n, window_size, seed):
    def build(lib):
        return lib.experimental.WindowShuffleMapDataset(
            lib.MapDataset.range(n), window_size=window_size, seed=seed
        )

    theirs, mine = build(real_grain), build(grain)
    indices = list(range(0 if window_size == 1 or seed == 0 else -3, 2 * n + 3))
    expected = [theirs[i] for i in indices]
    assert len(mine) == len(theirs)
    assert [mine[i] for i in indices] == expected
    assert mine._getitems(indices) == expected


def test_window_shuffle_resumes_at_every_step_after_a_filter():
    def make():
        ds = grain.MapDataset.range(23).to_iter_dataset().filter(lambda x: x % 4 != 1)
        return iter(grain.experimental.WindowShuffleIterDataset(ds, window_size=4, seed=7))

    assert_dataset_resumes_at_every_step(make)


def test_window_shuffle_map_resumes_at_every_step_through_to_iter_dataset():
    def make():
        ds = grain.experimental.WindowShuffleMapDataset(
            grain.MapDataset.range(15), window_size=4, seed=3
        )
        return iter(ds.to_iter_dataset())

    assert_dataset_resumes_at_every_step(make)


@pytest.mark.parametrize(
    "make",
    [
        lambda: grain.experimental.WindowShuffleIterDataset(
            grain.MapDataset.range(3).to_iter_dataset(), window_size=0, seed=1
        ),
        lambda: grain.experimental.WindowShuffleMapDataset(
            grain.MapDataset.range(3), window_size=0, seed=1
        ),
    ],
    ids=["iter", "map"],
)
def test_window_shuffle_rejects_a_window_size_below_one(make):
    with pytest.raises(ValueError, match=r"window_size must be positive \(got 0\)"):
        make()
