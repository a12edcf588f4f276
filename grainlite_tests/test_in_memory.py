"""InMemoryDataSource: exact round trips, errors, pickling by name, and the segment's lifetime."""

from __future__ import annotations

import gc
import math
import multiprocessing
import os
import pickle
import signal

import cloudpickle
import numpy as np
import pytest

from grainlite import shm
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sources.in_memory import InMemoryDataSource, SharedMemoryDataSource

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module", autouse=True)
def spawn_helper_process_started_before_leak_checks():
    """Starts multiprocessing's resource tracker, which a spawn starts once and keeps until exit.

    Started here, it is already running when the per-test leak check takes its snapshot, so it is
    not mistaken for a child process the test left behind. grainlite never registers its
    segments with it, so it removes nothing behind the owner's back.
    """
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


EVERY_KIND = [
    0,
    -(2**63),
    2**63 - 1,
    1.5,
    -0.0,
    float("inf"),
    True,
    False,
    "",
    "héllo wörld ✓",
    "lone surrogate \ud800",
    b"",
    b"ab\x00\x00",
    b"\x00" * 3,
    None,
]


def segments_of(*pids: int) -> set[str]:
    """The grainlite segments owned by ``pids`` (other jobs on this machine may have their own)."""
    return {name for name in shm.list_segments() if shm.owner_pid(name) in pids}


def own_segments() -> set[str]:
    return segments_of(os.getpid())


@pytest.fixture
def source():
    with InMemoryDataSource(EVERY_KIND) as created:
        yield created


def test_every_value_kind_round_trips_exactly(source):
    values = [source[k] for k in range(len(source))]
    assert values == EVERY_KIND
    assert [type(v) for v in values] == [type(v) for v in EVERY_KIND]
    assert math.copysign(1.0, source[4]) == -1.0
    assert source.__getitems__(list(range(len(source)))) == EVERY_KIND


def test_bytes_keep_their_trailing_zero_bytes_unlike_shareable_list(source):
    # Grain's version is a ShareableList, which returns b"ab" here (CPython #96779). Not shown
    # side by side: a ShareableList starts the resource-tracker process, which outlives the test.
    assert source[12] == b"ab\x00\x00"
    assert source[13] == b"\x00\x00\x00"


def test_nan_round_trips_as_nan():
    with InMemoryDataSource([float("nan")]) as nan_source:
        assert math.isnan(nan_source[0])


def test_negative_keys_count_from_the_end_like_a_list(source):
    assert source[-1] is None
    assert source[-len(source)] == 0
    assert source.__getitems__([-1, 0, -2]) == [None, 0, b"\x00" * 3]


@pytest.mark.parametrize("key", [15, -16], ids=["past the end", "before the start"])
def test_keys_outside_the_list_raise_index_error(source, key):
    with pytest.raises(IndexError) as error:
        source[key]
    assert str(error.value) == (
        f"Index {key} out of range for 15: InMemoryDataSource keys must be in [0, 15); read a "
        f"key in that range, e.g. key % len(source) (here {key % 15}), which is how the "
        "DataLoader wraps sampler keys."
    )
    with pytest.raises(IndexError, match=f"^Index {key} out of range"):
        source.__getitems__([0, key])


def test_a_non_integer_key_is_a_type_error(source):
    with pytest.raises(GrainliteTypeError) as error:
        source["a"]
    assert str(error.value) == (
        "InMemoryDataSource indices must be ints (got str 'a'); pass an int or a numpy integer."
    )


@pytest.mark.parametrize(
    "elements",
    [list(range(1000)), [x / 7 for x in range(1000)], [x % 3 == 0 for x in range(1000)]],
    ids=["ints", "floats", "bools"],
)
def test_batched_reads_of_one_value_type_equal_single_reads(elements):
    keys = np.random.default_rng(0).integers(-1000, 1000, 300)
    with InMemoryDataSource(elements) as one_kind:
        batch = one_kind.__getitems__(keys)
        assert batch == [elements[k] for k in keys.tolist()]
        assert [type(v) for v in batch] == [type(elements[0])] * len(batch)


