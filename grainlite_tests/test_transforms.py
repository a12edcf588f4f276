"""The transform base classes, Grain's alias names, and classify() on ours, Grain's and junk."""

from __future__ import annotations

import pickle
import types
import typing
from collections.abc import Sequence

import numpy as np
import pytest

import grainlite.transforms as transforms
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.transforms import (
    Batch,
    Filter,
    FilterTransform,
    FlatMap,
    FlatMapTransform,
    Map,
    MapTransform,
    RandomMap,
    RandomMapTransform,
    classify,
)

pytestmark = pytest.mark.timeout(30)

ACCEPTED = (
    " Accepted: Batch, or an instance of MapTransform (map), RandomMapTransform (random_map), "
    "FilterTransform (filter) or FlatMapTransform (flat_map), from grainlite or grain, or any "
    "object with exactly one of those methods."
)


class PlusOne(MapTransform):
    def map(self, element):
        return element + 1


class AddNoise(RandomMapTransform):
    def random_map(self, element, rng):
        return element + rng.integers(100)


class KeepEven(FilterTransform):
    def filter(self, element):
        return element % 2 == 0


class Twice(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element):
        return [element, element]


class MapAndFilter(MapTransform, FilterTransform):
    def map(self, element):
        return element

    def filter(self, element):
        return True

    def __repr__(self):
        return "MapAndFilter()"


class CallableWithRepr:
    def __call__(self, element):
        return element

    def __repr__(self):
        return "CallableWithRepr()"


@pytest.fixture(scope="module")
def grain_python():
    """``grain.python`` of Grain 0.2.18 (the ``peer`` extra)."""
    flags = pytest.importorskip("absl.flags")
    flags.FLAGS.mark_as_parsed()  # grain reads absl flags on import
    return pytest.importorskip("grain.python")


