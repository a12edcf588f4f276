"""Big index-list reads ahead (grainlite.sources.list_reads) in both APIs: the same records, order,
states and errors as reads in the consuming thread, and no thread left behind."""

from __future__ import annotations

import dataclasses
import gc
import pathlib
import threading
import time

import numpy as np
import pytest
from array_record.python import array_record_module

import grainlite as grain
from grainlite.dataset import reading_process
from grainlite.errors import CorruptedDataError
from grainlite.loader import record_reader
from grainlite.options import READ_POLICY
from grainlite.sources import list_reads
from grainlite.sources.array_record import ArrayRecordDataSource
from grainlite_tests.support.contracts import assert_resumes_at_every_step

pytestmark = pytest.mark.timeout(60)

_THREAD = "grainlite-list-reads"


def write(path: pathlib.Path, records: list[bytes]) -> str:
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    for record in records:
        writer.write(record)
    writer.close()
    return str(path)


@pytest.fixture
def spare_cpu(monkeypatch):
    """A spare CPU for both APIs' readers, as on any machine with two or more (list reads need
    one), whatever CPUs the test runs on."""
    monkeypatch.setattr(record_reader, "usable_cpu_count", lambda: 4)
    monkeypatch.setattr(reading_process, "usable_cpu_count", lambda: 4)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks from 4 keys (not 1,024), so that files of a few hundred records go through many."""
    policy = dataclasses.replace(READ_POLICY, min_list_block=4)
    monkeypatch.setattr(list_reads, "READ_POLICY", policy)


@pytest.fixture
def served(monkeypatch):
    """Counts the reads served by list reads ahead (to prove a test went through them).

    Until the count is above 0, a take that reaches a read-ahead's head waits (up to 20 s) for
    its first block, as a consumer with work per step would give it time to: a consumer faster
    than the read-ahead thread reads every key itself (by design, no wait at the start), so on a
    busy machine a short stream could end before any block was ready (a CI failure)."""
    counts = {"served": 0}
    take = list_reads.ListReads.take

    def counting(self, keys):
        deadline = time.monotonic() + 20
        while (
            counts["served"] == 0
            and not self._started
            and self._on
            and (self._reached or self._head in keys)
            and self._blocks.empty()
            and self.thread.is_alive()
            and time.monotonic() < deadline
        ):
            time.sleep(0.002)
        records = take(self, keys)
        counts["served"] += records is not None
        return records

    monkeypatch.setattr(list_reads.ListReads, "take", counting)
    return counts


def without_list_reads(monkeypatch):
    monkeypatch.setattr(list_reads.ListReads, "open", classmethod(lambda cls, *a, **k: None))


@pytest.fixture
def files(tmp_path):
    """Three files of 300 records (900 keys: list reads pay from 4 keys, blocks of 4, 8, ...),
    records of varied length."""
    paths, records = [], []
    for f in range(3):
        mine = [f"file{f}-record{k}-".encode() + b"x" * (k % 7) for k in range(300)]
        paths.append(write(tmp_path / f"part-{f}.array_record", mine))
        records += mine
    return paths, records


def loader(paths, seed=3, epochs=1):
    source = ArrayRecordDataSource(paths)
    sampler = grain.IndexSampler(
        len(source), grain.NoSharding(), shuffle=True, num_epochs=epochs, seed=seed
    )
    return grain.DataLoader(data_source=source, sampler=sampler, worker_count=0)


def dataset(paths, seed=3):
    return grain.MapDataset.source(ArrayRecordDataSource(paths)).shuffle(seed=seed)


def list_read_threads():
    return [thread for thread in threading.enumerate() if thread.name == _THREAD]


def wait_for_no_list_read_threads():
    deadline = time.monotonic() + 5
    while list_read_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return list_read_threads()


class _ImagesLike:
    """What the ``images`` workload's file says of its reads: 20,000 records of about 150 KB."""

    def __len__(self):
        return 20_000

    def list_read_profile(self):
        return 79, 150_000.0


