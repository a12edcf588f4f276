"""InterleaveIterDataset: Grain's round-robin order and state, restores, mp_prefetch."""

from __future__ import annotations

import copy
import functools
import json
import os

import grain as real_grain
import numpy as np
import pytest

import grainlite as grain
from grainlite_tests.support import interleave_inputs
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step
from grainlite_tests.support.stream_checks import assert_matches_grain, rest_after, run

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


# --- the interleave under worker processes, future states, next index, element spec -----------


_repeated = interleave_inputs.repeated


def _datasets_of_datasets(lib, count=5):
    name = "grain" if lib is real_grain else "lite"
    return lib.MapDataset.range(1, count + 1).map(functools.partial(_repeated, name))


# Grain 0.2.18's orders, measured with the installed grain (the 3-worker one is its own test's).
_GRAIN_ORDER = {
    3: [1, 2, 3, 4, 5, 3, 4, 2, 3, 4, 5, 4, 5, 5, 5],
    2: [1, 2, 3, 4, 5, 2, 3, 4, 5, 4, 3, 4, 5, 5, 5],
}


def _interleave_under_workers(lib, workers, sequential=False):
    ds = lib.experimental.InterleaveIterDataset(_datasets_of_datasets(lib), cycle_length=5)
    options = lib.MultiprocessingOptions(num_workers=workers)
    return iter(ds.mp_prefetch(options, sequential_slice=sequential))


@pytest.mark.timeout(300)  # a few runs of 3 worker processes each, on a loaded machine
def test_interleave_under_mp_prefetch_gives_each_worker_every_wth_dataset_like_grain():
    """Grain's elements; Grain's states from the step where every worker has given an element
    (before that, Grain 0.2.18 reports a waiting worker's state from the whole, unsliced
    interleave, which its worker could not restore); restores from Grain's state and from
    grainlite's own."""
    build = functools.partial(_interleave_under_workers, workers=3)
    theirs, their_states = run(build(real_grain))
    mine, my_states = run(build(grain))
    assert mine == theirs == _GRAIN_ORDER[3]
    assert my_states[3:] == their_states[3:]
    assert rest_after(build, "lite", their_states[8]) == theirs[8:]
    assert_dataset_resumes_at_every_step(lambda: build(grain), steps=[4])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sequential", [False, True])
def test_interleave_share_is_strided_even_with_sequential_slice_like_grain(sequential):
    assert run(_interleave_under_workers(grain, 2, sequential))[0] == _GRAIN_ORDER[2]


@pytest.mark.timeout(300)
def test_interleave_of_a_list_under_mp_prefetch_has_grains_order_and_resumes():
    def make():
        datasets = [_repeated("lite", i) for i in range(1, 6)]
        ds = grain.experimental.InterleaveIterDataset(datasets, cycle_length=2)
        return iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=3)))

    assert run(make())[0] == _GRAIN_ORDER[3]  # cycle_length 2 reads each worker's share alike
    assert_dataset_resumes_at_every_step(make, steps=[5])


@pytest.mark.timeout(300)
def test_interleave_with_fewer_datasets_than_workers_gives_every_element_once():
    # Grain 0.2.18 fails here with an IndexError in the worker that has no dataset.
    ds = grain.experimental.InterleaveIterDataset(_datasets_of_datasets(grain, 2), cycle_length=5)
    assert list(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=3))) == [1, 2, 2]