_RECORDS = [
    np.array([k, k % 7], "<i8").tobytes() for k in range(1000)
]  # 16 bytes, zeros at the end


@pytest.mark.parametrize(
    "elements",
    [
        _RECORDS,
        [b"odd", *_RECORDS[1:]],  # one length, but stored off the 16-byte grid after b"odd"
        _RECORDS[:500] + [b"\x00" * 8] * 500,  # two lengths
        [bytes(range(k % 40)) + b"\x00" * (k % 3) for k in range(1000)],
        [b""] * 1000,
        ["x" * (k % 5) + "é\ud800" for k in range(1000)],
    ],
    ids=["fixed size", "fixed size off the grid", "two sizes", "any size", "empty", "strs"],
)
def test_batched_reads_of_bytes_and_strs_equal_single_reads_byte_for_byte(elements):
    keys = np.random.default_rng(0).integers(-1000, 1000, 700)
    with InMemoryDataSource(elements) as one_kind:
        batch = one_kind.__getitems__(keys.tolist())
        assert batch == [elements[k] for k in keys.tolist()]
        assert batch == [one_kind[k] for k in keys.tolist()]
        assert [type(v) for v in batch] == [type(elements[0])] * len(batch)
        rest = keys[keys % len(elements) != 0].tolist()  # without the first value
        assert one_kind.__getitems__(rest) == [elements[k] for k in rest]


def test_neither_elements_nor_name_is_a_value_error():
    with pytest.raises(GrainliteValueError) as error:
        InMemoryDataSource()
    assert str(error.value) == (
        "Elements or name must be provided. Pass InMemoryDataSource(elements) to store values in "
        "a new shared-memory segment, or InMemoryDataSource(name=source.name) to attach to an "
        "existing one."
    )


def _unique_name(label: str) -> str:
    return f"glt_{label}_{os.getpid()}_{os.urandom(4).hex()}"


def test_elements_with_a_name_create_the_segment_under_that_name_for_others_to_attach():
    name = _unique_name("named")
    with InMemoryDataSource([1, "two", b"3", None], name=name) as source:
        assert source.name == name
        assert os.path.exists(f"/dev/shm/{name}")
        attached = InMemoryDataSource(name=name)
        assert list(attached) == [1, "two", b"3", None]
        attached.close()
        assert os.path.exists(f"/dev/shm/{name}")  # only the creator removes it
    assert not os.path.exists(f"/dev/shm/{name}")


def test_a_named_source_is_read_by_worker_processes():
    import grainlite as grain

    name = _unique_name("workers")
    with InMemoryDataSource(list(range(10, 16)), name=name) as source:
        loader = grain.DataLoader(
            data_source=source,
            sampler=grain.IndexSampler(6, grain.NoSharding(), num_epochs=1),
            worker_count=2,
        )
        with iter(loader) as iterator:
            assert sorted(iterator) == list(range(10, 16))


def test_a_name_that_already_exists_is_file_exists_error_as_in_grain():
    name = _unique_name("taken")
    with InMemoryDataSource([1], name=name):
        with pytest.raises(FileExistsError) as error:
            InMemoryDataSource([2], name=name)
        assert str(error.value) == (
            f"[Errno 17] A shared-memory segment named {name!r} already exists in /dev/shm (an "
            f"InMemoryDataSource created under that name and still open, or left by a killed "
            f"process); choose another name, close the source that holds it, or remove a "
            f"leftover with InMemoryDataSource(name={name!r}).unlink()"
        )
        assert InMemoryDataSource(name=name)[0] == 1  # the first one is untouched


