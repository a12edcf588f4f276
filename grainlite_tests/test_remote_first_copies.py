"""The first worker's first records of a cold remote source come from first copies fetched by
range (grainlite.sources.remote.first_copies), so the first batch does not wait for every whole
file: on a real S3 server (SeaweedFS on 127.0.0.1) behind the fault proxy's bandwidth cap, real
worker processes, real memfds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import grainlite as grain
from grainlite_tests.support.fault_proxy import FaultProxy, Faults
from grainlite_tests.support.seaweed import S3Server

pytest.importorskip("obstore")

FILES = 4
RECORDS = 800  # per file
RECORD_BYTES = 12 << 10  # one record per chunk (group_size:1), under a copy's first fetch
BATCH = 64  # the first worker's first 64 records are copied: records of every file


def _record(file: int, index: int) -> bytes:
    head = f"{file}:{index}:".encode()
    return head + bytes([1 + (file * 7 + index) % 250]) * (RECORD_BYTES - len(head))


@pytest.fixture(scope="module")
def data(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory):
    """Four 9.6 MB ArrayRecord files, local and uploaded: (local paths, glob URL, server)."""
    from array_record.python.array_record_module import ArrayRecordWriter

    folder = tmp_path_factory.mktemp("first-copies")
    paths = []
    for file in range(FILES):
        path = folder / f"part-{file}.array_record"
        writer = ArrayRecordWriter(str(path), "group_size:1,uncompressed")
        for index in range(RECORDS):
            writer.write(_record(file, index))
        writer.close()
        s3_server.put_file(path, f"first/part-{file}.array_record")
        paths.append(str(path))
    return paths, s3_server.url("first/part-*.array_record"), s3_server


def _loader(source, workers: int = 2) -> grain.DataLoader:
    return grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(
            len(source), grain.NoSharding(), shuffle=True, num_epochs=1, seed=11
        ),
        operations=[grain.Batch(BATCH)],
        worker_count=workers,
    )


def _dataset(source, workers: int = 2):
    return (
        grain.MapDataset.source(source)
        .shuffle(seed=11)
        .to_iter_dataset()
        .batch(BATCH)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    )


def _first_copy_fds(source) -> list[str]:
    """This process's first copies of ``source``'s files."""
    keys = {f"/memfd:grainlite-first-{file.blob.key} (deleted)" for file in source._files}
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target in keys:
            found.append(target)
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("api", ["data_loader", "dataset"])
def test_the_first_batch_comes_before_the_whole_files_with_the_local_elements(data, tmp_path, api):
    paths, url, server = data
    total = sum(Path(path).stat().st_size for path in paths)
    pipeline = _loader if api == "data_loader" else _dataset
    expected = list(pipeline(grain.ArrayRecordDataSource(paths)))
    # 40 Mbit/s: the whole files take about 8 s, the first worker's first 64 records under 1 s.
    proxy = FaultProxy((server.host, server.port), Faults(bandwidth_bps=40e6))
    try:
        source = grain.ArrayRecordDataSource(
            url, storage_options=server.storage_options(proxy.endpoint_url), cache_dir=tmp_path
        )
        with iter(pipeline(source)) as iterator:
            got = [next(iterator)]
            down_at_first = proxy.counts()["bytes_down"]
            blocks_at_first = list(tmp_path.glob("*.blk"))
            proxy.configure(bandwidth_bps=0.0)  # the rest at full speed
            assert len(set(_first_copy_fds(source))) == FILES  # made, kept while needed
            got += list(iterator)
    finally:
        proxy.close()
    # Whole files alone: every file's bytes before the first batch. With copies of the first
    # batch's reads: 6.7-8.4 MB of the 40 MB, measured with both CPUs kept busy by other
    # processes (15-17 MB when 256 records were copied whatever the batch).
    assert down_at_first < 0.4 * total, (down_at_first, total)
    assert len(blocks_at_first) < FILES
    assert len(got) == len(expected)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert sorted(bytes(row) for batch in got for row in batch) == sorted(
        _record(f, i) for f in range(FILES) for i in range(RECORDS)
    )
    # Once every block is cached, the training process lets its copies go.
    deadline = time.monotonic() + 15
    while _first_copy_fds(source) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _first_copy_fds(source) == []


def test_a_worker_opens_only_a_sealed_copy_of_the_same_object(tmp_path):
    """open_copy in another process: a memfd of another object, or one never sealed, is not
    read; the sealed copy of the object is."""
    import fcntl

    from grainlite.sources.remote import first_copies
    from grainlite.sources.remote.cache_blocks import Blob

    blob = Blob("s3://bucket/a.array_record", 100, "etag")
    other = Blob("s3://bucket/b.array_record", 100, "etag")
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    sealed = os.memfd_create(f"grainlite-first-{blob.key}", flags)
    unsealed = os.memfd_create(f"grainlite-first-{blob.key}", flags)
    foreign = os.memfd_create(f"grainlite-first-{other.key}", flags)
    try:
        fcntl.fcntl(sealed, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
        fcntl.fcntl(foreign, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
        shared = (os.getpid(), {0: sealed, 1: unsealed, 2: foreign})
        script = (
            "import sys\n"
            "from grainlite.sources.remote import first_copies as f\n"
            "from grainlite.sources.remote.cache_blocks import Blob\n"
            "f.WAIT_S = 0.3\n"
            f"blob = Blob({blob.url!r}, 100, 'etag')\n"
            f"shared = {shared!r}\n"
            "print([f.open_copy(shared, i, blob) is not None for i in (0, 1, 2, 3)])\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[True, False, False, False]"
        # In the process that made it, a copy is never opened again through /proc.
        assert first_copies.open_copy(shared, 0, blob) is None
    finally:
        for fd in (sealed, unsealed, foreign):
            os.close(fd)


@pytest.mark.parametrize("sequential", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_the_first_worker_indices_are_those_its_share_reads(sequential, batch_first):
    """first_worker_indices against the share slice_for_worker gives worker 0 (element by
    element, and in batch-aligned blocks under batch(drop_remainder=True))."""
    from grainlite.dataset.mp.first_reads import first_worker_indices
    from grainlite.dataset.mp.slicing import batch_block, slice_for_worker

    for workers in (1, 2, 3):
        root = grain.MapDataset.range(103).to_iter_dataset()
        if batch_first:
            root = root.batch(4, drop_remainder=True)
        block = batch_block(root)
        assert block == (4 if batch_first else 1)
        slice_for_worker(root, 0, workers, sequential)
        rows = [int(v) for element in root for v in np.asarray(element).reshape(-1)]
        count = 10
        assert first_worker_indices(103, workers, block, sequential, count).tolist() == rows[:count]


def _sealed_copy(key: str, timeout: float = 30.0) -> int:
    """This process's first copy of the block ``key``, once sealed."""
    import fcntl

    from grainlite.sources.remote import first_copies

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fd = first_copies._copies.get(key)
        if fd is not None and fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE:
            return fd
        time.sleep(0.01)
    raise AssertionError(f"no sealed copy of {key} within {timeout} s")


