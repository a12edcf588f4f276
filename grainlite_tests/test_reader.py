"""The read stage: reads move to reader threads only when the source is slow, and the order and
content never depend on which thread read them; each worker reads exactly its slice."""

from __future__ import annotations

import threading
import time

import pytest

import grainlite as grain
from grainlite.loader import chunk_reads, record_reader
from grainlite.loader.record_reader import RecordReader
from grainlite.loader.striding import WorkerSlice
from grainlite_tests.support.preempted_reads import PreemptedReads, SimulatedClock

# cpu_timing: these tests time this process's reads (scripts/check runs them alone).
pytestmark = pytest.mark.cpu_timing


class SlowSource:
    """A source whose reads take 100 µs (like a file or network read) and record their thread."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.threads: set[str] = set()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        self.threads.add(threading.current_thread().name)
        time.sleep(100e-6)
        return key * 3


def _elements(source, read_options):
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(len(source), grain.NoSharding(), True, 1, seed=4),
        read_options=read_options,
    )
    return [int(x) for x in loader]


def test_slow_reads_move_to_reader_threads_and_keep_the_order():
    threaded, synchronous = SlowSource(1500), SlowSource(1500)
    got = _elements(threaded, grain.ReadOptions(num_threads=4, prefetch_buffer_size=64))
    expected = _elements(synchronous, grain.ReadOptions(num_threads=0))
    assert got == expected and sorted(got) == [3 * k for k in range(1500)]
    assert any(name.startswith("grainlite-reader") for name in threaded.threads)
    assert synchronous.threads == {threading.current_thread().name}


def test_a_short_stream_is_read_in_the_consuming_thread_even_with_threads_configured():
    source = SlowSource(100)
    got = _elements(source, grain.ReadOptions())
    assert got == _elements(SlowSource(100), grain.ReadOptions(num_threads=0))
    # Fewer records than the reader times before deciding: no thread was started for them.
    assert source.threads == {threading.current_thread().name}


def test_cheap_reads_slowed_by_other_processes_stay_in_the_consuming_thread(monkeypatch):
    clock = SimulatedClock()  # 2 µs of work, 100 µs preempted, whatever the machine's load
    source = PreemptedReads(1500, cpu_s=2e-6, lost_s=100e-6, scale=3, clock=clock)
    monkeypatch.setattr(record_reader, "time", clock)
    monkeypatch.setattr(record_reader, "clock", clock.perf_counter_ns)
    monkeypatch.setattr(record_reader, "cpu_wait_s", lambda: source.waited)
    monkeypatch.setattr(record_reader, "usable_cpu_count", lambda: 8)
    got = _elements(source, grain.ReadOptions(num_threads=4, prefetch_buffer_size=64))
    assert sorted(got) == [3 * k for k in range(1500)]
    assert source.readers == {threading.current_thread().name}


@pytest.mark.parametrize(("cpus", "most"), [(1, 0), (3, 2)], ids=["no spare cpu", "two spare"])
def test_cpu_bound_reads_use_at_most_the_spare_cpus(monkeypatch, cpus, most):
    source = PreemptedReads(1500, cpu_s=100e-6, scale=3)
    monkeypatch.setattr(record_reader, "usable_cpu_count", lambda: cpus)
    got = _elements(source, grain.ReadOptions(num_threads=8, prefetch_buffer_size=64))
    assert got == _elements(SlowSource(1500), grain.ReadOptions(num_threads=0))
    reader_threads = source.readers - {threading.current_thread().name}
    assert len(reader_threads) <= most, source.readers
    assert all(name.startswith("grainlite-reader") for name in reader_threads)


def test_cpu_bound_reads_in_a_worker_get_only_its_share_of_the_spare_cpus(monkeypatch):
    source = PreemptedReads(1500, cpu_s=100e-6, scale=3)
    monkeypatch.setattr(record_reader, "usable_cpu_count", lambda: 4)
    sampler = grain.IndexSampler(1500, grain.NoSharding(), num_epochs=1, seed=3)
    worker = WorkerSlice.of(sampler, shard_index=0, shard_count=1, worker=0, workers=1)
    options = grain.ReadOptions(num_threads=8, prefetch_buffer_size=64)
    # One of 4 processes sharing 4 CPUs (a worker of worker_count=4): no CPU to spare.
    reader = RecordReader(sampler, source, worker, 0, options, processes=4)
    try:
        assert len([record for _, chunk in reader for record in chunk]) == 1500
    finally:
        reader.close()
    assert source.readers == {threading.current_thread().name}


class AskedIndices:
    """A sampler without ``record_keys`` that records which global indices it was asked for."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.asked: list[int] = []

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> grain.RecordMetadata:
        if index >= self.length:
            raise IndexError(index)
        self.asked.append(index)
        return grain.RecordMetadata(index=index, record_key=index)


