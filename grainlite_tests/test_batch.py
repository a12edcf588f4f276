"""Batch's validation, and make_batch against Grain 0.2.18's default batch function."""

from __future__ import annotations

import collections
import dataclasses
import inspect
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.transforms.batch import Batch, make_batch
from grainlite.tree import map_leaves

pytestmark = pytest.mark.timeout(60)

Point = collections.namedtuple("Point", ["x", "y"])
FIX = (
    " Make every element the same pytree with leaves of equal shape (pad or crop them in a "
    "transform), or pass Batch(batch_size, batch_fn=...) to combine them yourself."
)
HEAD = "Expected all input elements to have the same structure but got: "


@pytest.fixture(scope="module")
def grain_make_batch():
    """Grain 0.2.18's default batch function (the ``peer`` extra)."""
    flags = pytest.importorskip("absl.flags")
    flags.FLAGS.mark_as_parsed()  # grain reads absl flags on import
    return pytest.importorskip("grain._src.python.dataset.transformations.batch").make_batch


def assert_identical(ours, theirs, path="root"):
    """Same container types, key order, dtypes, shapes and bytes, all the way down."""
    assert type(ours) is type(theirs), f"{path}: {type(ours)} != {type(theirs)}"
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs), f"{path}: key order {list(ours)} != {list(theirs)}"
        assert getattr(ours, "default_factory", None) == getattr(theirs, "default_factory", None)
        for key in theirs:
            assert_identical(ours[key], theirs[key], f"{path}[{key!r}]")
    elif isinstance(theirs, list | tuple):
        assert len(ours) == len(theirs), path
        for index, (a, b) in enumerate(zip(ours, theirs)):
            assert_identical(a, b, f"{path}[{index}]")
    elif isinstance(theirs, np.ndarray):
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape), path
        if theirs.dtype.hasobject:
            assert ours.tolist() == theirs.tolist(), path
        else:
            assert ours.tobytes() == theirs.tobytes(), path
    else:
        assert ours == theirs, path


def leaves_of(tree):
    found = []
    map_leaves(found.append, tree)
    return found


class RecordingAllocator:
    """An ``allocate(shape, dtype)`` that hands out fresh arrays and remembers them."""

    def __init__(self):
        self.buffers = []

    def __call__(self, shape, dtype):
        assert type(shape) is tuple and isinstance(dtype, np.dtype)
        self.buffers.append(np.empty(shape, dtype))
        return self.buffers[-1]


# ----------------------------------------------------------------------------------------------
# Batch


def test_batch_has_grains_fields_defaults_and_repr():
    assert list(inspect.signature(Batch).parameters) == ["batch_size", "drop_remainder", "batch_fn"]
    assert repr(Batch(2)) == "Batch(batch_size=2, drop_remainder=False, batch_fn=None)"
    assert Batch(4, True) == Batch(batch_size=4, drop_remainder=True, batch_fn=None)


def test_batch_is_frozen_and_picklable():
    batch = Batch(8, drop_remainder=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.batch_size = 3
    assert pickle.loads(pickle.dumps(batch)) == batch


def test_a_numpy_integer_batch_size_is_stored_as_an_int():
    batch = Batch(np.int64(4))
    assert type(batch.batch_size) is int and batch == Batch(4)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"batch_size": 0},
            GrainliteValueError,
            "batch_size must be positive. Got batch_size=0; pass Batch(batch_size=N) with N >= 1.",
        ),
        (
            {"batch_size": -3},
            GrainliteValueError,
            "batch_size must be positive. Got batch_size=-3; pass Batch(batch_size=N) with N >= 1.",
        ),
        (
            {"batch_size": 2.5},
            GrainliteTypeError,
            "batch_size must be an int, got 2.5 of type float; pass a positive integer such as "
            "Batch(batch_size=32).",
        ),
        (
            {"batch_size": True},
            GrainliteTypeError,
            "batch_size must be an int, got True of type bool; pass a positive integer such as "
            "Batch(batch_size=32).",
        ),
        (
            {"batch_size": "8"},
            GrainliteTypeError,
            "batch_size must be an int, got '8' of type str; pass a positive integer such as "
            "Batch(batch_size=32).",
        ),
        (
            {"batch_size": 2, "drop_remainder": "yes"},
            GrainliteTypeError,
            "drop_remainder must be a bool, got 'yes' of type str; pass True or False.",
        ),
        (
            {"batch_size": 2, "batch_fn": 3},
            GrainliteTypeError,
            "batch_fn must be callable or None, got 3 of type int; pass a function from the list "
            "of elements to the batch, or None to stack them with make_batch.",
        ),
    ],
    ids=[
        "zero-size",
        "negative-size",
        "float-size",
        "bool-size",
        "str-size",
        "str-drop-remainder",
        "int-batch-fn",
    ],
)
def test_bad_batch_arguments_are_rejected_with_the_fix(kwargs, error, message):
    with pytest.raises(error) as caught:
        Batch(**kwargs)
    assert str(caught.value) == message


