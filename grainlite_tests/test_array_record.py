"""ArrayRecordDataSource on real ArrayRecord files: reads, errors, repr, processes, threads."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import multiprocessing
import os
import pathlib
import pickle
import signal
import threading

import cloudpickle
import numpy as np
import pytest
from array_record.python import array_record_data_source, array_record_module

from grainlite.errors import CorruptedDataError, GrainliteTypeError, GrainliteValueError
from grainlite.sources.array_record import ArrayRecordDataSource

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module", autouse=True)
def spawn_helper_process_started_before_leak_checks():
    """Starts multiprocessing's resource tracker (a spawn starts it once and keeps it to exit)
    before the per-test leak check snapshots child processes."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


def write(path: pathlib.Path, records: list[bytes], options: str = "group_size:1") -> str:
    """Writes ``records`` to a new ArrayRecord file and returns its path."""
    writer = array_record_module.ArrayRecordWriter(str(path), options)
    for record in records:
        writer.write(record)
    writer.close()
    return str(path)


def records_of(file: int, count: int) -> list[bytes]:
    return [f"file{file}-record{i}".encode() for i in range(count)]


@pytest.fixture
def shards(tmp_path):
    """Four files of 5, 0, 7 and 3 records; together keys 0..14."""
    counts = [5, 0, 7, 3]
    paths = [
        write(tmp_path / f"data-{i}.array_record", records_of(i, n)) for i, n in enumerate(counts)
    ]
    expected = [record for i, n in enumerate(counts) for record in records_of(i, n)]
    return paths, expected


def test_keys_run_through_the_files_in_order(shards):
    paths, expected = shards
    with ArrayRecordDataSource(paths) as source:
        assert len(source) == 15
        assert [source[k] for k in range(len(source))] == expected
        assert source[np.int64(14)] == b"file3-record2"
        assert source.paths == paths


def test_one_path_alone_is_accepted_as_str_or_pathlib(tmp_path):
    path = write(tmp_path / "one.array_record", [b"a", b"b"])
    for given in [path, pathlib.Path(path)]:
        with ArrayRecordDataSource(given) as source:
            assert [source[0], source[1]] == [b"a", b"b"]
            assert source.paths == [path]


@pytest.mark.parametrize(
    "make_paths",
    [
        lambda paths: paths[0],
        lambda paths: paths,
        lambda paths: [pathlib.Path(p) for p in paths],
        lambda paths: [f"{paths[0]}[1:4]", paths[2]],
    ],
    ids=["one path", "a list", "pathlib paths", "a slice and a file"],
)
def test_repr_and_records_equal_array_records_own_data_source(shards, make_paths):
    paths, _ = shards
    ours = ArrayRecordDataSource(make_paths(paths))
    theirs = array_record_data_source.ArrayRecordDataSource(make_paths(paths))
    assert repr(ours) == repr(theirs)
    assert repr(ours).startswith("ArrayRecordDataSource(hash_of_paths=")
    assert len(ours) == len(theirs)
    assert [ours[k] for k in range(len(ours))] == [theirs[k] for k in range(len(theirs))]
    ours.close()
    theirs.__exit__(None, None, None)


@dataclasses.dataclass
class FileInstruction:
    """What TFDS passes: part of one file."""

    filename: str
    skip: int
    take: int
    examples_in_shard: int


def test_file_instructions_select_part_of_a_file(shards):
    paths, _ = shards
    instructions = [FileInstruction(paths[2], 2, 3, 7), FileInstruction(paths[0], 0, 1, 5)]
    source = ArrayRecordDataSource(instructions)
    theirs = array_record_data_source.ArrayRecordDataSource(instructions)
    assert [source[k] for k in range(len(source))] == [
        b"file2-record2",
        b"file2-record3",
        b"file2-record4",
        b"file0-record0",
    ]
    assert repr(source) == repr(theirs)


def test_batched_reads_equal_single_reads_in_any_order(shards):
    paths, expected = shards
    source = ArrayRecordDataSource(paths)
    rng = np.random.default_rng(7)
    batches = [rng.integers(0, 15, size).tolist() for size in [1, 2, 5, 16, 40]]
    batches += [list(range(15)), list(range(3, 12)), [6, 7, 8, 2, 3], []]
    for keys in batches:
        assert source.__getitems__(keys) == [expected[k] for k in keys], keys
    assert source.__getitems__(np.arange(15, dtype=np.uint16)) == expected


def test_batched_reads_of_a_large_file_use_runs_and_index_lists_alike(tmp_path):
    records = [i.to_bytes(4, "little") for i in range(3000)]
    source = ArrayRecordDataSource(write(tmp_path / "large.array_record", records))
    shuffled = np.random.default_rng(1).permutation(3000)
    for keys in [shuffled[:5], shuffled[:100], np.arange(1000, 1300), shuffled]:
        assert source.__getitems__(keys.tolist()) == [records[k] for k in keys.tolist()]