def _read_all(sampler, worker: WorkerSlice) -> list:
    reader = RecordReader(sampler, list(range(100)), worker, 0, grain.ReadOptions(num_threads=0))
    try:
        return [record for _, chunk in reader for record in chunk]
    finally:
        reader.close()


def test_a_worker_reads_exactly_its_slice_from_a_sampler_without_vectorized_keys():
    sampler = AskedIndices(30)
    worker = WorkerSlice.of(sampler, shard_index=1, shard_count=2, worker=2, workers=3)
    assert _read_all(sampler, worker) == [5, 11, 17, 23, 29]
    assert sampler.asked == [5, 11, 17, 23, 29]


def test_a_worker_reads_exactly_its_slice_through_vectorized_record_keys():
    sampler = grain.IndexSampler(30, grain.NoSharding(), num_epochs=1, seed=3)
    worker = WorkerSlice.of(sampler, shard_index=1, shard_count=2, worker=2, workers=3)
    assert _read_all(sampler, worker) == [sampler[i].record_key for i in (5, 11, 17, 23, 29)]


class KeyEcho:
    """A source whose record is its key; slow enough (50 µs) to move reads to reader threads."""

    def __init__(self, size: int, slow: bool) -> None:
        self.size, self.slow = size, slow

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        if self.slow:
            time.sleep(50e-6)
        return key


@pytest.mark.parametrize("threads", [0, 3])
@pytest.mark.parametrize("start", [0, 1, 4093, 9000])
def test_keys_and_seeds_computed_ahead_in_blocks_match_the_sampler_at_every_position(
    threads, start
):
    # 20_011 records over 2 workers: each reads past two key blocks (chunk_reads._KEY_BLOCK),
    # from a start inside one, and with threads several chunks are read at once.
    sampler = grain.IndexSampler(20_011, grain.NoSharding(), shuffle=True, num_epochs=1, seed=9)
    worker = WorkerSlice.of(sampler, shard_index=0, shard_count=1, worker=1, workers=2)
    options = grain.ReadOptions(num_threads=threads, prefetch_buffer_size=96)
    reader = RecordReader(sampler, KeyEcho(20_011, slow=threads > 0), worker, start, options)
    try:
        chunks = list(reader)
    finally:
        reader.close()
    positions = range(start, worker.positions())
    assert [key for _, data in chunks for key in data] == [
        sampler[worker.index(m)].record_key for m in positions
    ]
    assert [seed for seeds, _ in chunks for seed in seeds] == [
        worker.index(m) + 9 for m in positions
    ]
    assert len(positions) > 2 * chunk_reads._KEY_BLOCK or start > 0


def _seeds_and_records(rngs: bool) -> tuple[list, list]:
    sampler = grain.IndexSampler(40, grain.NoSharding(), shuffle=True, num_epochs=1, seed=7)
    worker = WorkerSlice.of(sampler, shard_index=0, shard_count=1, worker=0, workers=1)
    options = grain.ReadOptions(num_threads=0)
    reader = RecordReader(sampler, list(range(40)), worker, 0, options, rngs=rngs)
    try:
        chunks = list(reader)
    finally:
        reader.close()
    seeds = [seed for chunk_seeds, _ in chunks if chunk_seeds is not None for seed in chunk_seeds]
    return seeds, [record for _, chunk in chunks for record in chunk]


def test_a_reader_for_transforms_without_generators_reads_the_same_records_and_no_seeds():
    sampler = grain.IndexSampler(40, grain.NoSharding(), shuffle=True, num_epochs=1, seed=7)
    with_seeds, records = _seeds_and_records(rngs=True)
    without_seeds, same_records = _seeds_and_records(rngs=False)
    assert records == same_records == [sampler[i].record_key for i in range(40)]
    assert with_seeds == [7 + i for i in range(40)]  # Grain's Philox key: seed + sampler index
    assert without_seeds == []


def test_a_pipeline_gives_generators_only_where_a_transform_takes_them():
    class Keep(grain.MapTransform):
        def map(self, element):
            return element

    class Draw(grain.RandomMapTransform):
        def random_map(self, element, rng):
            return (element, int(rng.integers(1 << 30)))

    sampler = grain.IndexSampler(6, grain.NoSharding(), shuffle=True, num_epochs=1, seed=5)
    loader = grain.DataLoader(
        data_source=list(range(6)), sampler=sampler, operations=[Keep(), Draw(), Keep()]
    )
    expected = [(sampler[i].record_key, int(sampler[i].rng.integers(1 << 30))) for i in range(6)]
    assert [(int(a), int(b)) for a, b in loader] == expected