def test_the_batch_size_errors_subclass_the_builtins_grain_raises():
    with pytest.raises(ValueError, match=r"^batch_size must be positive\. "):
        Batch(0)
    with pytest.raises(TypeError):
        Batch(1.0)


# ----------------------------------------------------------------------------------------------
# make_batch: the same results as Grain


CASES = {
    "python-ints": [1, 2, 3],
    "python-floats": [1.0, 2.5],
    "ints-and-floats": [1, 2.5, True],
    "bools": [True, False],
    "complex": [1j, 2 + 0j],
    "strings-become-unicode-arrays": ["a", "bb"],
    "empty-strings": ["", ""],
    "bytes": [b"", b"ab"],
    "int-and-str": [1, "a"],
    "numpy-int64-scalars": [np.int64(1), np.int64(2)],
    "numpy-float32-and-python-float": [np.float32(1), 2.0],
    "numpy-datetimes-of-two-units": [
        np.datetime64("2020-01-01"),
        np.datetime64("2020-01-01T00:00"),
    ],
    "numpy-strings": [np.str_("a"), np.str_("bb")],
    "zero-d-arrays": [np.array(1.5), np.array(2.5)],
    "arrays": [np.arange(6).reshape(2, 3), np.ones((2, 3), np.int64)],
    "arrays-of-two-dtypes": [np.zeros(3, np.float32), np.ones(3, np.int8)],
    "string-arrays": [np.array(["a", "b"]), np.array(["ccc", "d"])],
    "fortran-ordered-arrays": [np.asfortranarray(np.ones((2, 3))), np.zeros((2, 3))],
    "empty-arrays": [np.zeros((0, 3)), np.zeros((0, 3))],
    "int-beyond-int64": [2**64, 1],
    "int-just-beyond-int64": [2**63, 1],
    "objects": [object, int],
    "dict-with-keys-out-of-order": [{"b": 1, "a": 2}, {"a": 3, "b": 4}],
    "grains-tutorial-example": [{"x": 1, "y": (1.0, 2)}, {"x": 1, "y": (1.0, 2)}],
    "none-stays-none": [{"x": None, "y": 1}, {"x": None, "y": 2}],
    "all-none": [None, None],
    "empty-containers": [{"a": (), "b": [], "c": {}}, {"a": (), "b": [], "c": {}}],
    "nested": [{"a": {"b": [1, (2, 3)]}, "c": "s"}, {"c": "t", "a": {"b": [4, (5, 6)]}}],
    "namedtuple": [Point(1, 2.0), Point(3, 4.0)],
    "ordered-dict": [collections.OrderedDict(b=1, a=2), collections.OrderedDict(b=3, a=4)],
    "defaultdict": [collections.defaultdict(int, b=1, a=2), collections.defaultdict(int, a=3, b=4)],
    "numeric-dict-keys": [{2: 1, 1: 2}, {1: 3, 2: 4}],
    "leaf-first-takes-a-tuple-whole": [np.array([1, 2]), (3, 4)],
    "leaf-first-takes-none-whole": [1, None],
    "single-element-dict": [{"b": np.zeros((2, 2), np.float32), "a": "s", "n": None}],
    "single-python-int": [1],
    "single-string": ["abc"],
    "single-array": [np.arange(3)],
    "dict-subclass-is-a-leaf": [collections.UserDict(a=1), collections.UserDict(a=1)],
}


