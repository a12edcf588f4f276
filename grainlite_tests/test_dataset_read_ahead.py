"""How far, and with how many threads, ``to_iter_dataset`` reads ahead (read_ahead.py).

What is read never depends on the threads (test_dataset_to_iter.py checks that); these tests check
the cost rules: reads that keep a CPU busy get no more threads than there are spare CPUs, and
large elements are not read far ahead.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

import grainlite as grain
from grainlite.cpus import cpu_wait_s as kernel_cpu_wait_s
from grainlite.dataset import read_ahead, reading_process
from grainlite_tests.support.preempted_reads import PreemptedReads, SimulatedClock

# cpu_timing: the policy under test times this process's reads (scripts/check runs it alone).
pytestmark = [pytest.mark.timeout(60), pytest.mark.cpu_timing]


class LargeSlowReads:
    """A source of 4 MiB arrays whose reads wait about 200 µs (storage), recording the furthest
    index read."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.furthest = -1

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> np.ndarray:
        time.sleep(200e-6)
        self.furthest = max(self.furthest, index)
        return np.zeros(1 << 20, dtype=np.float32)


def _read(source: Any, count: int, threads: int) -> None:
    options = grain.ReadOptions(num_threads=threads, prefetch_buffer_size=500)
    with iter(grain.MapDataset.source(source).to_iter_dataset(options)) as iterator:
        for _ in range(count):
            next(iterator)


@pytest.fixture
def cpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Sets how many CPUs this process may use, and restores the process's CPU share after."""
    monkeypatch.setattr(reading_process, "_cpus_for_reads", None)
    monkeypatch.setattr(reading_process, "_read_ahead_bytes", reading_process._READ_AHEAD_BYTES)

    def set_cpus(count: int) -> None:
        monkeypatch.setattr(reading_process, "usable_cpu_count", lambda: count)

    return set_cpus


def test_cpu_bound_reads_in_an_mp_prefetch_worker_stay_in_the_consuming_thread(cpus):
    cpus(4)
    reading_process.share_cpus(4)  # what each of 4 mp_prefetch workers declares
    source = PreemptedReads(700, cpu_s=100e-6)  # a 100 µs decode
    _read(source, 700, threads=8)
    assert source.readers == {threading.current_thread().name}


def test_cpu_bound_reads_in_process_use_at_most_the_spare_cpus(cpus):
    cpus(3)  # two CPUs beyond the consuming thread's
    source = PreemptedReads(700, cpu_s=100e-6)  # a 100 µs decode
    _read(source, 700, threads=8)
    reader_threads = source.readers - {threading.current_thread().name}
    assert 1 <= len(reader_threads) <= 2, source.readers


def test_large_elements_are_read_at_most_about_64_mib_ahead(cpus):
    cpus(8)
    source = LargeSlowReads(400)
    options = grain.ReadOptions(num_threads=4, prefetch_buffer_size=500)
    ahead = []
    with iter(grain.MapDataset.source(source).to_iter_dataset(options)) as iterator:
        for consumed in range(300):
            next(iterator)
            time.sleep(200e-6)  # a consumer that works as long as a read
            ahead.append(source.furthest - consumed)
    assert max(ahead[50:]) <= 2 * (64 << 20) // (4 << 20), max(ahead)


def test_reads_slowed_by_other_processes_still_count_as_cpu_bound(cpus, monkeypatch):
    cpus(4)
    reading_process.share_cpus(4)  # as in an mp_prefetch worker: no spare CPU for reader threads
    source = PreemptedReads(700, cpu_s=50e-6, lost_s=150e-6)
    monkeypatch.setattr(read_ahead, "cpu_wait_s", lambda: source.waited + kernel_cpu_wait_s())
    _read(source, 700, threads=8)
    assert source.readers == {threading.current_thread().name}


def test_cheap_reads_slowed_by_other_processes_stay_in_the_consuming_thread(cpus, monkeypatch):
    cpus(8)  # spare CPUs: only the running time of the reads keeps them in this thread
    clock = SimulatedClock()  # 2 µs of work, 100 µs preempted, whatever the machine's load
    source = PreemptedReads(700, cpu_s=2e-6, lost_s=100e-6, clock=clock)
    monkeypatch.setattr(read_ahead, "time", clock)
    monkeypatch.setattr(read_ahead, "cpu_wait_s", lambda: source.waited)
    _read(source, 700, threads=8)
    assert source.readers == {threading.current_thread().name}


class SlowFirstAccess:
    """A source whose reads wait ``first_s`` for the first element read (a file opened) and
    ``each_s`` for every element, counting the reads and recording who made them."""

    def __init__(self, size: int, first_s: float, each_s: float) -> None:
        self.size, self.first_s, self.each_s = size, first_s, each_s
        self.count = 0
        self.readers: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        with self._lock:
            first, self.count = self.count == 0, self.count + 1
            self.readers.add(threading.current_thread().name)
        delay = self.first_s if first else self.each_s
        if delay:
            time.sleep(delay)
        return index


