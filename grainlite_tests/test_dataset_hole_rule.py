"""One rule for "which nodes leave ``None`` holes", asked of the nodes (``leaves_holes``) by every
walk that needs it: the ``mp_prefetch`` batch rule (google/grain#1129), ``MapDataset.batch`` and
the elastic iterator. A ``FlatMapMapDataset`` under ``batch(drop_remainder=True)`` before
``mp_prefetch`` loses nothing silently: same batches as one process, with the documented warning."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from grainlite.dataset.flat_map import FlatMapMapDataset
from grainlite.dataset.map_dataset import MapDataset, first_hole_maker
from grainlite.dataset.mp.slicing import batch_block
from grainlite.options import MultiprocessingOptions
from grainlite.transforms.base import FlatMapTransform

pytestmark = pytest.mark.timeout(120)


class OnePiece(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element: Any) -> list[Any]:
        return [element]


class Doubled(MapDataset):
    """A user's node that declares it never leaves holes."""

    leaves_holes = False

    def __init__(self, parent: MapDataset) -> None:
        super().__init__(parent)

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, index: Any) -> Any:
        return self._parent[index] * 2


class EvenOnly(MapDataset):
    """A user's node that declares it leaves holes."""

    leaves_holes = True

    def __init__(self, parent: MapDataset) -> None:
        super().__init__(parent)

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, index: Any) -> Any:
        element = self._parent[index]
        return element if element % 2 == 0 else None


class Undeclared(Doubled):
    leaves_holes = None  # what a user's class that says nothing gets


def batches(ds: Any, workers: int) -> tuple[list[list[int]], list[str]]:
    """The batches of ``ds`` read with ``workers`` workers and the warnings made meanwhile."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if workers:
            ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=workers))
        out = [np.asarray(b).tolist() for b in ds]
    return out, [str(w.message) for w in caught]


@pytest.mark.parametrize("workers", [0, 2], ids=["W=0", "W=2"])
def test_a_flat_map_under_a_dropping_batch_before_mp_prefetch_loses_nothing_silently(workers):
    ds = (
        FlatMapMapDataset(MapDataset.range(10), OnePiece())
        .to_iter_dataset()
        .batch(2, drop_remainder=True)
    )
    got, warned = batches(ds, workers)
    assert got == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    if workers:
        assert any("each worker drops its own partial batch" in w for w in warned), warned


def test_every_walk_finds_a_flat_map_as_a_hole_maker():
    flat = FlatMapMapDataset(MapDataset.range(10), OnePiece()).map(lambda x: x)
    assert isinstance(first_hole_maker(flat, count_unknown=False), FlatMapMapDataset)
    assert batch_block(flat.to_iter_dataset().batch(2, drop_remainder=True)) == 1
    with pytest.raises(ValueError, match="can not follow `FlatMapMapDataset`"):
        flat.batch(2)


def test_a_users_node_that_declares_it_leaves_holes_is_refused_by_map_dataset_batch():
    with pytest.raises(ValueError, match="can not follow `EvenOnly`"):
        EvenOnly(MapDataset.range(10)).batch(2)


def test_a_users_node_that_declares_no_holes_keeps_the_batch_rule_with_no_warning():
    ds = Doubled(MapDataset.range(10)).to_iter_dataset().batch(3, drop_remainder=True)
    one, _ = batches(ds, 0)
    two, warned = batches(ds, 2)
    assert one == [[0, 2, 4], [6, 8, 10], [12, 14, 16]]
    assert two == one and not warned


def test_a_users_node_that_says_nothing_may_leave_holes_and_gets_the_warning():
    assert Undeclared.leaves_holes is None

    class Plain(MapDataset):  # declares nothing: unknown
        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: Any) -> Any:
            return index

    assert Plain.leaves_holes is None and MapDataset.range(3).leaves_holes is False
    ds = Plain().to_iter_dataset().batch(2, drop_remainder=True)
    assert batch_block(ds) == 1