@pytest.mark.timeout(300)
def test_interleave_makes_a_map_dataset_of_datasets_in_the_worker_that_reads_it():
    ds = grain.experimental.InterleaveIterDataset(
        grain.MapDataset.range(4).map(interleave_inputs.dataset_of_pid), cycle_length=2
    )
    pids = list(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    assert len(pids) == 4
    assert os.getpid() not in pids
    assert len(set(pids)) == 2  # each worker made its own share


def test_interleave_starts_an_unopened_dataset_from_its_future_state_like_grain():
    def build(lib):
        datasets = [lib.MapDataset.source(v).to_iter_dataset() for v in ([1, 2], [3, 4], [5])]
        return iter(lib.experimental.InterleaveIterDataset(datasets, cycle_length=1))

    def rest(lib, future):
        iterator = build(lib)
        state = iterator.get_state()
        state["future_states"] = future
        iterator.set_state(state)
        return list(iterator), iterator.get_state()["future_states"]

    future = {1: {"next_index": 1}, 2: {"next_index": 1}}
    assert rest(grain, dict(future)) == rest(real_grain, dict(future)) == ([1, 2, 4], {})
    # From a JSON checkpoint the keys are strings.
    assert rest(grain, json.loads(json.dumps(future)))[0] == [1, 2, 4]
    iterator = build(grain)
    state = iterator.get_state()
    state["future_states"] = {2: {"next_index": 0}}
    iterator.set_state(state)
    assert next(iterator) == 1
    assert iterator.get_state()["future_states"] == {2: {"next_index": 0}}  # not opened yet


def _next_indices(lib, index_module):
    ds = lib.MapDataset.range(5).to_iter_dataset()
    iterator = iter(lib.experimental.InterleaveIterDataset([ds], cycle_length=3))
    seen = [index_module.get_next_index(iterator)]
    index_module.set_next_index(iterator, 3)
    seen.append(next(iterator))
    seen.append(index_module.get_next_index(iterator))
    index_module.set_next_index(iterator, 1)
    seen.extend(iterator)
    return seen


def test_interleave_of_one_dataset_has_that_datasets_next_index_like_grain():
    from grain._src.python.dataset import dataset as grain_dataset

    assert _next_indices(grain, grain.experimental) == [0, 3, 4, 1, 2, 3, 4]
    assert _next_indices(real_grain, grain_dataset) == [0, 3, 4, 1, 2, 3, 4]


@pytest.mark.parametrize("action", ["get_next_index", "set_next_index"])
def test_interleave_of_two_datasets_has_no_next_index_in_grains_words(action):
    ds = grain.MapDataset.range(4).to_iter_dataset()
    iterator = iter(grain.experimental.InterleaveIterDataset([ds, ds], cycle_length=2))
    call = getattr(grain.experimental, action)
    with pytest.raises(NotImplementedError) as caught:
        call(iterator) if action == "get_next_index" else call(iterator, 0)
    assert isinstance(caught.value, grain.errors.NoNextIndexError)
    assert str(caught.value) == (
        f"{action} is not supported for InterleaveDatasetIterator with more than one dataset "
        "(it reads 2): its position is not one element index; use get_state() / set_state() "
        "instead."
    )


def test_interleave_element_spec_is_its_first_datasets_like_grain():
    from grain._src.python.dataset import dataset as grain_dataset

    def spec(lib, get):
        first = lib.MapDataset.range(3).to_iter_dataset()
        second = lib.MapDataset.range(3).batch(2).to_iter_dataset()
        return get(lib.experimental.InterleaveIterDataset([first, second], cycle_length=2))

    mine = spec(grain, grain.experimental.get_element_spec)
    theirs = spec(real_grain, grain_dataset.get_element_spec)
    assert (mine.shape, mine.dtype) == (theirs.shape, theirs.dtype) == ((), np.int64)


def test_multithread_prefetch_gives_each_thread_every_tth_dataset_like_grain():
    from grain._src.python.dataset.transformations import prefetch as grain_prefetch

    def elements(lib, multithread_prefetch):
        name = "grain" if lib is real_grain else "lite"
        datasets = [_repeated(name, i) for i in range(1, 6)]
        ds = lib.experimental.InterleaveIterDataset(datasets, cycle_length=2)
        return list(multithread_prefetch(ds, num_threads=2, buffer_size=2))

    mine = elements(grain, grain.experimental.multithread_prefetch)
    theirs = elements(real_grain, grain_prefetch.multithread_prefetch)
    assert mine == theirs == [1, 2, 3, 4, 3, 2, 5, 4, 3, 4, 5, 4, 5, 5, 5]
