"""The host cache's checks and its eviction order, on a real S3 server (SeaweedFS on 127.0.0.1)
with real worker processes: a block is read whole to check it once per run (the processes of the
run, its workers, trust the check of the process that downloaded it), again once it changed on
disk or in a new run; eviction takes the least recently read block first."""

from __future__ import annotations

import collections
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

import grainlite as grain
from grainlite.sources.remote.cache_blocks import Blob
from grainlite.sources.remote.objects import object_info
from grainlite_tests.support.remote_files import RECORDS, record, write_and_upload
from grainlite_tests.support.seaweed import S3Server

pytest.importorskip("obstore")

FILES = 3


@pytest.fixture(scope="module")
def data(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory):
    """Three ArrayRecord files uploaded under ``checks/``: (the size of each, the server)."""
    keys = [f"checks/part-{file}.array_record" for file in range(FILES)]
    paths = write_and_upload(s3_server, tmp_path_factory.mktemp("checks"), keys)
    sizes = {os.path.getsize(path) for path in paths}
    assert len(sizes) == 1  # records differ by index only
    return sizes.pop(), s3_server


def _source(data, cache: Path):
    server = data[1]
    return grain.ArrayRecordDataSource(
        server.url("checks/part-*.array_record"),
        storage_options=server.storage_options(),
        cache_dir=cache,
    )


def _everything() -> collections.Counter:
    return collections.Counter(record(f, i) for f in range(FILES) for i in range(RECORDS))


def _read_by_workers(source, workers: int) -> collections.Counter:
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(
            len(source), grain.NoSharding(), shuffle=True, num_epochs=1, seed=3
        ),
        operations=[grain.Batch(10)],
        worker_count=workers,
    )
    return collections.Counter(bytes(row) for batch in loader for row in batch)


def _check_records(cache: Path) -> dict[str, tuple[int, str]]:
    """Each check record of the cache: its modification time and its text."""
    return {path.name: (path.stat().st_mtime_ns, path.read_text()) for path in cache.glob("*.ok")}