@pytest.mark.parametrize("values", list(CASES.values()), ids=list(CASES))
def test_make_batch_gives_grains_batch(values, grain_make_batch):
    assert_identical(make_batch(values), grain_make_batch(values))


def test_a_single_element_gets_a_batch_axis_of_one():
    batch = make_batch([{"image": np.zeros((4, 4, 3), np.uint8), "label": 7}])
    assert batch["image"].shape == (1, 4, 4, 3)
    assert_identical(batch["label"], np.array([7]))


def test_strings_become_unicode_arrays_as_wide_as_the_longest():
    assert_identical(make_batch(["a", "bb"]), np.array(["a", "bb"], dtype="<U2"))


def test_dict_keys_come_back_sorted_as_jax_sorts_them(grain_make_batch):
    values = [{"zeta": 1, "alpha": 2, "mid": 3}] * 2
    assert list(make_batch(values)) == list(grain_make_batch(values)) == ["alpha", "mid", "zeta"]


def test_a_sequence_other_than_a_list_is_accepted():
    assert_identical(make_batch((1, 2)), np.array([1, 2]))


def _leaf_spec():
    scalar = st.sampled_from(["int", "float", "bool", "str", "bytes", "np_int64", "np_float32"])
    array = st.tuples(
        st.just("array"),
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
        st.sampled_from(["int8", "int64", "uint8", "float16", "float32", "float64", "bool", "<U3"]),
    )
    return st.one_of(
        scalar.map(lambda kind: (kind,)),
        array,
        st.just(("mixed_scalar",)),
        hnp.array_shapes(min_dims=1, max_dims=2, max_side=3).map(lambda s: ("mixed_array", s)),
        st.just(("none",)),
    )


def _container_spec(children):
    keys = st.lists(st.text("abcxyz", min_size=1, max_size=2), min_size=0, max_size=3, unique=True)
    return st.one_of(
        st.tuples(st.sampled_from(["dict", "odict", "ddict"]), keys).flatmap(
            lambda kk: st.lists(children, min_size=len(kk[1]), max_size=len(kk[1])).map(
                lambda cs: (kk[0], kk[1], cs)
            )
        ),
        st.tuples(st.sampled_from(["list", "tuple"]), st.lists(children, max_size=3)),
        st.tuples(st.just("point"), st.lists(children, min_size=2, max_size=2)),
    )


SPECS = st.recursive(_leaf_spec(), _container_spec, max_leaves=8)


def _element(spec, draw):
    """One element of the structure ``spec``, its leaves drawn fresh."""
    kind = spec[0]
    if kind in ("dict", "ddict"):
        keys = draw(st.permutations(spec[1]))  # insertion order differs between elements
        order = {key: child for key, child in zip(spec[1], spec[2])}
        pairs = [(key, _element(order[key], draw)) for key in keys]
        return dict(pairs) if kind == "dict" else collections.defaultdict(int, pairs)
    if kind == "odict":
        return collections.OrderedDict((k, _element(c, draw)) for k, c in zip(spec[1], spec[2]))
    if kind in ("list", "tuple"):
        children = [_element(child, draw) for child in spec[1]]
        return children if kind == "list" else tuple(children)
    if kind == "point":
        return Point(*(_element(child, draw) for child in spec[1]))
    if kind == "array":
        return draw(hnp.arrays(np.dtype(spec[2]), spec[1]))
    if kind == "mixed_array":
        return draw(hnp.arrays(st.sampled_from(["int8", "float32", "float64"]), spec[1]))
    if kind == "mixed_scalar":
        return draw(st.one_of(st.integers(-(2**40), 2**40), st.floats(width=64), st.booleans()))
    if kind == "none":
        return None
    return draw(
        {
            "int": st.integers(-(2**62), 2**62),
            "float": st.floats(),
            "bool": st.booleans(),
            "str": st.text(max_size=4),
            "bytes": st.binary(max_size=4),
            "np_int64": st.integers(-(2**62), 2**62).map(np.int64),
            "np_float32": st.floats(width=32).map(np.float32),
        }[kind]
    )


