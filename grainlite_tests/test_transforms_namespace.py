"""``grain.transforms``' newer names, run against Grain 0.2.18: TfRandomMap, MapWithIndex,
DatasetSelectionMap, and the two spellings of each transform class."""

from __future__ import annotations

import json

import numpy as np
import pytest

import grainlite as lite
from grainlite_tests.support import grain_peer
from grainlite_tests.support.contracts import run_with_states

real_grain = grain_peer.real_grain
import grain as real_grain_root  # noqa: E402  (grain_peer marks absl flags as parsed first)

pytestmark = pytest.mark.timeout(180)


def _noise(self, x, rng):
    return np.asarray([x, int(rng.integers(0, 1000)), int(rng.integers(0, 1000))])


def _loader(library, operations, workers=0, seed=5):
    g = lite if library == "lite" else real_grain
    return g.DataLoader(
        data_source=g.RangeDataSource(0, 12, 1),
        sampler=g.IndexSampler(
            12, g.NoSharding(), shuffle=seed is not None, num_epochs=1, seed=seed
        ),
        operations=operations,
        worker_count=workers,
    )


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "two-workers"])
def test_tf_random_map_gives_grains_elements_and_states(workers):
    ours = type("Noise", (lite.transforms.TfRandomMap,), {"np_random_map": _noise})
    theirs = type("Noise", (real_grain_root.transforms.TfRandomMap,), {"np_random_map": _noise})
    operations = {"lite": [ours(), lite.Batch(4)], "grain": [theirs(), real_grain.Batch(4)]}
    got = run_with_states(iter(_loader("lite", operations["lite"], workers)))
    expected = run_with_states(iter(_loader("grain", operations["grain"], workers)))
    assert got[0] == expected[0]
    assert [json.loads(s) for s in got[1]] == [json.loads(s) for s in expected[1]]
    # A subclass of Grain's own TfRandomMap runs in grainlite too, with the same result.
    grains_own = [theirs(), lite.Batch(4)]
    assert run_with_states(iter(_loader("lite", grains_own, workers))) == got


def test_tf_random_map_is_its_own_class_as_in_grain():
    assert not issubclass(lite.transforms.TfRandomMap, lite.RandomMapTransform)
    assert not issubclass(
        real_grain_root.transforms.TfRandomMap, real_grain_root.transforms.RandomMap
    )
    with pytest.raises(TypeError):
        lite.transforms.TfRandomMap()  # abstract: np_random_map is not defined


def test_tf_random_map_without_a_seed_gets_no_generator_as_in_grain():
    ours = type("Noise", (lite.transforms.TfRandomMap,), {"np_random_map": _noise})
    theirs = type("Noise", (real_grain_root.transforms.TfRandomMap,), {"np_random_map": _noise})
    for loader in (_loader("lite", [ours()], seed=None), _loader("grain", [theirs()], seed=None)):
        with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'integers'"):
            next(iter(loader))


def _index_plus(self, index, x):
    return index + x


def test_map_with_index_can_be_subclassed_and_the_loader_refuses_it_as_grains_does():
    ours = type("IndexPlus", (lite.transforms.MapWithIndex,), {"map_with_index": _index_plus})
    theirs = type(
        "IndexPlus", (real_grain_root.transforms.MapWithIndex,), {"map_with_index": _index_plus}
    )
    assert ours().map_with_index(2, 3) == theirs().map_with_index(2, 3) == 5
    with pytest.raises(TypeError):
        list(_loader("grain", [theirs()]))
    with pytest.raises(TypeError) as caught:
        _loader("lite", [ours()])
    message = str(caught.value)
    assert "Grain's DataLoader does not support MapWithIndex transforms" in message
    assert ".IndexPlus: " in message


class Concat(lite.transforms.DatasetSelectionMap):
    """Records 0-2 of dataset 0, then 0-3 of dataset 1."""

    def __len__(self) -> int:
        return 7

    def __getitem__(self, index: int) -> tuple[int, int]:
        return (0, index) if index < 3 else (1, index - 3)


def test_dataset_selection_map_is_an_abstract_class_to_subclass_as_in_grain():
    assert [Concat()[i] for i in range(len(Concat()))] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3),
    ]  # fmt: skip
    for selection_map in (lite.transforms.DatasetSelectionMap, real_grain.DatasetSelectionMap):
        assert selection_map.__abstractmethods__ == {"__len__", "__getitem__"}
        with pytest.raises(TypeError):
            selection_map()


@pytest.mark.parametrize(
    "spelling",
    ["transforms.Map", "MapTransform", "python.MapTransform"],
)
def test_a_transform_subclassed_by_any_spelling_is_every_spelling(spelling):
    import grainlite.python

    base = lite
    for part in spelling.split("."):
        base = getattr(base, part)
    Twice = type("Twice", (base,), {"map": lambda self, x: 2 * x})
    assert isinstance(Twice(), lite.transforms.Map)
    assert isinstance(Twice(), grainlite.python.MapTransform)
    assert list(_loader("lite", [Twice()], seed=None)) == [2 * i for i in range(12)]
