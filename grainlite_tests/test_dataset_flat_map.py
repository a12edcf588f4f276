"""``FlatMapMapDataset`` and ``FlatMapIterDataset`` against grain's ``grain.experimental`` ones:
slots and holes, every index, the iterator's states at every step, restores both ways and the
fan-out errors."""

from __future__ import annotations

import json
import sys

import cloudpickle
import grain
import pytest

from grainlite.dataset.flat_map import FlatMapIterDataset, FlatMapMapDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.transforms import FlatMapTransform
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step, run_with_states


class Split(grain.experimental.FlatMapTransform):
    """Element x becomes x % 4 pieces (none for multiples of 4)."""

    max_fan_out = 3

    def __init__(self):
        self.calls = 0

    def flat_map(self, element):
        self.calls += 1
        return [element * 10 + k for k in range(element % 4)]


class OursSplit(FlatMapTransform):
    """The same split, as a grainlite FlatMapTransform."""

    max_fan_out = 3

    def flat_map(self, element):
        return [element * 10 + k for k in range(element % 4)]


@pytest.mark.parametrize(
    "transform", [Split(), OursSplit()], ids=["grain-transform", "grainlite-transform"]
)
def test_flat_map_map_dataset_matches_grain_slots_and_holes_at_every_index(transform):
    ours = FlatMapMapDataset(MapDataset.range(7), transform)
    theirs = grain.experimental.FlatMapMapDataset(grain.MapDataset.range(7), Split())
    assert len(ours) == len(theirs) == 21
    indices = list(range(-2 * len(theirs), 3 * len(theirs)))
    expected = [theirs[i] for i in indices]
    assert [ours[i] for i in indices] == expected
    assert ours._getitems(indices) == expected
    assert list(ours[2:9]) == list(theirs[2:9])


def test_flat_map_block_reads_split_each_parent_element_once():
    transform = Split()
    ours = FlatMapMapDataset(MapDataset.range(7), transform)
    ours._getitems(list(range(len(ours))))
    assert transform.calls == 7


def test_flat_map_map_dataset_read_in_order_matches_grain_elements_and_states():
    ours = iter(FlatMapMapDataset(MapDataset.range(9), Split()).to_iter_dataset())
    theirs = iter(
        grain.experimental.FlatMapMapDataset(grain.MapDataset.range(9), Split()).to_iter_dataset()
    )
    assert run_with_states(ours) == run_with_states(theirs)


class Repeat(FlatMapTransform):
    """Element x becomes x copies of itself, with max_fan_out 2."""

    max_fan_out = 2

    def flat_map(self, element):
        return [element] * element


def test_flat_map_map_dataset_fan_out_above_the_max_is_a_value_error():
    with pytest.raises(ValueError):
        grain.experimental.FlatMapMapDataset(grain.MapDataset.range(5), Repeat())[9]
    ours = FlatMapMapDataset(MapDataset.range(5), Repeat())
    assert ours[4] == 2  # element 2 splits into two: allowed
    with pytest.raises(ValueError) as raised:
        ours[6]
    assert str(raised.value) == (
        "The user-provided FlatMapTransform Repeat split an element into 3 pieces, more than its "
        "max_fan_out of 2; raise max_fan_out (above 100 it gets slow) or preprocess the data so "
        "that elements split into fewer pieces."
    )


class NoFanOut(FlatMapTransform):
    def flat_map(self, element):
        return [element]


class GrainNoFanOut(grain.experimental.FlatMapTransform):
    def flat_map(self, element):
        return [element]


def test_flat_map_map_dataset_needs_max_fan_out_like_grain():
    with pytest.raises(AttributeError):  # grain: when the length is first needed
        len(grain.experimental.FlatMapMapDataset(grain.MapDataset.range(5), GrainNoFanOut()))
    with pytest.raises(AttributeError) as raised:
        FlatMapMapDataset(MapDataset.range(5), NoFanOut())
    assert str(raised.value) == (
        "NoFanOut has no `max_fan_out`; FlatMapMapDataset reserves that many slots per element, "
        "so set the class attribute, e.g. `max_fan_out = 4`."
    )
    # The iterator version never needs it (Grain's neither).
    assert list(FlatMapIterDataset(MapDataset.range(3).to_iter_dataset(), NoFanOut())) == [0, 1, 2]


