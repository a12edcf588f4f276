"""READ_POLICY's read-ahead hints: a source with ``prefetch_keys`` is told the keys a DataLoader
reader will read, in order, before it reads them (a remote source fetches their files ahead)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from array_record.python import array_record_module

import grainlite as grain
from grainlite.dataset.key_hints import KeyHints
from grainlite.options import READ_POLICY


class HintedSource:
    """A range source that records the hints it gets and the keys it is asked for."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.hints: list[int] = []
        self.told: set[int] = set()
        self.reads: list[int] = []
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: int) -> int:
        with self.lock:
            self.reads.append(int(key))
            assert int(key) in self.told, f"key {key} read before it was hinted"
        return int(key)

    def prefetch_keys(self, keys) -> None:
        with self.lock:
            self.hints.extend(int(k) for k in keys)
            self.told.update(int(k) for k in keys)


def test_the_data_loader_tells_the_source_every_key_before_reading_it_in_order():
    length = 3 * READ_POLICY.tell_ahead
    source = HintedSource(length)
    sampler = grain.IndexSampler(length, grain.NoSharding(), shuffle=True, seed=5, num_epochs=1)
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        worker_count=0,
        read_options=grain.ReadOptions(num_threads=0),
    )
    got = list(loader)
    order = [sampler[i].record_key for i in range(length)]
    assert got == order
    assert source.hints == order  # each key once, in the order it is read
    assert source.reads == order


# The Dataset API: to_iter_dataset tells the source the keys its next indices read, through the
# nodes below it (grainlite.dataset.key_hints).


def _dataset_pipelines(source):
    base = grain.MapDataset.source(source)
    return {
        "shuffle": base.shuffle(seed=3),
        "shuffle-map-batch": base.shuffle(seed=3).map(lambda x: x + 1).batch(7),
        "slice-shuffle": base[5::2].shuffle(seed=4),
        "repeat-shuffle": base.shuffle(seed=3).repeat(2),
        "seed-random-map-filter": base.seed(9)
        .random_map(lambda x, rng: x + int(rng.integers(2)))
        .filter(lambda x: x % 3 != 0),
    }


PIPELINES = list(_dataset_pipelines(HintedSource(1)))


def _flat(elements) -> list[int]:
    out: list[int] = []
    for element in elements:
        out.extend(int(x) for x in np.asarray(element).reshape(-1))
    return out


@pytest.mark.parametrize("name", PIPELINES)
def test_the_dataset_api_tells_the_source_every_key_before_reading_it_in_order(name):
    length = 2 * READ_POLICY.tell_ahead + 123
    plain = _dataset_pipelines(list(range(length)))[name]  # a list source takes no hints
    source = HintedSource(length)
    hinted = _dataset_pipelines(source)[name]
    options = grain.ReadOptions(num_threads=0)
    expected = list(plain.to_iter_dataset(read_options=options))
    got = list(hinted.to_iter_dataset(read_options=options))
    assert _flat(got) == _flat(expected)  # hints change nothing read
    assert source.reads  # HintedSource.__getitem__ checked each read key was hinted first
    assert source.hints == source.reads  # each key told once, in the order it is read


def test_with_reader_threads_every_key_is_told_before_it_is_read():
    length = 3 * READ_POLICY.tell_ahead
    source = HintedSource(length)
    dataset = grain.MapDataset.source(source).shuffle(seed=8).map(lambda x: x * 2)
    options = grain.ReadOptions(num_threads=4, prefetch_buffer_size=64)
    got = list(dataset.to_iter_dataset(read_options=options))
    assert got == [2 * k for k in grain.MapDataset.source(list(range(length))).shuffle(seed=8)]
    assert sorted(source.reads) == list(range(length))  # each read was hinted first (asserted)