def test_all_is_sorted_and_lists_exactly_the_public_names():
    public = {
        name
        for name, value in vars(transforms).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert transforms.__all__ == sorted(transforms.__all__)
    assert set(transforms.__all__) == public


def test_all_has_every_transform_name_grain_users_write():
    grain_names = {
        "Batch",
        "Filter",
        "FilterTransform",
        "FlatMap",
        "FlatMapTransform",
        "Map",
        "MapTransform",
        "RandomMap",
        "RandomMapTransform",
        "Transformation",
        "Transformations",
    }
    assert grain_names <= set(transforms.__all__)


@pytest.mark.parametrize(
    "new_name, old_name",
    [
        (Map, MapTransform),
        (RandomMap, RandomMapTransform),
        (Filter, FilterTransform),
        (FlatMap, FlatMapTransform),
    ],
    ids=["Map", "RandomMap", "Filter", "FlatMap"],
)
def test_grains_new_layout_names_are_the_same_classes(new_name, old_name):
    assert new_name is old_name


@pytest.mark.parametrize(
    "base", [MapTransform, RandomMapTransform, FilterTransform, FlatMapTransform]
)
def test_the_base_classes_are_abstract(base):
    with pytest.raises(TypeError, match="abstract"):
        base()
    with pytest.raises(TypeError, match="abstract"):
        type("Unfinished", (base,), {})()


def test_subclasses_survive_pickling_as_workers_need():
    rng = np.random.default_rng(0)
    for op in (PlusOne(), AddNoise(), KeepEven(), Twice()):
        assert type(pickle.loads(pickle.dumps(op))) is type(op)
    assert pickle.loads(pickle.dumps(PlusOne())).map(1) == 2
    assert pickle.loads(pickle.dumps(KeepEven())).filter(4)
    assert pickle.loads(pickle.dumps(Twice())).flat_map(3) == [3, 3]
    assert 0 <= pickle.loads(pickle.dumps(AddNoise())).random_map(0, rng) < 100


def test_flat_map_declares_max_fan_out_for_subclasses_to_set():
    assert "max_fan_out" in FlatMapTransform.__annotations__
    assert Twice.max_fan_out == 2


def test_transformation_is_the_union_of_the_accepted_kinds():
    assert set(typing.get_args(transforms.Transformation)) == {
        Batch,
        MapTransform,
        RandomMapTransform,
        transforms.TfRandomMap,
        FilterTransform,
        FlatMapTransform,
    }
    assert typing.get_origin(transforms.Transformations) is Sequence
    assert typing.get_args(transforms.Transformations) == (transforms.Transformation,)


@pytest.mark.parametrize(
    "op, kind",
    [
        (PlusOne(), "map"),
        (AddNoise(), "random_map"),
        (KeepEven(), "filter"),
        (Twice(), "flat_map"),
        (Batch(4), "batch"),
        (types.SimpleNamespace(map=str), "map"),
        (types.SimpleNamespace(filter=bool), "filter"),
        (types.SimpleNamespace(batch_size=2, drop_remainder=False, batch_fn=None), "batch"),
    ],
    ids=[
        "map",
        "random-map",
        "filter",
        "flat-map",
        "batch",
        "duck-map",
        "duck-filter",
        "duck-batch",
    ],
)
def test_classify_names_our_transforms_and_duck_typed_ones(op, kind):
    assert classify(op) == kind


@pytest.mark.parametrize(
    "base_name, method, kind",
    [
        ("MapTransform", "map", "map"),
        ("RandomMapTransform", "random_map", "random_map"),
        ("FilterTransform", "filter", "filter"),
        ("experimental.FlatMapTransform", "flat_map", "flat_map"),
    ],
    ids=["map", "random-map", "filter", "flat-map"],
)
def test_classify_names_subclasses_of_grains_own_transforms(grain_python, base_name, method, kind):
    base = grain_python
    for part in base_name.split("."):
        base = getattr(base, part)
    op = type("GrainStyle", (base,), {method: lambda self, *args: args[0], "max_fan_out": 1})()
    assert classify(op) == kind


def test_classify_takes_grains_batch_and_batch_operation_as_batches(grain_python):
    assert classify(grain_python.Batch(3, drop_remainder=True)) == "batch"
    assert classify(grain_python.BatchOperation(3)) == "batch"


def test_classify_rejects_grains_batch_with_a_non_positive_size(grain_python):
    with pytest.raises(GrainliteValueError) as caught:
        classify(grain_python.Batch(0))
    assert str(caught.value) == (
        "batch_size must be positive. Got batch_size=0; pass Batch(batch_size=N) with N >= 1."
    )


def test_classify_explains_that_map_with_index_is_not_supported(grain_python):
    class WithIndex(grain_python.MapWithIndexTransform):
        def map_with_index(self, index, element):
            return element

        def __repr__(self):
            return "WithIndex()"

    with pytest.raises(GrainliteTypeError) as caught:
        classify(WithIndex())
    assert str(caught.value) == (
        "DataLoader operations must be transforms, got WithIndex() of type "
        f"{__name__}.test_classify_explains_that_map_with_index_is_not_supported.<locals>."
        "WithIndex: Grain's DataLoader does not support MapWithIndex transforms, and neither "
        "does grainlite's; use a MapTransform (the DataLoader passes elements, not indices), or "
        "MapDataset.map_with_index in Grain's Dataset API." + ACCEPTED
    )


def test_classify_runs_grains_own_tf_random_map_as_a_random_map(grain_python):
    class TfStyle(pytest.importorskip("grain.transforms").TfRandomMap):
        def np_random_map(self, element, rng):
            return element

    assert classify(TfStyle()) == "random_map"


def test_classify_runs_grains_own_legacy_operations_as_operations(grain_python):
    # test_legacy.py checks what they produce.
    assert classify(grain_python.MapOperation(str)) == "operation"
    assert classify(grain_python.FilterOperation(bool)) == "operation"
    assert classify(grain_python.BatchOperation(2)) == "batch"  # as Grain: a Batch


@pytest.mark.parametrize(
    "op, detail",
    [
        (42, "got 42 of type builtins.int: it is not a transform."),
        (
            "batch",
            "got 'batch' of type builtins.str: it is not a transform.",
        ),
        (
            PlusOne,
            f"got <class '{__name__}.PlusOne'> of type abc.ABCMeta: this is a class, not an "
            "instance; pass PlusOne() instead.",
        ),
        (
            CallableWithRepr(),
            f"got CallableWithRepr() of type {__name__}.CallableWithRepr: plain functions are "
            "not supported; wrap the function in a MapTransform or FilterTransform subclass, or "
            "in MapOperation(fn) / FilterOperation(fn).",
        ),
        (
            MapAndFilter(),
            f"got MapAndFilter() of type {__name__}.MapAndFilter: it could be any of ['map', "
            "'filter']; give it exactly one of those methods.",
        ),
        (
            types.SimpleNamespace(map=str, flat_map=list),
            "got namespace(map=<class 'str'>, flat_map=<class 'list'>) of type types."
            "SimpleNamespace: it could be any of ['map', 'flat_map']; give it exactly one of "
            "those methods.",
        ),
    ],
    ids=["int", "str", "class-not-instance", "plain-callable", "two-bases", "two-duck-methods"],
)
def test_classify_rejects_junk_naming_the_object_its_type_and_the_accepted_kinds(op, detail):
    with pytest.raises(GrainliteTypeError) as caught:
        classify(op)
    assert str(caught.value) == "DataLoader operations must be transforms, " + detail + ACCEPTED
    assert isinstance(caught.value, TypeError)