@st.composite
def batches(draw):
    """A list of 1 to 5 elements sharing one random structure."""
    spec = draw(SPECS)
    return [_element(spec, draw) for _ in range(draw(st.integers(1, 5)))]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=batches())
def test_make_batch_gives_grains_batch_for_random_structures(values, grain_make_batch):
    assert_identical(make_batch(values), grain_make_batch(values))


# ----------------------------------------------------------------------------------------------
# make_batch: writing into memory the caller allocates


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=batches())
def test_allocate_receives_every_shareable_leaf_and_changes_no_value(values):
    allocate = RecordingAllocator()
    batch = make_batch(values, allocate)
    assert_identical(batch, make_batch(values))
    shareable = [leaf for leaf in leaves_of(batch) if not leaf.dtype.hasobject and leaf.size > 0]
    assert len(shareable) == len(allocate.buffers)
    for leaf, buffer in zip(shareable, allocate.buffers):
        assert leaf is buffer


@pytest.mark.parametrize(
    "values",
    [
        [np.arange(6.0).reshape(2, 3) + i for i in range(4)],
        [np.int64(i) for i in range(4)],
        [np.array(i) for i in range(4)],
        list(range(4)),
        ["a", "bb", "c", "d"],
        [np.zeros(2, np.float32), np.zeros(2, np.int64)],
        [np.arange(3.0)],
    ],
    ids=[
        "arrays",
        "numpy-scalars",
        "zero-d-arrays",
        "python-ints",
        "strings",
        "arrays-of-two-dtypes",
        "single-array",
    ],
)
def test_allocate_gets_the_batch_shape_and_dtype_and_the_batch_lives_in_its_buffer(values):
    allocate = RecordingAllocator()
    batch = make_batch(values, allocate)
    (buffer,) = allocate.buffers
    assert (buffer.shape, buffer.dtype) == (batch.shape, batch.dtype)
    assert np.shares_memory(batch, buffer)
    assert_identical(batch, make_batch(values))


def test_a_dict_of_arrays_is_written_into_one_buffer_per_key():
    values = [{"image": np.full((2, 2), i, np.uint8), "label": i} for i in range(3)]
    allocate = RecordingAllocator()
    batch = make_batch(values, allocate)
    assert [b.shape for b in allocate.buffers] == [(3, 2, 2), (3,)]
    assert np.shares_memory(batch["image"], allocate.buffers[0])
    assert np.shares_memory(batch["label"], allocate.buffers[1])


def test_a_non_contiguous_buffer_from_allocate_is_still_written_in_place():
    def allocate(shape, dtype):
        return np.empty(shape[::-1], dtype).T  # Fortran order: the right shape, not C-contiguous

    values = [np.arange(6).reshape(2, 3) + i for i in range(4)]
    batch = make_batch(values, allocate)
    assert not batch.flags.c_contiguous
    assert_identical(np.ascontiguousarray(batch), make_batch(values))


@pytest.mark.parametrize(
    "values",
    [[object(), object()], [np.zeros((0, 2)), np.zeros((0, 2))], [1, None], [np.zeros(0)]],
    ids=["objects", "zero-size-arrays", "int-and-none", "single-zero-size-array"],
)
def test_allocate_is_not_asked_for_object_or_zero_size_leaves(values):
    allocate = RecordingAllocator()
    make_batch(values, allocate)
    assert allocate.buffers == []


