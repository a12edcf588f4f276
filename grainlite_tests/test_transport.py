"""The worker transport: an element crosses to the parent unchanged (containers, key order, types,
dtypes), its arrays through reused, aligned shared memory, and what cannot cross is named."""

from __future__ import annotations

import collections
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from typing import Any

import numpy as np
import pytest

import grainlite as grain
from grainlite.engine.transport import (
    ShmLeaf,
    SlabMapper,
    SlabPool,
    dumps,
    unsendable_element_error,
)
from grainlite.errors import GrainliteTypeError

pytestmark = pytest.mark.timeout(120)

Point = collections.namedtuple("Point", ["x", "y"])


class Record(dict):
    """A dict subclass with its own constructor: a leaf by the tree rules, pickled whole."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, pixels=np.arange(3) + len(name))


class Tagged:
    """A custom object: a leaf, pickled whole."""

    def __init__(self, tag: str, values: np.ndarray) -> None:
        self.tag, self.values = tag, values


def assert_identical(actual: Any, expected: Any, path: str = "root") -> None:
    """Same types at every node, same key order and default_factory, equal values and dtypes."""
    assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
    kind = type(expected)
    if kind is np.ndarray:
        assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape), path
        assert actual.dtype.names == expected.dtype.names, path
        if expected.dtype.hasobject:
            for index, (a, e) in enumerate(zip(actual.ravel(), expected.ravel())):
                assert_identical(a, e, f"{path}.flat[{index}]")
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=path)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        if kind is collections.defaultdict:
            assert actual.default_factory is expected.default_factory, path
        for key in expected:
            assert_identical(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected), path
        for index, (a, e) in enumerate(zip(actual, expected)):
            assert_identical(a, e, f"{path}[{index}]")
    elif hasattr(expected, "__dict__"):
        assert_identical(vars(actual), vars(expected), f"{path}.__dict__")
    else:
        assert actual == expected, path


# Elements that the tree rules walk into, and leaves that they pass on whole. Each is a function of
# the record so that every element differs.
ELEMENTS = {
    "dict": lambda x: {"b": np.full(2, x), "a": x, "c": "text"},
    "ordered-dict": lambda x: collections.OrderedDict(b=np.full(2, x), a=float(x)),
    "defaultdict": lambda x: collections.defaultdict(list, b=np.full(2, x), a=np.int32(x)),
    "list": lambda x: [np.full((2, 2), x), x],
    "tuple": lambda x: (np.full(3, x, np.uint8), x),
    "namedtuple": lambda x: Point(np.full(2, x), y=x),
    "none-leaves": lambda x: {"a": None, "b": [None, np.full(1, x)]},
    "nested": lambda x: {
        "z": [Point(x=collections.OrderedDict(q=np.full(2, x), p=None), y=(x,))],
        "y": collections.defaultdict(int, {"k": {"j": np.full(1, x), "i": x}}),
    },
    "dict-subclass": lambda x: {"record": Record("r" * (x + 1)), "b": np.full(2, x)},
    "custom-object": lambda x: [Tagged(str(x), np.full(2, x)), np.full(2, x)],
}


class Build(grain.MapTransform):
    def __init__(self, name: str) -> None:
        self.name = name

    def map(self, x):
        return ELEMENTS[self.name](int(x))


def _load(name: str, workers: int, records: list[int], batch: bool) -> list[Any]:
    operations: list[Any] = [Build(name)]
    if batch:
        operations.append(grain.Batch(batch_size=2))
    loader = grain.DataLoader(
        data_source=records,
        sampler=grain.IndexSampler(len(records), grain.NoSharding(), num_epochs=1),
        operations=operations,
        worker_count=workers,
    )
    with iter(loader) as iterator:
        return list(iterator)


@pytest.mark.parametrize("name", list(ELEMENTS))
def test_workers_return_exactly_the_elements_of_the_in_process_loader(name):
    records = list(range(6))
    expected = _load(name, 0, records, batch=False)
    actual = _load(name, 2, records, batch=False)
    assert len(actual) == len(expected) == 6
    for got, want in zip(actual, expected):
        assert_identical(got, want)


@pytest.mark.parametrize("name", list(ELEMENTS))
def test_workers_return_exactly_the_batches_of_the_in_process_loader(name):
    # Two workers batch records 0, 2 | 4, 6 and 1, 3 | 5, 7 and alternate; the in-process loader
    # makes the same batches from the records in that order.
    actual = _load(name, 2, list(range(8)), batch=True)
    expected = _load(name, 0, [0, 2, 1, 3, 4, 6, 5, 7], batch=True)
    assert len(actual) == len(expected) == 4
    for got, want in zip(actual, expected):
        assert_identical(got, want)


# One process: the worker's pool and the parent's mapper, with a real pickle in between ----------


@pytest.fixture
def link():
    pool, mapper = SlabPool("test", os.getpid()), SlabMapper()
    yield pool, mapper
    pool.close()


def _send(pool: SlabPool, mapper: SlabMapper, element: Any) -> tuple[Any, Any, list[int]]:
    """Exports ``element`` as a worker does and materializes it as the parent does."""
    payload = pool.export(element)
    slabs, announced = pool.finish_element()
    message = pickle.loads(dumps(("element", payload, slabs, announced)))
    mapper.announce(message[3])
    return payload, mapper.materialize(message[1], message[2]), slabs


@pytest.mark.parametrize("name", list(ELEMENTS))
def test_an_element_crosses_the_transport_unchanged(link, name):
    element = ELEMENTS[name](3)
    _, received, _ = _send(*link, element)
    assert_identical(received, element)


def test_a_released_slab_is_written_again_and_no_new_segment_is_made(link):
    pool, mapper = link
    _, first, slabs = _send(pool, mapper, {"a": np.arange(1000.0)})
    assert len(pool._slabs) == 1
    address = first["a"].__array_interface__["data"][0]
    del first
    pool.release(mapper.take_released())
    _, second, again = _send(pool, mapper, {"a": np.arange(1000.0) + 1})
    assert again == slabs
    assert len(pool._slabs) == 1
    assert second["a"].__array_interface__["data"][0] == address
    np.testing.assert_array_equal(second["a"], np.arange(1000.0) + 1)


def test_a_slab_still_in_use_is_not_written_again(link):
    pool, mapper = link
    _, first, slabs = _send(pool, mapper, np.arange(10))
    pool.release(mapper.take_released())  # nothing released: ``first`` is alive
    _, second, other = _send(pool, mapper, np.arange(10) + 100)
    assert other != slabs
    np.testing.assert_array_equal(first, np.arange(10))
    np.testing.assert_array_equal(second, np.arange(10) + 100)


def test_every_leaf_starts_on_a_64_byte_boundary(link):
    element = [np.arange(n, dtype=np.uint8) for n in (1, 3, 64, 65, 7)] + [np.zeros(5, np.int16)]
    payload, received, _ = _send(*link, element)
    assert [type(leaf) for leaf in payload] == [ShmLeaf] * len(element)
    assert [leaf.offset % 64 for leaf in payload] == [0] * len(element)
    assert [array.__array_interface__["data"][0] % 64 for array in received] == [0] * len(element)
    assert_identical(received, element)


NON_CONTIGUOUS = {
    "transposed": np.arange(12.0).reshape(3, 4).T,
    "strided-slice": np.arange(20)[::3],
    "negative-strides": np.arange(12).reshape(3, 4)[::-1, ::-2],
    "column": np.arange(12).reshape(3, 4)[:, 1],
}


@pytest.mark.parametrize("array", NON_CONTIGUOUS.values(), ids=NON_CONTIGUOUS.keys())
def test_a_non_contiguous_array_arrives_equal_and_c_contiguous(link, array):
    payload, received, _ = _send(*link, array)
    assert type(payload) is ShmLeaf
    assert received.flags.c_contiguous
    assert_identical(received, array)


PASSED_WHOLE = {
    "zero-size": np.zeros((0, 3), np.float32),
    "object-dtype": np.array([{"a": 1}, "text", None], dtype=object),
    "structured-with-objects": np.array([(1, "x")], dtype=[("n", "i4"), ("o", "O")]),
    "masked-array": np.ma.masked_array([1, 2, 3], mask=[0, 1, 0]),
    "variable-width-strings": np.array(["a", "bcd" * 20], dtype=np.dtypes.StringDType()),
}


@pytest.mark.parametrize("array", PASSED_WHOLE.values(), ids=PASSED_WHOLE.keys())
def test_arrays_without_shareable_bytes_are_pickled_whole_not_put_in_shared_memory(link, array):
    pool, mapper = link
    payload, received, slabs = _send(pool, mapper, {"leaf": array})
    assert payload["leaf"] is array
    assert (slabs, pool._slabs) == ([], {})
    assert type(received["leaf"]) is type(array)
    assert received["leaf"].dtype == array.dtype and received["leaf"].shape == array.shape
    if isinstance(array, np.ma.MaskedArray):
        assert received["leaf"].mask.tolist() == array.mask.tolist()


DTYPES = {
    "structured": np.array([(1, 2.5, b"ab"), (3, 4.5, b"cd")], "i4, f8, S2"),
    "named-structured": np.zeros(3, np.dtype([("x", "<f4"), ("label", "u1", (2,))])),
    "big-endian": np.arange(5, dtype=">i4"),
    "big-endian-float": np.linspace(0, 1, 4).astype(">f8"),
    "zero-d": np.array(7.5),
    "datetime": np.array(["2024-01-01", "2025-06-30"], dtype="datetime64[ns]"),
    "unicode": np.array(["a", "bcd"]),
    "bool": np.array([True, False, True]),
    "with-metadata": np.arange(3, dtype=np.dtype(np.float32, metadata={"unit": "m"})),
}


@pytest.mark.parametrize("array", DTYPES.values(), ids=DTYPES.keys())
def test_arrays_keep_their_dtype_byte_order_field_names_and_shape(link, array):
    payload, received, _ = _send(*link, array)
    assert type(payload) is ShmLeaf
    assert received.dtype == array.dtype and received.dtype.str == array.dtype.str
    assert received.dtype.names == array.dtype.names
    assert received.dtype.metadata == array.dtype.metadata
    assert_identical(received, array)


@pytest.mark.parametrize(
    "scalar", [np.float32(1.5), np.int64(-3), np.bool_(True), np.str_("s")], ids=repr
)
def test_numpy_scalars_arrive_as_the_same_scalar_type(link, scalar):
    payload, received, _ = _send(*link, [scalar])
    assert payload[0] is scalar
    assert_identical(received, [scalar])


def test_a_batch_stacked_into_a_slab_is_sent_without_a_copy(link):
    pool, mapper = link
    batch = {"x": pool.allocate((4, 3), np.dtype(np.float32))}
    batch["x"][...] = np.arange(12.0).reshape(4, 3)
    payload, received, _ = _send(pool, mapper, batch)
    assert payload["x"].offset == 0 and len(pool._slabs) == 1
    assert_identical(received, {"x": np.arange(12.0, dtype=np.float32).reshape(4, 3)})


# Pickling the message and naming what cannot be pickled ------------------------------------------


def test_classes_of_the_users_script_are_sent_by_name_into_the_parents_main(monkeypatch):
    # In a worker, a namedtuple type of the user's script arrived by value with the pipeline and
    # is not found as __main__.Pair; in the parent, that name is the user's own type.
    Pair = collections.namedtuple("Pair", ["a", "b"])
    Pair.__module__ = "__main__"
    element = Pair(np.arange(2), collections.defaultdict(_main_factory, k=1))
    monkeypatch.delattr(sys.modules["__main__"], "Pair", raising=False)
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(element)
    data = dumps(element)
    monkeypatch.setattr(sys.modules["__main__"], "Pair", Pair, raising=False)
    monkeypatch.setattr(sys.modules["__main__"], "_main_factory", _main_factory, raising=False)
    received = pickle.loads(data)
    assert type(received) is Pair
    assert received.b.default_factory is _main_factory
    assert_identical(received, element)


def _main_factory() -> int:
    return 0


_main_factory.__module__ = "__main__"

_RULE = (
    "transforms that run in worker processes must return picklable values (numpy arrays, numbers, "
    "strings, and dicts, lists, tuples or namedtuples of them, with module-level types and "
    "functions); return such a value there, or pass worker_count=0 to run the transforms in this "
    "process."
)


def _unsendable(element: Any) -> GrainliteTypeError:
    try:
        dumps(element)
    except Exception as error:
        return unsendable_element_error(element, error)
    raise AssertionError("the element was picklable")


def test_an_unpicklable_leaf_is_named_by_its_path_and_type():
    element = {"image": np.zeros(2), "meta": [1, threading.Lock()]}
    error = _unsendable(element)
    assert isinstance(error, TypeError)
    assert str(error) == (
        "The leaf at ['meta'][1] of an element could not be sent to the parent process: it is of "
        "type _thread.lock, which cannot be pickled (cannot pickle '_thread.lock' object); " + _RULE
    )


def test_an_unpicklable_element_that_is_a_leaf_is_named_by_its_type():
    assert str(_unsendable(threading.Lock())) == (
        "An element could not be sent to the parent process: it is of type _thread.lock, which "
        "cannot be pickled (cannot pickle '_thread.lock' object); " + _RULE
    )


def test_an_unpicklable_container_is_blamed_on_the_element_with_picklings_reason():
    element = collections.defaultdict(lambda: 0, k=np.zeros(1))
    error = _unsendable(element)
    try:
        pickle.dumps(element)
    except Exception as reason:
        expected_reason = str(reason)
    assert str(error) == (
        f"An element of type collections.defaultdict could not be sent to the parent process "
        f"({expected_reason}); " + _RULE
    )


class ReturnsALockInside(grain.MapTransform):
    def map(self, x):
        return {"image": np.zeros(2), "meta": [x, threading.Lock()]}


def test_a_worker_names_the_leaf_of_an_element_that_cannot_be_sent():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 4, 1),
        sampler=grain.IndexSampler(4, grain.NoSharding(), num_epochs=1),
        operations=[ReturnsALockInside()],
        worker_count=1,
    )
    with iter(loader) as iterator, pytest.raises(TypeError) as caught:
        next(iterator)
    assert str(caught.value) == (
        "The leaf at ['meta'][1] of an element could not be sent to the parent process: it is of "
        "type _thread.lock, which cannot be pickled (cannot pickle '_thread.lock' object); " + _RULE
    )


_SCRIPT = """
import collections
import grainlite as grain

