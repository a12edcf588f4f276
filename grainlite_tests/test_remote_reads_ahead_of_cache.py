"""Reads of remote ArrayRecord files before their blocks are cached (PartialCopy): the same records
as the local files, fetching only their chunks; the switch to the cached block; threads at once;
the files and layouts that wait for the block instead. A real S3 server (SeaweedFS on 127.0.0.1)
behind the fault proxy; a block's download is held back by holding its download lock, as another
process of the host downloading it would."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import grainlite as grain
from grainlite_tests.support.fault_proxy import FaultProxy
from grainlite_tests.support.seaweed import S3Server

pytest.importorskip("obstore")

from grainlite.sources.remote import files, partial

FILES = 2
RECORDS = 400  # per file, ~10 KB each: files of ~4 MB, many times their head and tail


def _record(file: int, index: int) -> bytes:
    rng = np.random.default_rng(1000 * file + index)
    return (
        f"{file}:{index}:".encode()
        + rng.integers(1, 256, 8000 + 37 * (index % 50)).astype(np.uint8).tobytes()
    )


@pytest.fixture(scope="module")
def big(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory):
    """Two ~4 MB ArrayRecord files (group_size:1), local and uploaded: (paths, URLs, server)."""
    from array_record.python.array_record_module import ArrayRecordWriter

    folder = tmp_path_factory.mktemp("big")
    paths = []
    for file in range(FILES):
        path = folder / f"big-{file}.array_record"
        writer = ArrayRecordWriter(str(path), "group_size:1")
        for index in range(RECORDS):
            writer.write(_record(file, index))
        writer.close()
        s3_server.put_file(path, f"big/big-{file}.array_record")
        paths.append(str(path))
    urls = [s3_server.url(f"big/big-{file}.array_record") for file in range(FILES)]
    return paths, urls, s3_server


@contextlib.contextmanager
def _downloads_held(urls: list[str], server: S3Server, cache: Path) -> Iterator[None]:
    """Holds the download lock of every file's block, as a process downloading it would: the
    source's reads cannot find the blocks, nor download them, until the block ends."""
    cache.mkdir(parents=True, exist_ok=True)
    held = []
    for url in urls:
        blob = files.blob_of(url, server.storage_options())
        fd = os.open(cache / f"{blob.key}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)


def _partial_copies_open() -> int:
    """The PartialCopy memory files this process holds open (its own descriptor and its
    reader's are one file)."""
    files = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if "grainlite-partial" in os.readlink(f"/proc/self/fd/{name}"):
                files.add(os.stat(f"/proc/self/fd/{name}").st_ino)
    return len(files)


def _keys(count: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).permutation(FILES * RECORDS)[:count].tolist()


pytestmark = pytest.mark.skipif(not partial.AVAILABLE, reason="needs memfd_create (Linux)")


def test_reads_before_the_blocks_are_cached_fetch_only_their_records(big, tmp_path):
    paths, urls, server = big
    cache = tmp_path / "cache"
    local = grain.ArrayRecordDataSource(paths)
    total = sum(os.path.getsize(path) for path in paths)
    with FaultProxy((server.host, server.port)) as proxy, _downloads_held(urls, server, cache):
        source = grain.ArrayRecordDataSource(
            urls, storage_options=server.storage_options(proxy.endpoint_url), cache_dir=cache
        )
        built = proxy.counts()["bytes_down"]  # the listing, and each file's head and tail
        keys = _keys(40)
        assert source.__getitems__(keys) == local.__getitems__(keys)
        assert [source[key] for key in keys[:5]] == [local[key] for key in keys[:5]]
        fetched = proxy.counts()["bytes_down"] - built
        assert not list(cache.glob("*.blk"))  # nothing came from a cached block
        assert _partial_copies_open() == FILES
    # 40 records of ~10 KB, each file's head and tail again: far less than the files.
    assert fetched < total / 4, (fetched, total)
    source.close()
    assert _partial_copies_open() == 0


def test_reads_move_to_the_cached_block_once_it_is_there(big, tmp_path):
    paths, urls, server = big
    cache = tmp_path / "cache"
    local = grain.ArrayRecordDataSource(paths)
    source = grain.ArrayRecordDataSource(
        urls, storage_options=server.storage_options(), cache_dir=cache
    )
    with _downloads_held(urls, server, cache):
        keys = _keys(20, seed=1)
        assert source.__getitems__(keys) == local.__getitems__(keys)
        assert _partial_copies_open() == FILES
    every = list(range(len(local)))
    for _ in range(200):  # the blocks download in the background; reads go on meanwhile
        assert source.__getitems__(every) == local.__getitems__(every)
        if len(list(cache.glob("*.blk"))) == FILES and _partial_copies_open() == 0:
            break
        threading.Event().wait(0.05)
    assert len(list(cache.glob("*.blk"))) == FILES
    assert _partial_copies_open() == 0  # each copy freed once its block's reader opened
    source.close()


def test_threads_reading_the_same_chunks_at_once_get_the_right_records(big, tmp_path):
    paths, urls, server = big
    local = grain.ArrayRecordDataSource(paths)
    for attempt in range(5):
        cache = tmp_path / f"cache-{attempt}"
        with _downloads_held(urls, server, cache):
            source = grain.ArrayRecordDataSource(
                urls, storage_options=server.storage_options(), cache_dir=cache
            )
            keys = _keys(60, seed=attempt)
            wrong: list[object] = []

            def read(offset: int, source=source, keys=keys, wrong=wrong) -> None:
                mine = keys[offset:] + keys[:offset]  # every thread wants every chunk
                try:
                    if source.__getitems__(mine) != local.__getitems__(mine):
                        wrong.append(offset)
                except Exception as error:  # reported below, with the thread's offset
                    wrong.append(error)

            threads = [threading.Thread(target=read, args=(7 * i,)) for i in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert not any(thread.is_alive() for thread in threads)
            assert wrong == []
            source.close()


def test_the_data_loader_gives_the_local_order_while_blocks_arrive_at_two_workers(big, tmp_path):
    paths, urls, server = big
    cache = tmp_path / "cache"

    def loader(source):
        return grain.DataLoader(
            data_source=source,
            sampler=grain.IndexSampler(
                len(source), grain.NoSharding(), shuffle=True, num_epochs=1, seed=3
            ),
            operations=[grain.Batch(16)],
            worker_count=2,
        )

    expected = [row for batch in loader(grain.ArrayRecordDataSource(paths)) for row in batch]
    source = grain.ArrayRecordDataSource(
        urls, storage_options=server.storage_options(), cache_dir=cache
    )
    rows = []
    with _downloads_held(urls, server, cache):  # the first batches are read ahead of the cache
        iterator = iter(loader(source))
        for _ in range(4):
            rows += list(next(iterator))
    rows += [row for batch in iterator for row in batch]
    assert rows == expected


def test_a_file_whose_index_passes_the_first_tail_counts_every_record(big, tmp_path, monkeypatch):
    _, urls, server = big
    monkeypatch.setattr(files, "_FIRST_TAIL", 16 << 10)  # far shorter than the files' index
    source = grain.ArrayRecordDataSource(
        urls, storage_options=server.storage_options(), cache_dir=tmp_path
    )
    assert len(source) == FILES * RECORDS
    assert source[RECORDS + 3] == _record(1, 3)


@pytest.mark.parametrize(
    ("size", "records", "written_with", "tail", "span"),
    [
        (4_000_000, 400, "group_size:1", 262_144, 24_096),  # twice the mean record, and slack
        (4_000_000, 400_000, "group_size:1", 262_144, 16_384),  # tiny records: the smallest span
        (1_000_000, 400, "group_size:1", 262_144, 0),  # a small file: fetched whole first
        (40_000_000, 400_000, "", 262_144, 0),  # default groups of 65536: chunks of MBs
        (20_000_000, 8_000, "group_size:64", 262_144, 324_096),  # 125 chunks of 160 KB
    ],
    ids=["records", "tiny-records", "small-file", "large-groups", "groups-of-64"],
)
def test_which_files_are_read_ahead_of_the_cache(size, records, written_with, tail, span):
    assert partial.first_span(size, records, written_with, tail) == span