# A shuffled block of a large file: no two keys adjacent, few enough for one range read per key.
_SCATTERED = [2999, 17, 500, 1234, 8, 2000, 40, 777]


def test_a_shuffled_block_of_a_large_file_reads_each_key_alone(tmp_path):
    records = [np.random.default_rng(i).bytes(100) for i in range(3000)]
    source = ArrayRecordDataSource(write(tmp_path / "large.array_record", records))
    assert source.__getitems__(_SCATTERED) == [records[k] for k in _SCATTERED]


def test_a_damaged_record_in_a_shuffled_block_is_named_by_its_key(tmp_path):
    records = [np.random.default_rng(i).bytes(100) for i in range(3000)]  # incompressible
    path = pathlib.Path(write(tmp_path / "large.array_record", records))
    data = bytearray(path.read_bytes())
    at = data.find(records[500])  # stored as written: flip bytes inside record 500 only
    assert at > 0
    data[at : at + 50] = bytes(b ^ 0xFF for b in data[at : at + 50])
    path.write_bytes(bytes(data))
    source = ArrayRecordDataSource(str(path))
    assert source.__getitems__([17, 2999]) == [records[17], records[2999]]
    with pytest.raises(CorruptedDataError) as raised:
        source.__getitems__(_SCATTERED)
    assert f"Could not read record 500 of the data source (record 500 of file {str(path)!r})" in (
        str(raised.value)
    )


@pytest.mark.parametrize("key", [-1, 15, 2**70], ids=["minus one", "length", "huge"])
def test_a_key_outside_the_source_is_an_index_error_and_a_value_error(shards, key):
    source = ArrayRecordDataSource(shards[0])
    message = (
        f"Index {key} out of range for 15: ArrayRecordDataSource keys must be in [0, 15); read "
        f"a key in that range, e.g. key % len(source) (here {key % 15}), which is how the "
        "DataLoader wraps sampler keys."
    )
    for read in [lambda: source[key], lambda: source.__getitems__([0, key])]:
        with pytest.raises(IndexError) as error:
            read()
        assert isinstance(error.value, ValueError)
        assert str(error.value) == message


def test_a_non_integer_key_is_a_type_error(shards):
    with pytest.raises(GrainliteTypeError) as error:
        ArrayRecordDataSource(shards[0])[1.0]
    assert str(error.value) == (
        "ArrayRecordDataSource keys must be ints (got float 1.0); pass an int or a numpy integer."
    )


def test_a_missing_file_is_named_when_the_source_is_built(shards, tmp_path):
    missing = str(tmp_path / "missing.array_record")
    with pytest.raises(FileNotFoundError) as error:
        ArrayRecordDataSource([shards[0][0], missing])
    assert str(error.value) == (
        f"[Errno 2] ArrayRecordDataSource found no file at {missing!r}: check the path, and "
        f"expand globs first with sorted(glob.glob(pattern))"
    )


def test_an_empty_list_of_paths_is_a_value_error():
    with pytest.raises(GrainliteValueError) as error:
        ArrayRecordDataSource([])
    assert str(error.value) == (
        "ArrayRecordDataSource paths must not be empty (got []); pass one ArrayRecord file or a "
        "list of them, e.g. sorted(glob.glob('data-*.array_record'))."
    )


@pytest.mark.parametrize(
    "paths, described",
    [(5, "int 5"), (["ok.array_record", 3], "int 3 at position 1"), (b"x", "bytes b'x'")],
    ids=["an int", "an int in a list", "bytes"],
)
def test_paths_of_the_wrong_kind_are_a_value_error(paths, described):
    with pytest.raises(GrainliteValueError) as error:
        ArrayRecordDataSource(paths)
    assert str(error.value) == (
        f"ArrayRecordDataSource paths must be str or os.PathLike paths or FileInstructions (got "
        f"{described}); pass a path such as 'data.array_record' or a list of them."
    )


