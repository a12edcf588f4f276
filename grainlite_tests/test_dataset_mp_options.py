"""``DatasetOptions`` set above ``mp_prefetch`` reach the nodes that run in its worker processes."""

from __future__ import annotations

import pytest

import grainlite as grain
from grainlite.dataset.options import DatasetOptions, WithOptionsIterDataset

pytestmark = pytest.mark.timeout(120)


def _above_two(x: int) -> bool:
    return x > 2


@pytest.mark.parametrize("workers", [0, 2])
def test_a_filter_raise_threshold_set_above_mp_prefetch_applies_to_a_filter_in_the_workers(
    workers,
):
    ds = grain.MapDataset.source([1, 2, 3]).repeat(1000).to_iter_dataset().filter(_above_two)
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    ds = WithOptionsIterDataset(ds, DatasetOptions(filter_raise_threshold_ratio=0.1))
    with iter(ds) as iterator, pytest.raises(ValueError, match="filter"):
        list(iterator)