def _to_iter_threads() -> int:
    return sum(t.name.startswith("grainlite-to-iter") for t in threading.enumerate())


def _wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_after_a_slow_first_read_the_threads_read_ahead_while_the_consumer_waits():
    before = _to_iter_threads()
    source = SlowFirstAccess(24, first_s=0.03, each_s=0.03)
    options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=500)
    iterator = iter(grain.MapDataset.source(source).to_iter_dataset(options))
    assert source.count == 0  # nothing is read before the first next()
    assert next(iterator) == 0
    _wait_until(lambda: source.count == 24, "the read-ahead stopped while the consumer waited")
    assert list(iterator) == list(range(1, 24))
    assert len(source.readers) == 3  # the consuming thread (the first read) and two threads
    iterator.close()
    assert _to_iter_threads() == before


@pytest.mark.parametrize("end", ["close", "garbage collection"])
def test_the_read_ahead_started_by_a_slow_first_read_stops_when_the_iterator_ends(end):
    before = _to_iter_threads()
    source = SlowFirstAccess(200, first_s=0.02, each_s=0.02)
    options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=500)
    iterator = iter(grain.MapDataset.source(source).to_iter_dataset(options))
    next(iterator)
    assert _to_iter_threads() == before + 2
    if end == "close":
        iterator.close()
    else:
        del iterator
    _wait_until(lambda: _to_iter_threads() == before, "a reader thread outlived its iterator")
    count = source.count
    time.sleep(0.2)
    assert source.count == count < 20  # the reads in flight finished; nothing read after


def test_reads_that_prove_cheap_after_a_slow_first_read_move_back_and_resume_exactly():
    def make() -> Any:
        source = SlowFirstAccess(3000, first_s=0.02, each_s=0.0)
        return iter(grain.MapDataset.source(source).filter(lambda x: x % 7).to_iter_dataset())

    iterator = make()
    elements, states = [], []
    for _ in range(2000):
        states.append(iterator.get_state())
        elements.append(next(iterator))
    assert iterator.read_threads == []  # the threads started at the first read ended
    elements += list(iterator)
    assert elements == [x for x in range(3000) if x % 7]
    for k in (0, 1, 5, 300, 1999):
        restored = make()
        restored.set_state(states[k])
        assert list(restored) == elements[k:], f"restored after {k} elements"


def test_an_mp_prefetch_worker_reads_ahead_at_most_its_share_of_64_mib(cpus):
    cpus(8)
    reading_process.share_cpus(4)  # one of 4 workers: 16 MiB of read-ahead
    source = LargeSlowReads(200)
    options = grain.ReadOptions(num_threads=4, prefetch_buffer_size=500)
    ahead = []
    with iter(grain.MapDataset.source(source).to_iter_dataset(options)) as iterator:
        for consumed in range(150):
            next(iterator)
            time.sleep(200e-6)
            ahead.append(source.furthest - consumed)
    assert max(ahead[50:]) <= 2 * (16 << 20) // (4 << 20), max(ahead)


_running = 0
_most_running = 0
_running_lock = threading.Lock()


class SlowLargeElement(grain.MapTransform):
    """A 2 MiB element made after a 20 ms wait (storage, not CPU: reads move to threads at
    once), with the most elements this process was making at the same time."""

    def map(self, index: int) -> dict[str, Any]:
        global _running, _most_running
        with _running_lock:
            _running += 1
            _most_running = max(_most_running, _running)
        time.sleep(0.02)
        with _running_lock:
            _running -= 1
            most = _most_running
        return {"x": np.full(1 << 19, index, dtype=np.float32), "most": np.int64(most)}


def test_batches_an_mp_prefetch_worker_fills_when_sent_count_their_bytes_in_the_read_ahead():
    # Each batch is 8 elements of 2 MiB, filled into shared memory when sent: a worker may read
    # 32 MiB ahead (64 MiB for 2 workers), so 2 batches at a time, each read by one thread. A
    # batch whose size was not counted let all 16 threads read a batch each.
    dataset = (
        grain.MapDataset.range(8 * 12)
        .map(SlowLargeElement())
        .batch(8)
        .to_iter_dataset(grain.ReadOptions(num_threads=16, prefetch_buffer_size=500))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    iterator = iter(dataset)
    try:
        batches = list(iterator)
    finally:
        iterator.close()
    assert sorted(int(row[0]) for batch in batches for row in batch["x"]) == list(range(96))
    most = max(int(batch["most"].max()) for batch in batches)
    assert most <= 2, most


def test_a_batch_a_worker_fills_when_sent_counts_the_bytes_of_the_batch_it_makes():
    from grainlite.dataset.mp import pipeline as worker_pipeline

    elements = [
        {"image": np.full((64, 64, 3), i, np.float32), "label": np.int64(i)} for i in range(5)
    ]
    later = worker_pipeline._stack_later(elements)
    assert type(later) is worker_pipeline._RowsLater
    expected = 5 * (64 * 64 * 3 * 4 + np.dtype(np.int64).itemsize)
    assert read_ahead._nbytes(later) == expected
