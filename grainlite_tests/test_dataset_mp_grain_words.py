"""``mp_prefetch`` speaks Grain's words where code written for Grain matches on them: a worker
that exits ("was terminated unexpectedly with exit code N") and a node that cannot travel to the
workers ("Dataset: <node> cannot be pickled!"), with grainlite's guidance kept.

The autouse fixture checks that no process or segment is left behind."""

from __future__ import annotations

import sys
import threading

import pytest

import grainlite as grain

pytestmark = pytest.mark.timeout(120)


def _options(workers: int) -> grain.MultiprocessingOptions:
    return grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=1)


class ExitsAt(grain.transforms.Map):
    def __init__(self, at: int) -> None:
        self.at = at

    def map(self, x: int) -> int:
        if x == self.at:
            sys.exit(123)
        return x


class Plain(grain.transforms.Map):
    def map(self, x: int) -> int:
        return x


class HoldsALock(grain.transforms.Map):
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def map(self, x: int) -> int:
        return x


def test_a_transform_calling_sys_exit_in_a_worker_reports_grains_words_and_its_exit_code():
    ds = grain.MapDataset.range(6).to_iter_dataset().map(ExitsAt(3)).mp_prefetch(_options(2))
    iterator = iter(ds)
    with pytest.raises(RuntimeError) as caught:
        list(iterator)
    text = str(caught.value)
    assert "Worker process was terminated unexpectedly with exit code 123." in text
    assert "SystemExit(123)" in text and "worker 1" in text  # grainlite's guidance stays
    iterator.close()


def test_an_unpicklable_node_under_mp_prefetch_is_named_by_a_note_as_grain_names_it():
    left = grain.MapDataset.range(0, 10).map(Plain())
    right = grain.MapDataset.range(10, 20).map(HoldsALock())
    ds = grain.MapDataset.mix([left, right], [1.0, 1.0]).to_iter_dataset().mp_prefetch(_options(2))
    with pytest.raises(TypeError, match=r"cannot pickle '_thread\.lock' object") as caught:
        list(ds)
    notes = "".join(caught.value.__notes__)
    assert "Dataset: MapMapDataset(transform=HoldsALock) cannot be pickled!" in notes
    assert "MultiprocessingOptions(num_workers=0)" in notes  # the fix is still offered
