"""``map``, ``random_map``, ``map_with_index`` and ``filter`` against the installed grain, on both
dataset kinds: elements and holes, indices past the end, block reads, transform classes, the
``IterDataset`` iterators' states at every step, cross-restores and errors."""

from __future__ import annotations

import json

import grain
import numpy as np
import pytest

import grainlite.dataset as gd
import grainlite.transforms as gt
from grainlite.dataset import _util
from grainlite.dataset.map_dataset import MapDataset
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step


def _times10(x):
    return x * 10


def _odd(x):
    return x % 2 == 1


def _pair(i, x):
    return (i, x)


def _draw(x, rng):
    return (x, int(rng.integers(1000)), int(rng.bit_generator.state["state"]["counter"][3]))


def _map_pipelines(lib):
    m = lib.MapDataset
    return {
        "map": m.range(7).map(_times10),
        "filter": m.range(7).filter(_odd),
        "map-after-filter": m.range(7).filter(_odd).map(_times10),
        "map-with-index": m.range(7).map_with_index(_pair),
        "map-with-index-after-filter": m.range(7).filter(_odd).map_with_index(_pair),
        "random-map": m.range(7).random_map(_draw, seed=3),
        "random-map-after-filter": m.range(7).filter(_odd).random_map(_draw, seed=3),
        "seeded-random-map": m.range(7).seed(11).map(_times10).random_map(_draw),
        "filter-falsy-results": m.range(7).filter(lambda x: 0),
        "filter-truthy-results": m.range(7).filter(lambda x: "yes"),
        "map-to-none": m.range(7).map(lambda x: None),
    }


@pytest.mark.parametrize("name", list(_map_pipelines(grain)))
def test_map_dataset_nodes_match_grain_including_holes_and_wrapped_indices(name):
    ours, theirs = _map_pipelines(gd)[name], _map_pipelines(grain)[name]
    assert len(ours) == len(theirs) and type(ours).__name__ == type(theirs).__name__
    indices = list(range(0, 3 * len(theirs)))
    expected = [theirs[i] for i in indices]
    assert [ours[i] for i in indices] == expected
    assert ours._getitems(indices) == expected
    assert ours._getitems(np.array(indices)) == expected


def test_functions_are_not_called_on_holes():
    calls = []
    ds = MapDataset.range(6).filter(_odd).map(lambda x: calls.append(x) or x)
    ds._getitems(range(6))
    assert calls == [1, 3, 5]


def _grain_classes(t):
    class Times10(t.Map):
        def map(self, x):
            return x * 10

        def __call__(self, x):  # the method wins over the call, as in Grain
            return "called"

    class Odd(t.Filter):
        def filter(self, x):
            return x % 2 == 1

    class Pair(t.MapWithIndex):
        def map_with_index(self, i, x):
            return (i, x)

    class Draw(t.RandomMap):
        def random_map(self, x, rng):
            return (x, int(rng.integers(1000)))

    return Times10(), Odd(), Pair(), Draw()


@pytest.mark.parametrize("classes_from", ["grain", "grainlite"])
def test_transform_classes_are_called_through_their_method(classes_from):
    mapper, odd, pair, draw = _grain_classes(grain.transforms if classes_from == "grain" else gt)
    ds = MapDataset.range(5).map(mapper).filter(odd).map_with_index(pair).random_map(draw, seed=1)
    g1, g2, g3, g4 = _grain_classes(grain.transforms)
    expected = (
        grain.MapDataset.range(5).map(g1).filter(g2).map_with_index(g3).random_map(g4, seed=1)
    )
    assert [ds[i] for i in range(5)] == [expected[i] for i in range(5)]


def test_builtin_callables_and_types_work_as_functions():
    assert MapDataset.range(3).map(str)[2] == grain.MapDataset.range(3).map(str)[2] == "2"


@pytest.mark.parametrize("method", ["map", "filter", "map_with_index"])
@pytest.mark.parametrize("bad", [5, "odd-filter-class", "map-class-itself"])
def test_non_callable_transforms_are_type_errors_naming_the_method(method, bad):
    _, odd, _, _ = _grain_classes(gt)
    value = {"odd-filter-class": odd, "map-class-itself": gt.MapTransform, 5: 5}[bad]
    if method == "filter" and bad == "odd-filter-class":
        value = gt.MapTransform
    with pytest.raises(TypeError, match=rf"{method}\(...\) takes a function"):
        getattr(MapDataset.range(3), method)(value)
    with pytest.raises(TypeError, match=rf"{method}\(...\) takes a function"):
        getattr(MapDataset.range(3).to_iter_dataset(), method)(value)