def test_an_error_from_allocate_reaches_the_caller_unchanged():
    class NoRoom(ValueError):
        pass

    def allocate(shape, dtype):
        raise NoRoom("no room")

    for values in ([np.zeros(2), np.zeros(2)], [1, 2], [np.zeros(2)]):
        with pytest.raises(NoRoom):
            make_batch(values, allocate)


# ----------------------------------------------------------------------------------------------
# make_batch: errors


def test_grains_mismatch_message_is_where_ours_starts(grain_make_batch):
    with pytest.raises(ValueError) as caught:
        grain_make_batch([(1, 2), [1, 2]])
    assert str(caught.value).startswith(HEAD.rstrip())


@pytest.mark.parametrize(
    "values, message",
    [
        (
            [{"a": 1, "b": 2}, {"a": 1, "b": 2}, {"a": 1}],
            "the element at position 0 has structure {'a': int, 'b': int}, while the element at "
            "position 2 has structure {'a': int}. First difference: element 2 at root: 1 key "
            "where element 0 has 2 (missing ['b']).",
        ),
        (
            [np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 4), np.float32)],
            "the element at position 0 has structure float64[2, 3], while the element at "
            "position 2 has structure float32[2, 4]. First difference: element 2 at root: a leaf "
            "of shape (2, 4) where element 0 has shape (2, 3).",
        ),
        (
            [{"image": np.zeros(3), "label": 1}, {"image": np.zeros(4), "label": 2}],
            "the element at position 0 has structure {'image': float64[3], 'label': int}, while "
            "the element at position 1 has structure {'image': float64[4], 'label': int}. First "
            "difference: element 1 at ['image']: a leaf of shape (4,) where element 0 has shape "
            "(3,).",
        ),
        (
            [(1, 2), (1, 2), [1, 2], (1,)],
            "the element at position 0 has structure (int, int), while the elements at positions "
            "[2, 3] have structures [[int, int], (int,)]. First difference: element 2 at root: a "
            "list where element 0 has a tuple.",
        ),
        (
            [{"a": None}, {"a": 1}],
            "the element at position 0 has structure {'a': None}, while the element at position "
            "1 has structure {'a': int}. First difference: element 1 at ['a']: an int where "
            "element 0 has None.",
        ),
        (
            [Point(1, 2), Point(1, (2, 3))],
            "the element at position 0 has structure Point(x=int, y=int), while the element at "
            "position 1 has structure Point(x=int, y=(int, int)). First difference: element 1 at "
            "[1]: a leaf of shape (2,) where element 0 has shape ().",
        ),
        (
            [collections.UserList([1, 2]), collections.UserList([1, 2, 3])],
            "all 2 elements have structure UserList, but their leaves at root could not be "
            "stacked: a leaf of shape (3,) where element 0 has shape (2,).",
        ),
    ],
    ids=[
        "missing-key",
        "array-shapes",
        "array-shapes-in-a-dict",
        "several-positions",
        "none-vs-value",
        "leaf-vs-tuple-in-a-namedtuple",
        "same-structure-unstackable-leaves",
    ],
)
def test_a_mismatch_names_the_positions_that_differ_and_their_structures(values, message):
    with pytest.raises(GrainliteValueError) as caught:
        make_batch(values)
    assert str(caught.value) == HEAD + message + FIX


def test_a_mismatch_lists_ten_positions_and_counts_the_rest():
    values = [(1, 2)] + [(1,)] * 12
    with pytest.raises(GrainliteValueError) as caught:
        make_batch(values)
    assert str(caught.value) == (
        HEAD + "the element at position 0 has structure (int, int), while the elements at "
        "positions [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] (and 2 more) have structures "
        f"[{', '.join(['(int,)'] * 10)}]. First difference: element 1 at root: 1 item where "
        "element 0 has 2." + FIX
    )


def test_batching_nothing_is_an_error_with_grains_opening_words():
    with pytest.raises(GrainliteValueError) as caught:
        make_batch([])
    assert str(caught.value) == (
        "Cannot batch 0 values: make_batch got an empty sequence; pass at least one element."
    )
