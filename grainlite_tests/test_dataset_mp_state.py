"""``mp_prefetch`` states that are wrong: a short message quoting at most ~200 characters of the
bad value, and a damaged worker entry refused by ``set_state`` with a ValueError naming the field
(never a KeyError, a TypeError, or a worker silently started over); a FlatMap state pointing
beyond ``max_fan_out`` refused at W=0 and W=2 rather than skipping a record."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from grainlite.dataset.flat_map import FlatMapIterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.options import MultiprocessingOptions
from grainlite.transforms.base import FlatMapTransform

pytestmark = pytest.mark.timeout(120)


class Pair(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element: Any) -> list[Any]:
        return [element * 10, element * 10 + 1]


def two_workers(ds: Any) -> Any:
    return ds.mp_prefetch(MultiprocessingOptions(num_workers=2))


def refused(iterator: Any, state: Any) -> str:
    with pytest.raises(ValueError) as raised:
        iterator.set_state(state)
    assert not isinstance(raised.value, KeyError | TypeError)
    return str(raised.value)


@pytest.mark.parametrize(
    "state",
    [
        {"x": "y" * 1_500_000},
        "z" * 1_500_000,
        {"iterators_in_use_states": [{"next_index": 0}] * 2, "exhausted": ["e" * 1_500_000]},
        {"iterators_in_use_states": "s" * 1_500_000},
    ],
    ids=["no-field", "not-a-dict", "bad-exhausted", "states-not-a-list"],
)
def test_a_wrong_dict_gives_a_message_quoting_at_most_about_200_characters(state):
    with two_workers(MapDataset.range(8).to_iter_dataset()).__iter__() as iterator:
        message = refused(iterator, state)
    assert len(message) < 700, message[:1000]


@pytest.mark.parametrize(
    "entry",
    [{}, "garbage", [1], None, {"next_index": "3"}, {"next_index": 10**9}],
    ids=["empty-dict", "string", "list", "None", "bad-next-index", "out-of-range"],
)
def test_a_damaged_worker_entry_is_a_value_error_naming_the_field(entry):
    ds = two_workers(MapDataset.range(8).to_iter_dataset())
    with iter(ds) as iterator:
        assert [next(iterator) for _ in range(3)] == [0, 1, 2]
        good = iterator.get_state()
        damaged = dict(good, iterators_in_use_states=[entry, good["iterators_in_use_states"][1]])
        message = refused(iterator, damaged)
        assert "iterators_in_use_states[0]" in message
        assert len(message) < 700
        assert list(iterator) == [3, 4, 5, 6, 7]  # refused: the iterator did not move


def test_a_flat_map_state_beyond_max_fan_out_is_refused_in_one_process():
    ds = FlatMapIterDataset(MapDataset.range(4).to_iter_dataset(), Pair())
    iterator = iter(ds)
    with pytest.raises(ValueError, match="next_index_in_buffer 3 is beyond the transform's "):
        iterator.set_state({"parent": {"next_index": 1}, "next_index_in_buffer": 3})
    iterator.set_state({"parent": {"next_index": 1}, "next_index_in_buffer": 1})
    assert list(iterator) == [11, 20, 21, 30, 31]


def test_a_flat_map_state_beyond_the_pieces_of_its_element_is_refused():
    class OnePieceOfThree(Pair):
        max_fan_out = 3

        def flat_map(self, element: Any) -> list[Any]:
            return [element]

    iterator = iter(FlatMapIterDataset(MapDataset.range(4).to_iter_dataset(), OnePieceOfThree()))
    with pytest.raises(ValueError, match="beyond the 1 pieces of the element"):
        iterator.set_state({"parent": {"next_index": 1}, "next_index_in_buffer": 3})


def test_a_flat_map_worker_state_beyond_max_fan_out_is_refused_by_set_state_at_two_workers():
    ds = two_workers(FlatMapIterDataset(MapDataset.range(6).to_iter_dataset(), Pair()))
    with iter(ds) as iterator:
        first = [next(iterator) for _ in range(3)]
        good = iterator.get_state()
        entry = dict(good["iterators_in_use_states"][0], next_index_in_buffer=5)
        damaged = dict(good, iterators_in_use_states=[entry, good["iterators_in_use_states"][1]])
        message = refused(iterator, damaged)
        assert "iterators_in_use_states[0]" in message and "max_fan_out 2" in message
        rest = list(iterator)
    assert sorted(first + rest) == sorted(x * 10 + k for x in range(6) for k in (0, 1))


def test_a_state_whose_cycle_fields_are_numpy_integers_resumes_as_in_grain():
    # Grain 0.2.18's mp_prefetch takes numpy integers in next_index_in_cycle and exhausted
    # (a state edited with numpy); the same state resumes at the same element here.
    ds = two_workers(MapDataset.range(8).to_iter_dataset())
    with iter(ds) as iterator:
        assert [next(iterator) for _ in range(3)] == [0, 1, 2]
        state = iterator.get_state()
    state["next_index_in_cycle"] = np.int64(state["next_index_in_cycle"])
    state["exhausted"] = [np.int32(flag) for flag in state["exhausted"]]
    with iter(ds) as iterator:
        iterator.set_state(state)
        assert list(iterator) == [3, 4, 5, 6, 7]
