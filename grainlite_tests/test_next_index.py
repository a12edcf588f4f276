"""``get_next_index`` / ``set_next_index`` through limit, map, random_map and map_with_index
iterators: the index of the element given next, moved without reading, as Grain's public functions
do."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import grainlite as grain
from grainlite import experimental as gx


def _batched_stream(n: int, batch_size: int) -> grain.IterDataset:
    return grain.MapDataset.range(n).batch(batch_size).to_iter_dataset()


def _noisy(x: int, rng: np.random.Generator) -> tuple[int, int]:
    return x, int(rng.integers(1 << 30))


def test_a_limit_counts_the_elements_it_gave_as_its_next_index_even_at_its_end():
    it = iter(gx.LimitIterDataset(_batched_stream(20, 3), count=2))
    assert gx.get_next_index(it) == 0
    next(it)
    assert gx.get_next_index(it) == 1
    next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert gx.get_next_index(it) == 2


def test_set_next_index_on_a_limit_moves_its_parent_and_leaves_the_rest_of_the_count():
    it = iter(gx.LimitIterDataset(_batched_stream(20, 3), count=3))
    gx.set_next_index(it, 2)
    assert gx.get_next_index(it) == 2
    np.testing.assert_array_equal(next(it), [6, 7, 8])
    with pytest.raises(StopIteration):
        next(it)


def test_a_map_over_a_limit_answers_with_the_limits_next_index():
    it = iter(gx.LimitIterDataset(_batched_stream(20, 2), count=5).map(lambda b: b.sum()))
    gx.set_next_index(it, 3)
    assert gx.get_next_index(it) == 3
    assert next(it) == 6 + 7
    assert gx.get_next_index(it) == 4


def test_random_map_moved_by_set_next_index_gives_the_elements_of_an_uninterrupted_pass():
    ds = grain.MapDataset.range(12).to_iter_dataset().random_map(_noisy, seed=7)
    expected = list(ds)
    assert len({noise for _, noise in expected}) == 12
    it = iter(ds)
    for index in reversed(range(12)):
        gx.set_next_index(it, index)
        assert gx.get_next_index(it) == index
        assert next(it) == expected[index]
        assert gx.get_next_index(it) == index + 1


def test_map_with_index_moved_by_set_next_index_passes_the_moved_index_to_the_function():
    def pair(i: int, x: Any) -> tuple[int, Any]:
        return i, x

    it = iter(grain.MapDataset.range(10).to_iter_dataset().map_with_index(pair))
    for index in reversed(range(10)):
        gx.set_next_index(it, index)
        assert gx.get_next_index(it) == index
        assert next(it) == (index, index)