def test_a_file_that_is_not_array_record_is_refused(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not an array record file")
    with pytest.raises(GrainliteValueError) as error:
        ArrayRecordDataSource(str(junk))
    assert str(error.value) == (
        f"Could not open {str(junk)!r} as an ArrayRecord file (ArrayRecord file should be at "
        f"least 64KB big); pass files written by array_record's ArrayRecordWriter, e.g. "
        f"ArrayRecordWriter(path, 'group_size:1')."
    )


def test_a_slice_past_the_end_of_its_file_is_refused(shards):
    path = shards[0][0]
    with pytest.raises(GrainliteValueError) as error:
        ArrayRecordDataSource(f"{path}[2:9]")
    assert str(error.value) == (
        f"ArrayRecordDataSource slice [2:9] of {path!r} runs past its 5 records; pass bounds "
        f"with 0 <= start <= end <= 5."
    )


def test_reader_options_override_the_defaults(shards):
    source = ArrayRecordDataSource(shards[0], reader_options={"readahead_buffer_size": "16M"})
    assert source.__getitems__(list(range(15))) == shards[1]


def test_unknown_reader_options_are_refused_with_array_records_list(shards):
    with pytest.raises(GrainliteValueError) as error:
        ArrayRecordDataSource(shards[0], reader_options={"bogus": "1"})
    assert str(error.value) == (
        "array_record refused the reader options 'readahead_buffer_size:0,bogus:1' (Unknown "
        "option bogus, valid options: max_parallelism, readahead_buffer_size, "
        "index_storage_option, footer_prefetch_bytes); pass reader_options with names it lists."
    )


def test_reader_options_must_be_a_dict(shards):
    with pytest.raises(GrainliteTypeError) as error:
        ArrayRecordDataSource(shards[0], reader_options="readahead_buffer_size:0")
    assert str(error.value) == (
        "ArrayRecordDataSource reader_options must be a dict of option names to values (got str "
        "'readahead_buffer_size:0'); pass e.g. {'readahead_buffer_size': '0'}."
    )


def test_a_file_written_with_large_groups_warns_how_to_rewrite_it(tmp_path):
    path = write(tmp_path / "grouped.array_record", [b"a", b"b"], options="group_size:4")
    with pytest.warns(UserWarning) as caught:
        source = ArrayRecordDataSource(path)
    assert str(caught[0].message) == (
        f"{path!r} was written with group_size:4, so every random read decodes a group of 4 "
        f"records; rewrite it with ArrayRecordWriter(path, 'group_size:1') for fast random access."
    )
    assert source[1] == b"b"


def open_descriptors() -> int:
    gc.collect()  # readers an earlier test dropped close now, not in the middle of a count
    return len(os.listdir("/proc/self/fd"))


def test_close_releases_the_readers_and_a_later_read_reopens_them(shards):
    paths, expected = shards
    before = open_descriptors()
    source = ArrayRecordDataSource(paths)
    assert open_descriptors() == before  # Counting the records does not keep files open.
    assert source.__getitems__(list(range(15))) == expected
    assert open_descriptors() > before
    source.close()
    source.close()
    assert open_descriptors() == before
    assert source[0] == expected[0]
    source.close()


def test_a_loader_with_workers_leaves_no_reader_open_in_the_training_process(shards):
    # Only the workers read: the training process closes the readers it opened (here by reading
    # a record first) once the pipeline is sent, and keeps no index in memory.
    import grainlite as grain

    paths, expected = shards
    source = ArrayRecordDataSource(paths)
    assert source[0] == expected[0]
    assert [path for path in open_paths() if path.endswith(".array_record")]
    sampler = grain.IndexSampler(len(source), grain.NoSharding(), shuffle=False, num_epochs=1)
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=2)
    with iter(loader) as iterator:
        assert next(iterator) == expected[0]
        assert not [path for path in open_paths() if path.endswith(".array_record")]
        assert [next(iterator) for _ in range(len(expected) - 1)] == expected[1:]


def open_paths() -> list[str]:
    """What this process's descriptors point at."""
    paths = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor, closed
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
    return paths


@pytest.mark.parametrize("module", [pickle, cloudpickle], ids=["pickle", "cloudpickle"])
def test_pickling_an_open_source_sends_no_readers(shards, module):
    paths, expected = shards
    source = ArrayRecordDataSource(paths)
    assert source[3] == expected[3]  # Readers are open now.
    assert "_state" not in source.__getstate__()
    copy = module.loads(module.dumps(source))
    assert repr(copy) == repr(source)
    assert [copy[k] for k in range(15)] == expected
    copy.close()
    source.close()


def test_reader_threads_can_share_one_source(tmp_path):
    records = [i.to_bytes(8, "little") for i in range(2000)]
    source = ArrayRecordDataSource(write(tmp_path / "shared.array_record", records))
    failures: list[int] = []

    def hammer(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(40):
            keys = rng.integers(0, 2000, 16).tolist()
            if source.__getitems__(keys) != [records[k] for k in keys]:
                failures.append(seed)
            if source[keys[0]] != records[keys[0]]:
                failures.append(seed)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def _read_everything(source, conn):
    """Runs in a child process: reads every key singly and batched, and reports them."""
    conn.send(
        (
            [source[k] for k in range(len(source))],
            source.__getitems__(list(range(len(source)))),
            source._state.pid == os.getpid(),
        )
    )
    conn.close()


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_a_child_process_reads_a_source_the_parent_already_read(shards, method):
    paths, expected = shards
    source = ArrayRecordDataSource(paths)
    assert source.__getitems__(list(range(15))) == expected  # The parent's readers are open.
    context = multiprocessing.get_context(method)
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_read_everything, args=(source, sender))
    child.start()
    sender.close()
    try:
        assert receiver.poll(20), "the child sent nothing within 20 s"
        singles, batch, own_readers = receiver.recv()
        child.join(10)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
            child.join()
        receiver.close()
    assert singles == batch == expected
    assert own_readers
    assert source[14] == expected[14]  # The parent's own readers still work.
    source.close()
