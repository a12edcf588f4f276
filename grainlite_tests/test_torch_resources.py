"""The loader's background parts: closing them, and a rank whose data ends too early."""

from __future__ import annotations

import pytest
from leak_check import live_children

import grainlite as grain
from grainlite.torch import TorchDataLoader
from grainlite_tests.support.torch_records import KeepEven, records

pytestmark = pytest.mark.timeout(60)


def epoch_ids(loader) -> list[list[int]]:
    return [batch["id"].tolist() for batch in loader]


def test_closing_the_resources_twice_stops_everything_once():
    before = live_children()
    loader = TorchDataLoader(
        data_source=records(8), operations=[grain.Batch(2)], worker_count=1, pin_memory=False
    )
    next(iter(loader))
    assert len(live_children() - before) == 1
    loader._resources.close()
    loader._resources.close()
    assert live_children() - before == set()
    assert loader._resources.iterator is None and loader._resources.thread is None


def test_a_filter_that_keeps_too_few_records_for_batches_per_epoch_raises():
    loader = TorchDataLoader(
        data_source=records(8), operations=[KeepEven(), grain.Batch(2)], batches_per_epoch=3
    )
    with pytest.raises(RuntimeError, match="rank 0's data ran out before batches_per_epoch=3"):
        epoch_ids(loader)
