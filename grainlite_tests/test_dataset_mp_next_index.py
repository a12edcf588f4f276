"""Grain's ``get_next_index`` / ``set_next_index`` through a one-worker ``mp_prefetch``."""

from __future__ import annotations

import pytest

import grainlite as grain
from grainlite.experimental import get_next_index, set_next_index

pytestmark = pytest.mark.timeout(120)


def _prefetched(workers: int) -> grain.IterDataset:
    options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=1)
    return grain.MapDataset.range(10).to_iter_dataset().mp_prefetch(options)


def test_get_next_index_through_one_worker_follows_the_elements_and_set_next_index_moves_it():
    with iter(_prefetched(1)) as iterator:
        assert get_next_index(iterator) == 0
        assert next(iterator) == 0 and get_next_index(iterator) == 1
        state = iterator.get_state()
        set_next_index(iterator, 7)
        assert next(iterator) == 7 and get_next_index(iterator) == 8
        set_next_index(iterator, 1)
        assert iterator.get_state() == state  # the same position as a saved state
        assert list(iterator) == list(range(1, 10))


def test_next_index_through_several_workers_is_refused_with_the_way_out():
    with iter(_prefetched(2)) as iterator, pytest.raises(NotImplementedError, match="one worker"):
        get_next_index(iterator)


def _odd(x: int) -> bool:
    return x % 2 == 1


def test_next_index_through_a_filter_in_the_worker_is_refused_as_without_workers():
    options = grain.MultiprocessingOptions(num_workers=1, per_worker_buffer_size=1)
    ds = grain.MapDataset.range(10).to_iter_dataset().filter(_odd).mp_prefetch(options)
    with iter(ds) as iterator:
        assert next(iterator) == 1
        with pytest.raises(NotImplementedError):
            set_next_index(iterator, 4)