@pytest.mark.parametrize("name", ["", "a/b", "x" * 256], ids=["empty", "slash", "too-long"])
def test_a_name_the_platform_cannot_hold_is_a_clear_value_error(name):
    before = set(os.listdir("/dev/shm"))
    with pytest.raises(GrainliteValueError) as error:
        InMemoryDataSource([1], name=name)
    size = len(name)
    assert str(error.value) == (
        f"InMemoryDataSource name must be 1 to 255 bytes without '/' or NUL on this platform "
        f"(linux); got {name!r} ({size} bytes). Pass a shorter name such as 'my_dataset', or "
        f"leave name out to let grainlite choose one."
    )
    assert set(os.listdir("/dev/shm")) - before == set()


def test_a_name_that_is_not_a_str_is_a_type_error():
    with pytest.raises(GrainliteTypeError) as error:
        InMemoryDataSource([1], name=5)
    assert str(error.value) == (
        "InMemoryDataSource name must be a str (got int 5); pass a name such as 'my_dataset', "
        "or leave name out to let grainlite choose one."
    )


@pytest.mark.parametrize(
    "bad, type_name",
    [([1, 2, [3]], "list"), ([1, 2, np.int64(3)], "numpy.int64"), ([1, 2, {3: 4}], "dict")],
    ids=["a list", "a numpy integer", "a dict"],
)
def test_an_unsupported_element_names_its_position_type_and_the_allowed_types(bad, type_name):
    with pytest.raises(GrainliteTypeError) as error:
        InMemoryDataSource(bad)
    assert str(error.value) == (
        f"InMemoryDataSource elements must be int, float, bool, str, bytes or None (got "
        f"{type_name} at position 2); convert it first (e.g. int(x) or x.item() for a numpy "
        f"scalar, pickle.dumps(x) for other objects), or use a list as the data source."
    )


@pytest.mark.parametrize("big", [2**63, -(2**63) - 1], ids=["above int64", "below int64"])
def test_an_int_outside_int64_is_a_clear_value_error(big):
    with pytest.raises(GrainliteValueError) as error:
        InMemoryDataSource([1, big])
    assert str(error.value) == (
        f"InMemoryDataSource stores ints as int64, but the element at position 1 is {big}, "
        f"outside [-2**63, 2**63 - 1]; store it as str(x) or bytes instead."
    )


def test_a_non_sequence_is_a_type_error():
    with pytest.raises(GrainliteTypeError) as error:
        InMemoryDataSource(5)
    assert str(error.value) == (
        "InMemoryDataSource elements must be a sequence of values (got int); pass a list, e.g. "
        "InMemoryDataSource([1, 2, 3])."
    )


def test_attaching_to_a_missing_segment_is_file_not_found():
    with pytest.raises(FileNotFoundError) as error:
        InMemoryDataSource(name="grainlite_1_source_missing")
    assert str(error.value) == (
        "[Errno 2] No InMemoryDataSource segment named 'grainlite_1_source_missing' in /dev/shm: "
        "the process that created it closed it or exited; keep the creating source open while "
        "others attach"
    )


def test_attaching_to_a_foreign_segment_is_refused():
    foreign = shm.Segment.create(128, "test")
    try:
        with pytest.raises(GrainliteValueError) as error:
            InMemoryDataSource(name=foreign.name)
        assert str(error.value) == (
            f"The shared-memory segment {foreign.name!r} does not hold an InMemoryDataSource (no "
            f"grainlite header); pass the name of a grainlite InMemoryDataSource (source.name)."
        )
    finally:
        foreign.close()
        foreign.unlink()


def test_repr_is_stable_across_instances_with_the_same_contents(source):
    with InMemoryDataSource(list(EVERY_KIND)) as twin, InMemoryDataSource([1, 2]) as other:
        assert repr(twin) == repr(source)
        assert twin.name != source.name
        assert repr(other) != repr(source)
        assert repr(other).startswith("InMemoryDataSource(len=2, sha1=")
        assert source.name not in repr(source)