def test_a_copy_starts_from_the_head_and_tail_the_source_read_its_index_from(data, tmp_path):
    """The source keeps each remote file's edges from its index read; a copy started from them
    fetches only its records' chunks (one GET each here), one started without them fetches the
    edges first (two GETs more); both hold the records as the object does."""
    from grainlite.sources.array_record_files import open_reader
    from grainlite.sources.remote import first_copies

    _, url, server = data
    proxy = FaultProxy((server.host, server.port), Faults())
    done = [False]  # the copies are let go once the test says their blocks are "cached"
    try:
        storage = server.storage_options(proxy.endpoint_url)
        source = grain.ArrayRecordDataSource(url, storage_options=storage, cache_dir=tmp_path)
        assert sorted(source._edges) == list(range(FILES))
        positions = [100, 300, 500]  # chunks far apart: one GET each, none in the head
        requests = []
        for file, edges in ((0, source._edges[0]), (1, None)):
            blob = source._files[file].blob
            before = proxy.counts()["requests"]
            work = [(blob, positions, edges)]
            first_copies.start_copies(work, open_reader, storage, lambda blob: done[0])
            fd = _sealed_copy(blob.key)
            requests.append(proxy.counts()["requests"] - before)
            reader = open_reader(f"/proc/self/fd/{fd}", first_copies.COPY_OPTIONS)
            try:
                got = [bytes(reader.read(p, p + 1)[0]) for p in positions]
            finally:
                reader.close()
            assert got == [_record(file, p) for p in positions]
        assert requests == [len(positions), len(positions) + 2]
        # Reading begins: the source lets its edges go (they are never pickled either).
        assert source.__getstate__()["_edges"] == {}
        assert source._edges
        source[0]
        assert source._edges == {}
    finally:
        done[0] = True
        proxy.close()
    deadline = time.monotonic() + 15
    while _first_copy_fds(source) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _first_copy_fds(source) == []
