"""close() gives back every file descriptor a worker stream used, even while the iterator lives.

The parent maps each worker's shared-memory slabs, and every mapping holds a file descriptor. A
closed iterator that stays referenced (in a list, in a trainer object) must not keep them: a
program that builds many loaders would otherwise run out of descriptors. Garbage collection is
switched off while the test runs, so nothing but ``close()`` can free them.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import grainlite as grain

pytestmark = pytest.mark.timeout(120)


class Rows(grain.MapTransform):
    """Elements with an array, so they cross through shared memory."""

    def map(self, element: int) -> np.ndarray:
        return np.full(512, element, np.int64)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _iterator() -> Any:
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 24, 1),
        sampler=grain.IndexSampler(24, grain.NoSharding(), shuffle=False, num_epochs=1, seed=0),
        operations=[Rows()],
        worker_count=2,
    )
    return iter(loader)


def _read_three(iterator: Any) -> None:
    for _ in range(3):
        next(iterator)


def _read_all(iterator: Any) -> None:
    assert len(list(iterator)) == 24


def _restore_then_read(iterator: Any) -> None:
    _read_three(iterator)
    iterator.set_state(iterator.get_state())
    _read_three(iterator)


USES: dict[str, Callable[[Any], None]] = {
    "three elements": _read_three,
    "a whole epoch": _read_all,
    "a set_state on live workers": _restore_then_read,
}


@pytest.mark.parametrize("use", list(USES), ids=list(USES))
def test_closed_iterators_that_stay_referenced_hold_no_file_descriptor(use):
    _read_three(_iterator())  # imports and first-use caches open what they open, once
    gc.collect()
    gc.disable()
    try:
        before = _open_descriptors()
        kept = []
        for _ in range(4):
            iterator = _iterator()
            USES[use](iterator)
            iterator.close()
            kept.append(iterator)
        left = _open_descriptors() - before
    finally:
        gc.enable()
    assert left == 0, f"{left} file descriptor(s) left open by 4 closed W=2 iterators ({use})"
    del kept
