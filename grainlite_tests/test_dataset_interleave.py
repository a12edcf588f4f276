"""InterleaveIterDataset: Grain's round-robin order and state, restores, mp_prefetch."""

from __future__ import annotations

import copy

import grain as real_grain
import pytest

import grainlite as grain
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step
from grainlite_tests.support.stream_checks import assert_matches_grain

pytestmark = pytest.mark.timeout(60)


def _streams(lib, lengths, as_map=False):
    datasets = [lib.MapDataset.range(10 * i, 10 * i + n) for i, n in enumerate(lengths)]
    return datasets if as_map else [ds.to_iter_dataset() for ds in datasets]


@pytest.mark.parametrize(
    ("lengths", "cycle_length"),
    [
        ((3, 1, 4, 2, 0, 1), 2),
        ((3, 1, 4, 2, 0, 1), 3),
        ((0, 0, 2), 2),
        ((5,), 4),
        ((2, 2, 2), 5),
    ],
    ids=["uneven-cycle-2", "uneven-cycle-3", "empty-first", "cycle-past-count", "even"],
)
def test_interleave_matches_grain_elements_states_and_restores_both_ways(lengths, cycle_length):
    def build(lib):
        ds = lib.experimental.InterleaveIterDataset(
            _streams(lib, lengths), cycle_length=cycle_length
        )
        return iter(ds)

    assert_matches_grain(build)


def test_interleave_reads_map_datasets_in_order_like_grain():
    def build(lib):
        return iter(
            lib.experimental.InterleaveIterDataset(_streams(lib, (3, 2), True), cycle_length=2)
        )

    elements, _ = assert_matches_grain(build, restore_at=[0, 3])
    assert elements == [0, 10, 1, 11, 2]


def test_interleave_resumes_at_every_step_with_a_shuffled_map_below():
    def make():
        files = [
            grain.MapDataset.range(10 * i, 10 * i + n).shuffle(seed=i).map(lambda x: x * 2)
            for i, n in enumerate((4, 0, 3, 5, 1))
        ]
        return iter(grain.experimental.InterleaveIterDataset(files, cycle_length=2))

    assert_dataset_resumes_at_every_step(make)


def _restore_and_run(lib, state):
    ds = lib.experimental.InterleaveIterDataset(_streams(lib, (3, 1, 4, 2)), cycle_length=2)
    restored = iter(ds)
    restored.set_state(state)
    return list(restored)


def test_interleave_restore_leaves_the_saved_state_unchanged_where_grain_rewrites_it():
    ds = grain.experimental.InterleaveIterDataset(_streams(grain, (3, 1, 4, 2)), cycle_length=2)
    state = iter(ds).get_state()
    saved = copy.deepcopy(state)
    assert _restore_and_run(grain, state) == [0, 10, 1, 2, 20, 21, 30, 22, 31, 23]
    assert state == saved
    # Grain 0.2.18's restored iterator keeps and rewrites the lists of the dict it was given.
    _restore_and_run(real_grain, state)
    assert state != saved


def test_interleave_resumes_under_mp_prefetch_with_two_workers():
    def make():
        ds = grain.experimental.InterleaveIterDataset(_streams(grain, (5, 2, 4)), cycle_length=2)
        return iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))

    assert_dataset_resumes_at_every_step(make, steps=[4])


@pytest.mark.parametrize("cycle_length", [0, -1])
def test_interleave_rejects_a_cycle_length_below_one_with_an_index_error(cycle_length):
    with pytest.raises(IndexError, match=r"cycle_length >= 1 \(got 1 datasets"):
        grain.experimental.InterleaveIterDataset(_streams(grain, (2,)), cycle_length=cycle_length)


def test_interleave_rejects_a_non_dataset_naming_its_position():
    with pytest.raises(TypeError, match=r"datasets\[1\] must be an IterDataset or a MapDataset"):
        grain.experimental.InterleaveIterDataset(
            [grain.MapDataset.range(2), [1, 2]], cycle_length=2
        )