Point = collections.namedtuple("Point", ["x", "y"])

def zero():
    return 0

class ToPoint(grain.MapTransform):
    def map(self, x):
        return Point(x, collections.defaultdict(zero, k=x))

loader = grain.DataLoader(
    data_source=grain.RangeDataSource(0, 4, 1),
    sampler=grain.IndexSampler(4, grain.NoSharding(), num_epochs=1),
    operations=[ToPoint()],
    worker_count=2,
)
with iter(loader) as iterator:
    elements = list(iterator)
assert [type(e) for e in elements] == [Point] * 4, elements
assert [e.y.default_factory for e in elements] == [zero] * 4
assert [e.x for e in elements] == [0, 1, 2, 3]
print("ok")
"""


def test_a_namedtuple_of_the_users_script_comes_back_from_workers_as_that_type(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def _big_batches(api: str) -> Any:
    from grainlite_tests.support.fault_jobs import BigArray

    if api == "DataLoader":
        return grain.DataLoader(
            data_source=grain.RangeDataSource(0, 96, 1),
            sampler=grain.IndexSampler(96, grain.NoSharding(), shuffle=False, num_epochs=1),
            operations=[BigArray(), grain.Batch(4)],
            worker_count=2,
        )
    return (
        grain.MapDataset.range(96)
        .map(BigArray())
        .batch(4)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )


@pytest.mark.parametrize("api", ["DataLoader", "mp_prefetch"])
def test_a_ctrl_c_that_arrives_as_a_batch_is_released_reaches_the_training_loop(api):
    # Releasing a batch's shared memory must run no Python code: CPython handles a pending
    # SIGINT at the start of the next Python frame, and a KeyboardInterrupt raised in a callback
    # that a dropped reference or the garbage collector runs is printed and dropped: the Ctrl-C
    # would be lost.
    import _thread
    import operator

    with iter(_big_batches(api)) as iterator:
        for trial in range(20):
            holder = [next(iterator)]
            # One C call trips SIGINT, then drops the last reference to the batch (its arrays
            # views of shared memory): the first Python frame to start gets the KeyboardInterrupt.
            with pytest.raises(KeyboardInterrupt):
                list(map(operator.call, (_thread.interrupt_main, holder.clear)))
            assert holder == [], f"trial {trial}"
        assert len(list(iterator)) == 4  # the released slabs are written again; nothing lost
