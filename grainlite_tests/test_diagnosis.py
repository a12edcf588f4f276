"""stats().diagnosis names the slow side for real slow pipelines: a transform, a consumer, a read,
the transport, a node after mp_prefetch; and says nothing before there is data."""

from __future__ import annotations

import time

import numpy as np
import pytest

import grainlite as grain
from grainlite import cpus

# cpu_timing: these tests time this process's reads (scripts/check runs them alone).
pytestmark = pytest.mark.cpu_timing


@pytest.fixture(autouse=True)
def four_usable_cpus(monkeypatch):
    """The advice names the CPU count: make it the same on every machine."""
    monkeypatch.setattr(cpus, "usable_cpu_count", lambda *args, **kwargs: 4)


class SlowDecode(grain.MapTransform):
    def map(self, x):
        time.sleep(0.002)
        return np.array([x])


class Cheap(grain.MapTransform):
    def map(self, x):
        return np.array([x])


class SlowSource:
    """A random-access source whose every read takes 2 ms (a slow disk, say)."""

    def __len__(self):
        return 10_000

    def __getitem__(self, index):
        time.sleep(0.002)
        return index


def loader(operations, worker_count=0, source=None, records=10_000):
    return grain.DataLoader(
        data_source=source if source is not None else grain.RangeDataSource(0, records, 1),
        sampler=grain.IndexSampler(records, grain.NoSharding(), num_epochs=1, seed=0),
        operations=operations,
        worker_count=worker_count,
    )


def run_for(iterator, elements, consumer_seconds=0.0):
    for _ in range(elements):
        next(iterator)
        if consumer_seconds:
            time.sleep(consumer_seconds)  # the training step
    return iterator.stats()


def test_before_the_first_element_there_is_nothing_to_diagnose():
    with iter(loader([Cheap()])) as iterator:
        assert iterator.stats().diagnosis == (
            "no element delivered yet: call stats() after iterating for a while."
        )


def test_a_slow_transform_in_process_is_named_with_the_worker_count_to_set():
    with iter(loader([Cheap(), SlowDecode(), grain.Batch(4)])) as iterator:
        diagnosis = run_for(iterator, 12).diagnosis
    assert diagnosis.startswith("Transform `SlowDecode` takes ")
    assert diagnosis.endswith("set worker_count=4 to run it in parallel (4 CPUs available).")


def test_a_slow_transform_in_a_worker_asks_for_more_workers():
    with iter(loader([SlowDecode(), grain.Batch(4)], worker_count=1)) as iterator:
        next(iterator)  # start-up
        diagnosis = run_for(iterator, 10).diagnosis
    assert diagnosis.startswith("Transform `SlowDecode` takes ")
    assert "of worker time" in diagnosis
    assert diagnosis.endswith("raise worker_count (1 → 4 CPUs available).")


@pytest.mark.parametrize("worker_count", [0, 1], ids=["in-process", "1-worker"])
def test_a_consumer_that_sleeps_between_batches_is_the_slow_side(worker_count):
    with iter(loader([Cheap(), grain.Batch(8)], worker_count)) as iterator:
        next(iterator)  # start-up
        stats = run_for(iterator, 15, consumer_seconds=0.02)
    assert stats.diagnosis.startswith("the training loop, not the loader, is the slow side: ")
    assert stats.wait_share < 0.10
    if worker_count:
        assert stats.buffer.blocked_share > 0.5  # the worker waited on a full buffer


def test_a_slow_source_read_is_named_with_the_read_options_to_try():
    with iter(loader([Cheap()], source=SlowSource())) as iterator:
        diagnosis = run_for(iterator, 40).diagnosis
    assert diagnosis.startswith("`read (SlowSource)` takes ")
    assert "read_options=grain.ReadOptions(num_threads=16, prefetch_buffer_size=500)" in diagnosis


class Large(grain.MapTransform):
    """A 16 MiB element made for free (untouched pages): moving it is the only real work."""

    def map(self, x):
        return np.empty(16 * 1024 * 1024, dtype=np.uint8)


def test_moving_large_unbatched_elements_blames_the_transport():
    with iter(loader([Large()], worker_count=1, records=40)) as iterator:
        next(iterator)
        diagnosis = run_for(iterator, 12).diagnosis
    assert diagnosis.startswith("moving elements between processes (`transport`, ")
    assert diagnosis.endswith("put the Batch in the workers (last in operations) so fewer, "
                              "larger elements travel, and keep them numpy arrays.")  # fmt: skip


def test_a_dataset_node_after_mp_prefetch_is_asked_to_move_before_it():
    dataset = grain.MapDataset.range(1000).to_iter_dataset()
    dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=1)).map(SlowDecode())
    with iter(dataset) as iterator:
        next(iterator)
        diagnosis = run_for(iterator, 24).diagnosis
    assert diagnosis.startswith("`SlowDecode` runs in the consumer's process after mp_prefetch")
    assert diagnosis.endswith("move it before mp_prefetch so the workers run it.")


def test_a_slow_map_dataset_transform_read_by_to_iter_dataset_is_named():
    dataset = grain.MapDataset.range(1000).map(SlowDecode()).to_iter_dataset()
    with iter(dataset) as iterator:
        diagnosis = run_for(iterator, 24).diagnosis
    assert diagnosis.startswith("Transform `SlowDecode` takes ")


def test_a_slow_dataset_transform_in_process_points_to_mp_prefetch():
    dataset = grain.MapDataset.range(1000).to_iter_dataset().map(SlowDecode())
    with iter(dataset) as iterator:
        diagnosis = run_for(iterator, 24).diagnosis
    assert diagnosis.startswith("Transform `SlowDecode` takes ")
    assert diagnosis.endswith(
        "run it in 4 processes with .mp_prefetch(grain.MultiprocessingOptions(num_workers=4)) "
        "(4 CPUs available)."
    )