def test_flat_map_needs_a_transform_with_flat_map():
    for bad in (lambda x: [x], Split):
        with pytest.raises(
            TypeError, match="needs a FlatMapTransform instance with a `flat_map` method"
        ):
            FlatMapMapDataset(MapDataset.range(3), bad)
        with pytest.raises(TypeError, match="needs a FlatMapTransform instance"):
            FlatMapIterDataset(MapDataset.range(3).to_iter_dataset(), bad)


ITER_PIPELINES = {
    "range": lambda m, fm: fm(m.MapDataset.range(9).to_iter_dataset(), Split()),
    "filtered": lambda m, fm: fm(
        m.MapDataset.range(14).to_iter_dataset().filter(lambda x: x % 3), Split()
    ),
    "empty-ending": lambda m, fm: fm(m.MapDataset.range(9).to_iter_dataset(), Split()),  # 8 -> []
    "batched-after": lambda m, fm: fm(m.MapDataset.range(11).to_iter_dataset(), Split()).batch(2),
}


def _grain_flat(parent, transform):
    return grain.experimental.FlatMapIterDataset(parent, transform)


@pytest.mark.parametrize("name", list(ITER_PIPELINES))
def test_flat_map_iter_matches_grain_elements_and_states_after_every_step(name):
    ours = iter(ITER_PIPELINES[name](grain_free_module, FlatMapIterDataset))
    theirs = iter(ITER_PIPELINES[name](grain, _grain_flat))
    assert run_with_states(ours) == run_with_states(theirs)


@pytest.mark.parametrize("name", list(ITER_PIPELINES))
def test_flat_map_iter_restores_from_grains_states_and_grain_from_ours(name):
    elements, states = run_with_states(iter(ITER_PIPELINES[name](grain, _grain_flat)))
    ours_run = iter(ITER_PIPELINES[name](grain_free_module, FlatMapIterDataset))
    for k, state in enumerate(states):
        ours = iter(ITER_PIPELINES[name](grain_free_module, FlatMapIterDataset))
        ours.set_state(json.loads(json.dumps(state)))
        assert run_with_states(ours)[0] == elements[k:], k
        theirs = iter(ITER_PIPELINES[name](grain, _grain_flat))
        theirs.set_state(ours_run.get_state())
        assert run_with_states(theirs)[0] == elements[k:], k
        if k < len(elements):
            next(ours_run)


@pytest.mark.parametrize("name", ["range", "filtered"])
def test_flat_map_iter_resumes_at_every_step(name):
    assert_dataset_resumes_at_every_step(
        lambda: iter(ITER_PIPELINES[name](grain_free_module, FlatMapIterDataset))
    )


class Pairs(FlatMapTransform):
    """A generator transform: each element becomes (x, -x)."""

    def flat_map(self, element):
        yield element
        yield -element


def test_flat_map_iter_takes_any_iterable_from_flat_map():
    ds = FlatMapIterDataset(MapDataset.range(3).to_iter_dataset(), Pairs())
    assert list(ds) == [0, 0, 1, -1, 2, -2]


def test_flat_map_datasets_travel_by_cloudpickle():
    for ds in (
        FlatMapMapDataset(MapDataset.range(5), OursSplit()),
        FlatMapIterDataset(MapDataset.range(5).to_iter_dataset(), OursSplit()),
    ):
        assert list(cloudpickle.loads(cloudpickle.dumps(ds))) == list(ds)


class _GrainFreeModule:
    MapDataset = MapDataset


grain_free_module = _GrainFreeModule


def test_a_flat_map_after_an_endless_repeat_is_endless_as_in_grain():
    ours = FlatMapMapDataset(MapDataset.range(5).repeat(), OursSplit())
    theirs = grain.experimental.FlatMapMapDataset(grain.MapDataset.range(5).repeat(), Split())
    assert len(ours) == len(theirs) == sys.maxsize
    assert [ours[i] for i in range(40)] == [theirs[i] for i in range(40)]