def test_the_policy_reads_small_records_ahead_in_big_blocks_and_large_ones_never(tmp_path):
    small = ArrayRecordDataSource(write(tmp_path / "s.array_record", [b"r" * 16] * 2560))
    assert READ_POLICY.list_read_blocks(small) == (1024, 65536)
    assert READ_POLICY.list_read_blocks(small, spare_cpus=0) is None  # a worker per CPU
    # One of several worker processes: the workers are the parallelism, whatever CPUs are spare.
    assert READ_POLICY.list_read_blocks(small, spare_cpus=8, processes=2) is None
    assert READ_POLICY.list_read_blocks(small, spare_cpus=8, processes=1) == (1024, 65536)
    assert READ_POLICY.list_read_blocks(_ImagesLike()) is None  # 4 MiB hold 27 of them
    assert READ_POLICY.list_read_blocks([b"r"] * 100_000) is None  # says nothing of its reads
    few = ArrayRecordDataSource(write(tmp_path / "f.array_record", [b"r" * 16] * 1000))
    assert READ_POLICY.list_read_blocks(few) is None  # fewer records than a first block
    # 2,560 records pay a list read from 10 keys; blocks start at 1,024 all the same.
    assert dataclasses.replace(READ_POLICY, min_list_block=4).list_read_blocks(small) == (
        10,
        65536,
    )


def test_shuffled_keys_of_several_files_read_ahead_give_the_same_records_in_order(
    files, spare_cpu, served
):
    paths, records = files
    elements = [bytes(e) for e in loader(paths, epochs=2)]
    assert served["served"] > 0
    order = grain.IndexSampler(900, grain.NoSharding(), shuffle=True, num_epochs=2, seed=3)
    assert elements == [records[order[i].record_key] for i in range(1800)]
    served["served"] = 0
    with iter(dataset(paths).to_iter_dataset()) as iterator:
        from_dataset = list(iterator)
    assert served["served"] > 0
    assert from_dataset == [dataset(paths)[i] for i in range(900)]


def test_a_batched_dataset_reads_its_rows_ahead_in_order(files, spare_cpu, served):
    paths, _ = files
    pipeline = dataset(paths).batch(32, batch_fn=list)
    with iter(pipeline.to_iter_dataset()) as iterator:
        batches = list(iterator)
    assert served["served"] > 0
    assert batches == [pipeline[i] for i in range(len(pipeline))]


def test_a_loader_restored_mid_block_reads_on_from_its_state(files, spare_cpu, served):
    paths, _ = files
    assert_resumes_at_every_step(lambda: loader(paths), new_loader_steps=[0, 1, 5, 37, 300, 899])
    with iter(loader(paths)) as iterator:
        for _ in range(300):
            next(iterator)
        state = iterator.get_state()
    expected = [bytes(e) for e in loader(paths)][300:]
    served["served"] = 0
    with iter(loader(paths)) as restored:
        restored.set_state(state)
        assert [bytes(e) for e in restored] == expected
    assert served["served"] > 0  # read ahead from the restored position, not from 0


def test_a_dataset_iterator_moved_back_mid_block_reads_ahead_from_there(files, spare_cpu, served):
    paths, _ = files
    expected = list(dataset(paths).to_iter_dataset())
    with iter(dataset(paths).to_iter_dataset()) as iterator:
        for _ in range(100):
            next(iterator)
        state = iterator.get_state()
        for _ in range(350):  # reads blocks well past the state
            next(iterator)
        iterator.set_state(state)
        served["served"] = 0
        assert list(iterator) == expected[100:]
        assert served["served"] > 0  # a new read-ahead from the state, none stale
        iterator.set_state({"next_index": 713})
        assert list(iterator) == expected[713:]