def test_values_of_different_types_give_different_reprs():
    with (
        InMemoryDataSource([1]) as one,
        InMemoryDataSource([True]) as true,
        InMemoryDataSource([1.0]) as one_float,
    ):
        assert len({repr(one), repr(true), repr(one_float)}) == 3


def test_str_names_the_segment_like_grain(source):
    assert str(source) == f"InMemoryDataSource(name={source.name}, len=15)"
    assert shm.owner_pid(source.name) == os.getpid() and "_src_" in source.name


def test_shared_memory_data_source_is_the_same_class():
    assert SharedMemoryDataSource is InMemoryDataSource


@pytest.mark.parametrize("module", [pickle, cloudpickle], ids=["pickle", "cloudpickle"])
def test_pickling_sends_the_segment_name_not_the_data(module):
    with InMemoryDataSource(list(range(100_000))) as big:
        payload = module.dumps(big)
        assert len(payload) < 300
        with module.loads(payload) as copy:
            assert copy.name == big.name
            assert repr(copy) == repr(big)
            assert copy[99_999] == 99_999
        assert big[5] == 5  # Closing an attached copy leaves the owner's segment alone.
        assert big.name in shm.list_segments()


def test_close_is_idempotent_and_removes_the_segment():
    source = InMemoryDataSource([1, 2, 3])
    assert source.name in own_segments()
    source.close()
    source.close()
    assert source.name not in shm.list_segments()
    assert len(source) == 3
    with pytest.raises(GrainliteValueError) as error:
        source[0]
    assert str(error.value) == (
        f"InMemoryDataSource(name={source.name}, len=3) is closed; read it before calling "
        f"close(), or attach a new one with InMemoryDataSource(name={source.name!r}) while its "
        f"owner still has it open."
    )


def test_garbage_collection_of_the_owner_removes_the_segment():
    before = own_segments()
    source = InMemoryDataSource(["a", "b"])
    name = source.name
    assert own_segments() - before == {name}
    del source
    gc.collect()
    assert own_segments() == before


def test_unlink_removes_the_name_while_mapped_copies_keep_reading():
    with InMemoryDataSource([b"x", b"y"]) as source:
        source.unlink()
        assert source.name not in shm.list_segments()
        assert source[1] == b"y"


def _read_in_child(source, keys, conn):
    """Runs in a spawned process: reads keys from the unpickled source and reports the result."""
    conn.send((source.name, [source[k] for k in keys], source.__getitems__(keys)))
    conn.close()


def _attach_and_exit(source, conn):
    """Runs in a spawned process: attaches, reads once, and exits without closing anything."""
    conn.send(source[0])
    conn.close()


def _run_child(target, *args):
    """Runs ``target(*args, connection)`` in a spawned process and returns what it sends."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=target, args=(*args, sender))
    child.start()
    sender.close()
    try:
        if not receiver.poll(20):
            raise AssertionError("the child sent nothing within 20 s")
        result = receiver.recv()
        child.join(10)
        assert child.exitcode == 0
        return result, child.pid
    finally:
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
            child.join()
        receiver.close()


def test_a_spawned_child_reads_the_parents_segment_without_a_copy(source):
    segments_before = own_segments()
    keys = [0, 12, -1, 9]
    (name, singles, batch), child_pid = _run_child(_read_in_child, source, keys)
    assert name == source.name
    assert singles == batch == [EVERY_KIND[k] for k in keys]
    assert own_segments() == segments_before
    assert segments_of(child_pid) == set()


def test_a_child_that_exits_without_closing_leaves_the_owners_segment():
    source = InMemoryDataSource(["still here"])
    try:
        assert _run_child(_attach_and_exit, source)[0] == "still here"
        assert source.name in shm.list_segments()
        assert source[0] == "still here"
    finally:
        source.close()
    assert source.name not in shm.list_segments()
