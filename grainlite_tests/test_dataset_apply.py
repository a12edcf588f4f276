"""``apply(transformations)`` against the installed grain: each transform object becomes the
node of its kind, in order, on both dataset kinds; unsupported objects are Grain's error type."""

from __future__ import annotations

import grain
import grain.experimental
import pytest

import grainlite.dataset as gd
import grainlite.transforms as gt
from grainlite.dataset.map_dataset import MapDataset


def _classes(t, flat_map_base):
    class Times2(t.Map):
        def map(self, x):
            return x * 2

    class NotOneMod3(t.Filter):
        def filter(self, x):
            return x % 3 != 1

    class Draw(t.RandomMap):
        def random_map(self, x, rng):
            return (x, int(rng.integers(1000)))

    class Pair(t.MapWithIndex):
        def map_with_index(self, i, x):
            return (i, x)

    class Twice(flat_map_base):
        max_fan_out = 2

        def flat_map(self, x):
            return [x, x]

    return Times2(), NotOneMod3(), Draw(), Pair(), Twice()


def _both():
    return (
        (grain, _classes(grain.transforms, grain.experimental.FlatMapTransform)),
        (gd, _classes(gt, gt.FlatMap)),
    )


def _results(build):
    out = []
    for lib, classes in _both():
        out.append(build(lib, *classes))
    return out


def test_map_filter_random_map_and_map_with_index_match_grain_on_a_map_dataset():
    ours, theirs = _results(
        lambda lib, t2, f, d, p, _: lib.MapDataset.range(9).seed(4).apply([t2, f, d, p])
    )
    assert [ours[i] for i in range(12)] == [theirs[i] for i in range(12)]


def test_a_single_transformation_need_not_be_in_a_list():
    ours, theirs = _results(lambda lib, t2, *_: lib.MapDataset.range(4).apply(t2))
    assert list(ours) == list(theirs) == [0, 2, 4, 6]


def test_iter_dataset_apply_matches_grains_elements_and_states():
    ours, theirs = _results(
        lambda lib, t2, f, d, p, _: (
            lib.MapDataset.range(9).seed(4).to_iter_dataset().apply([t2, f, d, p])
        )
    )
    a, b = iter(ours), iter(theirs)
    assert [(next(a), a.get_state()) for _ in range(4)] == [
        (next(b), b.get_state()) for _ in range(4)
    ]


def test_grains_and_grainlites_transform_classes_give_the_same_pipeline():
    grain_classes = _classes(grain.transforms, grain.experimental.FlatMapTransform)
    ours = MapDataset.range(9).seed(4).apply(list(grain_classes[:4]))
    theirs = grain.MapDataset.range(9).seed(4).apply(list(grain_classes[:4]))
    assert [ours[i] for i in range(9)] == [theirs[i] for i in range(9)]


def test_an_empty_list_returns_the_dataset_itself():
    ds = MapDataset.range(3)
    assert ds.apply([]) is ds


@pytest.mark.parametrize("bad", [5, "class-not-instance"])
def test_unsupported_transformations_are_not_implemented_errors_as_in_grain(bad):
    for lib, (t2, *_) in _both():
        value = 5 if bad == 5 else type(t2)
        with pytest.raises(NotImplementedError, match=r"Transformation type: "):
            lib.MapDataset.range(3).apply([value])


def test_flat_map_becomes_grains_flat_map_node_on_both_kinds():
    ours, theirs = _results(lambda lib, *classes: lib.MapDataset.range(3).apply(classes[4]))
    assert type(ours).__name__ == type(theirs).__name__ == "FlatMapMapDataset"
    assert [ours[i] for i in range(6)] == [theirs[i] for i in range(6)]
    ours, theirs = _results(
        lambda lib, *classes: lib.MapDataset.range(3).to_iter_dataset().apply(classes[4])
    )
    assert type(ours).__name__ == type(theirs).__name__ == "FlatMapIterDataset"
    assert list(ours) == list(theirs)


def test_batch_becomes_a_batch_node_with_its_settings():
    for lib, t in ((grain, grain.transforms), (gd, gt)):
        ds = lib.MapDataset.range(6).apply(t.Batch(4, drop_remainder=True))
        assert type(ds).__name__ == "BatchMapDataset"
        assert [b.tolist() for b in ds] == [[0, 1, 2, 3]]


@pytest.mark.parametrize("kind", ["grainlite", "grain"])
def test_a_tf_random_map_is_not_applied_as_in_grain_even_with_a_seed(kind):
    base = gt.TfRandomMap if kind == "grainlite" else grain.transforms.TfRandomMap
    plus_one = type("PlusOne", (base,), {"np_random_map": lambda self, x, rng: x + 1})()
    for pipeline in (MapDataset.range(3).seed(1), MapDataset.range(3).seed(1).to_iter_dataset()):
        with pytest.raises(NotImplementedError, match=r"apply takes no TfRandomMap") as raised:
            pipeline.apply(plus_one)
        assert "ds.random_map(transform, seed=...)" in str(raised.value)
    with pytest.raises(NotImplementedError):
        grain.MapDataset.range(3).seed(1).apply(plus_one)
    assert list(MapDataset.range(3).random_map(plus_one, seed=1)) == [1, 2, 3]


def test_a_random_map_without_a_seed_is_a_value_error_in_apply_as_in_grain():
    def noise(self, x, rng):
        return x + int(rng.integers(10))

    with pytest.raises(ValueError, match="seed"):
        MapDataset.range(3).apply(type("Noise", (gt.RandomMap,), {"random_map": noise})())
    with pytest.raises(ValueError, match="requires a seed"):
        theirs = type("Noise", (grain.transforms.RandomMap,), {"random_map": noise})()
        grain.MapDataset.range(3).apply(theirs)