def test_read_ahead_asked_for_other_keys_than_its_next_serves_nothing_and_stops(files):
    paths, records = files
    source = ArrayRecordDataSource(paths)
    order = np.random.default_rng(0).permutation(900)

    def keys_of(p0, p1):
        return order[p0:p1]

    reads = list_reads.ListReads(source, keys_of, 0, 900, (4, 64))
    try:
        assert reads.take(order[:4].tolist()) is None  # the lead: read by the consumer
        while reads.thread.is_alive() and reads._blocks.empty():
            time.sleep(0.001)
        assert reads.take(order[4:20].tolist()) == [records[k] for k in order[4:20]]
        assert reads.take(order[21:30].tolist()) is None  # skips key 20: not the next keys
        assert reads.take(order[30:40].tolist()) is None  # off for good
        assert not reads.thread.is_alive()
    finally:
        reads.close()


def damaged(tmp_path, bad):
    records = [np.random.default_rng(k).bytes(100) for k in range(3000)]  # incompressible
    path = pathlib.Path(write(tmp_path / "damaged.array_record", records))
    data = bytearray(path.read_bytes())
    at = data.find(records[bad])  # flips bytes inside that record only
    data[at : at + 50] = bytes(b ^ 0xFF for b in data[at : at + 50])
    path.write_bytes(bytes(data))
    return str(path)


def loader_until_error(path):
    out = []
    with pytest.raises(CorruptedDataError) as raised:
        for element in loader(path, seed=1):
            out.append(bytes(element))
    return out, str(raised.value)


def dataset_with_errors(path):
    out = []
    with iter(dataset(path, seed=1).to_iter_dataset()) as iterator:
        while True:
            try:
                out.append(next(iterator))
            except StopIteration:
                return out
            except CorruptedDataError as error:
                out.append(("error", type(error), str(error)))


def test_a_damaged_record_read_ahead_raises_the_same_error_at_its_place(
    tmp_path, spare_cpu, served, monkeypatch
):
    order = grain.IndexSampler(3000, grain.NoSharding(), shuffle=True, num_epochs=1, seed=1)
    bad = order[2000].record_key  # deep in the stream: blocks before it are served
    path = damaged(tmp_path, bad)
    ahead = loader_until_error(path), dataset_with_errors(path)
    assert served["served"] > 0
    assert len(ahead[0][0]) == 1792  # the loader's chunk with it (1792 to 2047) fails whole
    assert f"Could not read record {bad} of the data source" in ahead[0][1]
    assert sum(1 for e in ahead[1] if type(e) is tuple) == 1
    without_list_reads(monkeypatch)
    assert (loader_until_error(path), dataset_with_errors(path)) == ahead


def test_the_read_ahead_thread_ends_on_close_and_on_collection(files, spare_cpu, monkeypatch):
    paths, _ = files
    made = []  # holds each read-ahead, so that only close() can end its thread
    init = list_reads.ListReads.__init__

    def keeping(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(list_reads.ListReads, "__init__", keeping)
    assert not wait_for_no_list_read_threads()
    with iter(loader(paths)) as iterator:
        next(iterator)
        assert len(list_read_threads()) == 1
    assert not list_read_threads()  # close waits for it
    ds_iterator = iter(dataset(paths).to_iter_dataset())
    next(ds_iterator)
    assert len(list_read_threads()) == 1
    ds_iterator.close()
    assert not list_read_threads()
    assert len(made) == 2
    made.clear()
    iterator = iter(loader(paths))
    next(iterator)
    ds_iterator = iter(dataset(paths).to_iter_dataset())
    next(ds_iterator)
    assert len(list_read_threads()) == 2
    made.clear()
    del iterator, ds_iterator
    gc.collect()
    assert not wait_for_no_list_read_threads()


def test_a_read_ahead_dropped_without_close_ends_its_thread(files):
    paths, _ = files
    order = np.random.default_rng(1).permutation(900)
    reads = list_reads.ListReads(
        ArrayRecordDataSource(paths), lambda p0, p1: order[p0:p1], 0, 900, (4, 64)
    )
    thread = reads.thread
    assert thread.is_alive()
    del reads
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()