class FileHintedSource:
    """A range source for worker processes: each process appends the keys it is told and the
    keys it reads to its own file, and a read of a key not told yet raises."""

    def __init__(self, length: int, folder: str) -> None:
        self.length, self.folder = length, folder
        self._told: set[int] | None = None

    def __len__(self) -> int:
        return self.length

    def __getstate__(self):
        return {"length": self.length, "folder": self.folder, "_told": None}

    def _log(self, kind: str, keys) -> None:
        with open(os.path.join(self.folder, f"{kind}-{os.getpid()}"), "a") as log:
            log.write("".join(f"{int(k)}\n" for k in keys))

    def __getitem__(self, key: int) -> int:
        if self._told is None or int(key) not in self._told:
            raise AssertionError(f"key {key} read before it was told")
        self._log("read", [key])
        return int(key)

    def prefetch_keys(self, keys) -> None:
        if self._told is None:
            self._told = set()
        self._told.update(int(k) for k in keys)
        self._log("told", keys)


def test_mp_prefetch_workers_each_tell_their_source_the_keys_they_read_next(tmp_path):
    length = 2 * READ_POLICY.tell_ahead
    source = FileHintedSource(length, str(tmp_path))
    dataset = (
        grain.MapDataset.source(source)
        .shuffle(seed=2)
        .batch(16)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    expected = (
        grain.MapDataset.source(list(range(length)))
        .shuffle(seed=2)
        .batch(16)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    assert _flat(dataset) == _flat(expected)
    # The training process told the first keys as the workers started (its own copy of the
    # source; a remote one shares its cache with theirs).
    first = (tmp_path / f"told-{os.getpid()}").read_text().split()
    order = list(grain.MapDataset.source(list(range(length))).shuffle(seed=2))
    assert [int(k) for k in first] == order[: READ_POLICY.tell_ahead]
    reads = {path.name.split("-")[1] for path in tmp_path.glob("read-*")}
    assert len(reads) == 2  # both workers read, each told its keys first (asserted in reads)
    for pid in reads:
        read = (tmp_path / f"read-{pid}").read_text().split()
        told = (tmp_path / f"told-{pid}").read_text().split()
        assert told[: len(read)] == read  # in reading order, each once


_EVENTS: list[str] = []  # this process's: the hints it gave and the workers it started


class OrderedHintSource(FileHintedSource):
    """Also notes, in the training process, when it is told its first keys."""

    def prefetch_keys(self, keys) -> None:
        _EVENTS.append("hint")
        super().prefetch_keys(keys)


@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_the_training_process_tells_the_first_keys_before_its_workers_start(
    tmp_path, monkeypatch, api
):
    # A remote source downloads the files of the keys it is told in the background, and a cold
    # first epoch waits for those files, not for the workers: so the files come first.
    from grainlite.engine.parent import WorkerStream

    start = WorkerStream._start_workers

    def noted(stream: WorkerStream) -> None:
        _EVENTS.append("workers")
        start(stream)

    monkeypatch.setattr(WorkerStream, "_start_workers", noted)
    _EVENTS.clear()
    length = 256
    source = OrderedHintSource(length, str(tmp_path))
    if api == "loader":
        sampler = grain.IndexSampler(length, grain.NoSharding(), shuffle=True, seed=3, num_epochs=1)
        stream = iter(
            grain.DataLoader(
                data_source=source, sampler=sampler, operations=[grain.Batch(16)], worker_count=2
            )
        )
    else:
        dataset = grain.MapDataset.source(source).shuffle(seed=3).batch(16).to_iter_dataset()
        stream = iter(dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        assert len(next(stream)) == 16
    finally:
        stream.close()
    assert _EVENTS[:2] == ["hint", "workers"], _EVENTS


def test_a_pipeline_whose_nodes_cannot_say_their_keys_reads_without_hints():
    source = HintedSource(100)
    mixed = grain.MapDataset.mix([grain.MapDataset.source(source), grain.MapDataset.range(50)])
    assert KeyHints.for_dataset(mixed) is None
    source.told.update(range(100))  # no hint comes: let HintedSource's check pass
    assert len(list(mixed.to_iter_dataset())) == len(mixed)


def test_a_local_array_record_source_takes_no_hints(tmp_path):
    path = str(tmp_path / "local.array_record")
    writer = array_record_module.ArrayRecordWriter(path, "group_size:1")
    for i in range(10):
        writer.write(b"%d" % i)
    writer.close()
    source = grain.ArrayRecordDataSource(path)
    assert not source.takes_key_hints
    assert READ_POLICY.prefetcher(source) is None
    assert KeyHints.for_dataset(grain.MapDataset.source(source).shuffle(seed=1)) is None
