"""The loader's background parts: closing them, and a rank whose data ends too early."""

from __future__ import annotations

import gc
import threading

import pytest
from leak_check import live_children

import grainlite as grain
from grainlite.torch import TorchDataLoader
from grainlite_tests.support.processes import loader_processes
from grainlite_tests.support.torch_records import KeepEven, records
from grainlite_tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


def epoch_ids(loader) -> list[list[int]]:
    return [batch["id"].tolist() for batch in loader]


def test_closing_the_resources_twice_stops_everything_once():
    before = live_children()
    loader = TorchDataLoader(
        data_source=records(8), operations=[grain.Batch(2)], worker_count=1, pin_memory=False
    )
    next(iter(loader))
    assert len(live_children() - before) == loader_processes(1)  # the worker (and its server)
    loader._resources.close()
    loader._resources.close()
    assert live_children() - before == set()
    assert loader._resources.iterator is None and loader._resources.thread is None


def _pinning_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "grainlite-pin-memory"]


def _reading_ahead() -> tuple[TorchDataLoader, threading.Thread]:
    """A loader whose pinning thread has filled its queue and waits for room."""
    loader = TorchDataLoader(
        data_source=records(64), operations=[grain.Batch(2)], worker_count=0, pin_memory=True
    )
    next(iter(loader))
    (thread,) = _pinning_threads()
    wait_for(lambda: loader._resources.thread.queued() == 2, "a full pinning queue")
    return loader, thread


# On a machine without an accelerator, pin_memory=True warns once and still reads ahead.
@pytest.mark.filterwarnings("ignore:TorchDataLoader\\(pin_memory=True\\)")
def test_the_pinning_thread_ends_on_close_and_when_a_forgotten_loader_is_collected():
    assert _pinning_threads() == []
    loader, thread = _reading_ahead()
    loader.close()
    assert not thread.is_alive()  # close() returns after the thread has ended
    loader, thread = _reading_ahead()
    del loader
    gc.collect()
    thread.join(1.0)
    assert not thread.is_alive()
    assert _pinning_threads() == []


def test_a_filter_that_keeps_too_few_records_for_batches_per_epoch_raises():
    loader = TorchDataLoader(
        data_source=records(8), operations=[KeepEven(), grain.Batch(2)], batches_per_epoch=3
    )
    with pytest.raises(RuntimeError, match="rank 0's data ran out before batches_per_epoch=3"):
        epoch_ids(loader)