def test_random_map_at_a_negative_index_is_an_overflow_error_as_in_grain():
    with pytest.raises(OverflowError):
        grain.MapDataset.range(3).random_map(_draw, seed=1)[-1]
    with pytest.raises(OverflowError, match="no generator for negative index -1"):
        MapDataset.range(3).random_map(_draw, seed=1)[-1]


def test_slicing_a_transformed_dataset_gives_a_view():
    assert list(MapDataset.range(6).map(_times10)[1:4]) == [10, 20, 30]


# IterDataset twins ------------------------------------------------------------------------------
def _iter_pipelines(lib):
    base = lib.MapDataset.range(9).to_iter_dataset()
    holes = lib.MapDataset.range(9).filter(_odd).to_iter_dataset(allow_nones=True)
    return {
        "map": base.map(_times10),
        "filter": base.filter(_odd),
        "filter-all": base.filter(lambda x: False),
        "random-map": base.random_map(_draw, seed=5),
        "seeded-random-map": lib.MapDataset.range(9).to_iter_dataset().seed(2).random_map(_draw),
        "map-with-index": base.map_with_index(_pair),
        "map-with-index-after-filter": base.filter(_odd).map_with_index(_pair),
        "random-map-after-filter": base.filter(_odd).random_map(_draw, seed=5),
        "chain": base.random_map(_draw, seed=1).map_with_index(_pair).filter(lambda e: e[0] % 2),
        "holes-map": holes.map(_times10),
        "holes-map-with-index": holes.map_with_index(_pair),
        "holes-random-map": holes.random_map(_draw, seed=2),
        "holes-filter-sees-none": holes.filter(lambda x: x is None or x > 4),
    }


def _states(iterator):
    out = [iterator.get_state()]
    for element in iterator:
        out.append((element, iterator.get_state()))
    return out


@pytest.mark.parametrize("name", list(_iter_pipelines(grain)))
def test_iter_nodes_match_grains_elements_and_state_after_every_step(name):
    assert _states(iter(_iter_pipelines(gd)[name])) == _states(iter(_iter_pipelines(grain)[name]))


@pytest.mark.parametrize("name", list(_iter_pipelines(grain)))
def test_iter_nodes_resume_at_every_step(name):
    ds = _iter_pipelines(gd)[name]
    assert_dataset_resumes_at_every_step(lambda: iter(ds))


@pytest.mark.parametrize("name", ["random-map", "map-with-index-after-filter", "chain"])
def test_iter_states_cross_restore_with_grain_both_ways(name):
    for source, target in ((grain, gd), (gd, grain)):
        saved = iter(_iter_pipelines(source)[name])
        next(saved), next(saved)
        restored = iter(_iter_pipelines(target)[name])
        restored.set_state(json.loads(json.dumps(saved.get_state())))
        assert list(restored) == list(saved)


@pytest.mark.parametrize(
    "state",
    [{"parent": {"next_index": 3}}, {"counter": 2}],
    ids=["no-counter", "no-parent"],
)
def test_incomplete_map_with_index_state_is_a_key_error_as_in_grain(state):
    for lib in (grain, gd):
        with pytest.raises(KeyError):
            iter(_iter_pipelines(lib)["map-with-index"]).set_state(state)


def test_incomplete_random_map_state_is_a_key_error_as_in_grain():
    for lib in (grain, gd):
        with pytest.raises(KeyError):
            iter(_iter_pipelines(lib)["random-map"]).set_state({"parent": {"next_index": 3}})


def test_iter_close_cascades_to_the_parent_iterator():
    iterator = iter(MapDataset.range(9).to_iter_dataset().map(_times10).filter(bool))
    next(iterator)
    iterator.close()
    with pytest.raises(ValueError, match="closed"):
        next(iterator)


def test_parent_getitems_falls_back_to_indexing_for_objects_without_it():
    class Bare:
        def __getitem__(self, i):
            return i + 1

    assert _util.parent_getitems(Bare())([1, 2]) == [2, 3]


def _counter(x, rng):
    return (x, int(rng.bit_generator.state["state"]["counter"][3]))


def test_worker_share_numbers_generators_k_times_workers_plus_worker_and_keeps_local_state():
    # Worker 1 of 3 reads elements [1::3]; Grain numbers its k-th generator k * 3 + 1.
    share = MapDataset.range(8)[1::3].to_iter_dataset().random_map(_counter, seed=4)
    share.set_worker_share(1, 3)
    iterator = iter(share)
    assert [next(iterator), next(iterator)] == [(1, 1), (4, 4)]
    assert iterator.get_state() == {"parent": {"next_index": 2}, "index_for_rng": 2}
    assert list(iterator) == [(7, 7)]
    plain = MapDataset.range(8).to_iter_dataset().random_map(_counter, seed=4)
    assert [c for _, c in plain] == list(range(8))
