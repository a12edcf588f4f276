"""``to_iter_dataset()`` checks the holes it skips as Grain does: a window of 1000 elements read
with too many filtered out warns (or raises, under ``DatasetOptions``), naming the iterator."""

from __future__ import annotations

import json
import logging
import re

import pytest

import grainlite as grain
from grainlite import experimental as gx

_NAME = (
    "Transformation PrefetchDatasetIterator(read_options=ReadOptions(num_threads=16, "
    "prefetch_buffer_size=500), allow_nones=False)"
)


def _keeping_from(n: int, first_kept: int) -> grain.MapDataset:
    return grain.MapDataset.range(n).filter(lambda x: x >= first_kept)


def test_a_map_filter_that_drops_every_element_read_through_to_iter_dataset_warns(caplog):
    with caplog.at_level(logging.WARNING):
        assert list(_keeping_from(1000, 1000).to_iter_dataset()) == []
    assert f"{_NAME} skipped 100.00 % of the last seen 1000 elements." in caplog.text


def test_holes_under_the_threshold_or_yielded_with_allow_nones_do_not_warn(caplog):
    with caplog.at_level(logging.WARNING):
        assert len(list(_keeping_from(2000, 850).to_iter_dataset())) == 1150  # 85 % dropped
        assert len(list(_keeping_from(1000, 1000).to_iter_dataset(allow_nones=True))) == 1000
    assert "skipped" not in caplog.text


def test_a_window_over_the_raise_ratio_raises_once_and_the_stream_goes_on_after_it():
    ds = gx.WithOptionsIterDataset(
        _keeping_from(1500, 990).to_iter_dataset(),
        gx.DatasetOptions(filter_raise_threshold_ratio=0.9),
    )
    it = iter(ds)
    with pytest.raises(
        ValueError, match=re.escape(f"{_NAME} skipped 99.00 % of the last seen 1000")
    ):
        for _ in range(11):  # 990..999 are kept: the window closes at the 11th next()
            next(it)
    state = json.loads(json.dumps(it.get_state()))
    assert state == {"next_index": 1000}
    rest = list(it)
    assert rest == list(range(1000, 1500))
    again = iter(ds)
    again.set_state(state)
    assert list(again) == rest


def test_the_check_window_keeps_every_element_and_state_in_order_at_its_edges():
    ds = grain.MapDataset.range(2600).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=7)
    )
    it = iter(ds)
    for expected in range(2600):
        assert it.get_state() == {"next_index": expected}
        assert next(it) == expected
    with pytest.raises(StopIteration):
        next(it)