def _damage(block: Path) -> None:
    with open(block, "r+b") as file:
        file.seek(os.path.getsize(block) // 2)
        file.write(b"\xff" * 16)


def test_the_workers_of_a_run_trust_the_check_of_the_process_that_downloaded_each_block(
    data, tmp_path
):
    cache = tmp_path / "cache"
    source = _source(data, cache)
    assert [source[f * RECORDS] for f in range(FILES)] == [record(f, 0) for f in range(FILES)]
    checks = _check_records(cache)
    assert len(checks) == FILES and len(list(cache.glob("*.blk"))) == FILES
    time.sleep(0.05)  # a check written again now would show a later time
    assert _read_by_workers(source, 2) == _everything()
    assert _check_records(cache) == checks  # no worker read a block whole to check it


def test_a_new_run_checks_each_block_again(data, tmp_path):
    cache = tmp_path / "cache"
    source = _source(data, cache)
    firsts = [record(f, 0).decode() for f in range(FILES)]
    assert [source[f * RECORDS].decode() for f in range(FILES)] == firsts
    checks = _check_records(cache)
    assert len(checks) == FILES
    server = data[1]
    code = (
        "import grainlite as grain; "
        f"s = grain.ArrayRecordDataSource({server.url('checks/part-*.array_record')!r}, "
        f"storage_options={server.storage_options()!r}, cache_dir={str(cache)!r}); "
        f"print(*[s[f * {RECORDS}].decode() for f in range({FILES})])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == firsts
    again = _check_records(cache)
    assert again.keys() == checks.keys()
    for name, (_, text) in again.items():  # each recorded by the new run, for the same block
        assert text.split()[0] != checks[name][1].split()[0]
        assert text.split()[1:] == checks[name][1].split()[1:]


def test_a_source_kept_past_its_run_checks_each_block_again(data, tmp_path):
    cache, kept = tmp_path / "cache", tmp_path / "source.pickle"
    server = data[1]
    code = (
        "import pickle, grainlite as grain; "
        f"s = grain.ArrayRecordDataSource({server.url('checks/part-*.array_record')!r}, "
        f"storage_options={server.storage_options()!r}, cache_dir={str(cache)!r}); "
        f"[s[f * {RECORDS}] for f in range({FILES})]; "
        f"open({str(kept)!r}, 'wb').write(pickle.dumps(s))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)  # its run ends with it
    checks = _check_records(cache)
    assert len(checks) == FILES
    time.sleep(0.05)  # a check written again now would show a later time
    source = pickle.loads(kept.read_bytes())
    assert [source[f * RECORDS] for f in range(FILES)] == [record(f, 0) for f in range(FILES)]
    source.close()
    again = _check_records(cache)
    assert all(again[name][0] > checks[name][0] for name in checks)  # each block read again


def test_a_block_changed_after_its_check_is_checked_again_within_the_run(data, tmp_path):
    cache = tmp_path / "cache"
    source = _source(data, cache)
    assert [source[f * RECORDS] for f in range(FILES)] == [record(f, 0) for f in range(FILES)]
    source.close()  # lets the blocks go, so that a damaged one can be removed
    for block in cache.glob("*.blk"):
        _damage(block)
    # The workers of the same run: the recorded checks no longer match the blocks.
    assert _read_by_workers(source, 1) == _everything()
    source.close()
    for block in cache.glob("*.blk"):
        _damage(block)
    # The process that checked them itself.
    assert collections.Counter(source[k] for k in range(len(source))) == _everything()
    source.close()


def test_eviction_takes_the_least_recently_read_block_first(data, tmp_path):
    size, server = data
    cache = tmp_path / "cache"
    urls = [server.url(f"checks/part-{file}.array_record") for file in range(FILES)]
    infos = [object_info(url, server.storage_options()) for url in urls]
    names = {
        Blob(url, info.size, info.etag).key: f for f, (url, info) in enumerate(zip(urls, infos))
    }

    def cached() -> set[int]:
        return {names[path.name.split(".")[0]] for path in cache.glob("*.blk")}

    def read(file: int) -> None:  # a source of this file alone: none other is fetched ahead
        source = grain.ArrayRecordDataSource(
            urls[file],
            storage_options=server.storage_options(),
            cache_dir=cache,
            cache_limit_bytes=2 * size + 100,
        )
        assert source[5] == record(file, 5)
        source.close()

    read(0)
    read(1)
    assert cached() == {0, 1}
    long_ago = time.time() - 100
    for key, file in names.items():  # file 0 used long before file 1
        if file == 2:
            continue
        for path in [cache / f"{key}.blk", cache / f"{key}.lock"]:
            os.utime(path, (long_ago + 10 * file,) * 2)
    read(0)  # now the more recently used
    time.sleep(0.05)  # later by more than the clock's step
    read(2)  # room for file 2: file 1 goes
    assert cached() == {0, 2}
    evicted = next(key for key, file in names.items() if file == 1)
    assert (cache / f"{evicted}.sum").exists()  # the object's checksum outlives its block
    assert not (cache / f"{evicted}.ok").exists()


_LISTED: list[str] | None = None  # while a test collects them: the folders listed
_HOOKED = False


def _note_listings(event: str, args: tuple) -> None:
    if _LISTED is not None and event in ("os.scandir", "os.listdir"):
        _LISTED.append(os.fspath(args[0]) if args and args[0] is not None else ".")


def test_a_cached_block_is_found_without_listing_the_cache_folder(data, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    for n in range(2000):  # other objects' leftovers: a listing would have to read them all
        (cache / f"{n:040x}.lock").touch()
    source = _source(data, cache)
    assert [source[f * RECORDS] for f in range(FILES)] == [record(f, 0) for f in range(FILES)]
    source.close()

    def read_again() -> None:
        again = _source(data, cache)
        assert [again[f * RECORDS + 7] for f in range(FILES)] == [
            record(f, 7) for f in range(FILES)
        ]
        assert all(again.__getitems__([f * RECORDS + 9]) == [record(f, 9)] for f in range(FILES))
        again.close()

    assert _listings_of(cache, read_again) == []


def _listings_of(folder: Path, work) -> list[str]:
    """The listings of ``folder`` (``os.scandir``, ``os.listdir``) while ``work()`` runs."""
    global _LISTED, _HOOKED
    if not _HOOKED:  # an audit hook lasts for the process: it notes only while _LISTED is set
        sys.addaudithook(_note_listings)
        _HOOKED = True
    _LISTED = []
    try:
        work()
        listed = _LISTED
    finally:
        _LISTED = None
    return [path for path in listed if Path(path).resolve() == folder.resolve()]


def test_a_download_with_room_to_spare_lists_nothing_after_the_process_s_first(data, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    server = data[1]
    urls = [server.url(f"checks/part-{file}.array_record") for file in range(FILES)]
    sources = [
        grain.ArrayRecordDataSource(url, storage_options=server.storage_options(), cache_dir=cache)
        for url in urls
    ]
    first = _listings_of(cache, lambda: sources[0][0])
    assert first  # the folder counted once: the ledger is new
    later = _listings_of(cache, lambda: [source[1] for source in sources[1:]])
    assert later == []
    assert len(list(cache.glob("*.blk"))) == FILES
    ledger = int((cache / ".space.lock").read_text())
    assert ledger == sum(path.stat().st_size for path in cache.glob("*.blk"))
    for source in sources:
        source.close()


def test_a_hint_of_cached_files_starts_no_download_thread(data, tmp_path):
    cache = tmp_path / "cache"
    source = _source(data, cache)
    assert [source[f * RECORDS] for f in range(FILES)] == [record(f, 0) for f in range(FILES)]
    source.close()
    server = data[1]
    code = (  # a fresh process: no download thread of an earlier test lingers in it
        "import threading, grainlite as grain; "
        f"s = grain.ArrayRecordDataSource({server.url('checks/part-*.array_record')!r}, "
        f"storage_options={server.storage_options()!r}, cache_dir={str(cache)!r}); "
        "s.prefetch_keys(list(range(len(s)))); "
        "print(sorted(t.name for t in threading.enumerate() if t.name.startswith('grainlite')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("ledger", ["999999999999\n", "damaged"])
def test_a_ledger_that_counts_too_much_or_is_damaged_is_counted_again_before_evicting(
    data, tmp_path, ledger
):
    size, server = data
    cache = tmp_path / "cache"
    urls = [server.url(f"checks/part-{file}.array_record") for file in range(FILES)]

    def read(file: int) -> None:
        source = grain.ArrayRecordDataSource(
            urls[file],
            storage_options=server.storage_options(),
            cache_dir=cache,
            cache_limit_bytes=FILES * size + 100,
        )
        assert source[5] == record(file, 5)
        source.close()

    read(0)
    read(1)
    (cache / ".space.lock").write_text(ledger)  # a block removed by hand, a torn write
    read(2)  # room for all three: nothing evicted
    assert len(list(cache.glob("*.blk"))) == FILES
    assert int((cache / ".space.lock").read_text()) == FILES * size


def test_a_block_whose_checksum_file_is_lost_or_damaged_is_fetched_again(data, tmp_path):
    cache = tmp_path / "cache"
    source = _source(data, cache)
    assert [source[f * RECORDS] for f in range(FILES)] == [record(f, 0) for f in range(FILES)]
    source.close()
    sums = sorted(cache.glob("*.sum"))
    assert len(sums) == FILES
    written = {path.name: path.stat().st_mtime_ns for path in cache.glob("*.blk")}
    time.sleep(0.05)  # a block written again now would show a later time
    sums[0].unlink()
    sums[1].write_text("not a checksum\n")
    # A new run: it checks each block against its checksum file.
    server = data[1]
    code = (
        "import collections, grainlite as grain; "
        f"s = grain.ArrayRecordDataSource({server.url('checks/part-*.array_record')!r}, "
        f"storage_options={server.storage_options()!r}, cache_dir={str(cache)!r}); "
        "print(sorted(collections.Counter(s[k] for k in range(len(s))).items()) == "
        f"sorted({dict(_everything())!r}.items()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True"]
    now = {path.name: path.stat().st_mtime_ns for path in cache.glob("*.blk")}
    assert now.keys() == written.keys()
    fetched = {name for name in now if now[name] != written[name]}
    assert fetched == {path.name.replace(".sum", ".blk") for path in sums[:2]}
    assert sorted(cache.glob("*.sum")) == sums  # written anew with the blocks
    assert all(len(path.read_text()) == 9 for path in sums)


def test_the_default_limit_is_three_quarters_of_the_folder_s_free_space(tmp_path):
    import shutil

    from grainlite.sources.remote.cache import ShardCache

    limit = ShardCache(tmp_path).limit
    assert abs(limit - shutil.disk_usage(tmp_path).free * 3 // 4) < 64 << 20  # others write too
