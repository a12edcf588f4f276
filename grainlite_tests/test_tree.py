"""The pytree helpers follow JAX's rules: which types are containers, key order, None, prefixes;
the order-keeping walk gives every container back as it was."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from grainlite.tree import (
    StructureMismatch,
    describe,
    format_path,
    leaves_with_paths,
    map_leaves,
    map_leaves_keeping_order,
    map_together,
)

pytestmark = pytest.mark.timeout(30)

Point = collections.namedtuple("Point", ["x", "y"])


class DictSubclass(dict):
    """Not a registered container in JAX, so a leaf."""


def _leaf_types(tree):
    return map_leaves(lambda leaf: type(leaf).__name__, tree)


def test_map_leaves_rebuilds_dicts_with_sorted_keys_like_jax():
    result = map_leaves(lambda leaf: leaf * 10, {"b": 1, "a": 2, "c": 3})
    assert list(result.items()) == [("a", 20), ("b", 10), ("c", 30)]


def test_map_leaves_keeps_insertion_order_for_keys_that_do_not_sort():
    result = map_leaves(lambda leaf: leaf, {"b": 1, 2: 2})
    assert list(result) == ["b", 2]


def test_map_leaves_keeps_an_ordered_dicts_own_key_order():
    result = map_leaves(lambda leaf: leaf + 1, collections.OrderedDict(b=1, a=2))
    assert type(result) is collections.OrderedDict
    assert list(result.items()) == [("b", 2), ("a", 3)]


def test_map_leaves_rebuilds_a_defaultdict_with_its_factory_and_sorted_keys():
    result = map_leaves(lambda leaf: leaf, collections.defaultdict(list, b=1, a=2))
    assert type(result) is collections.defaultdict
    assert result.default_factory is list
    assert list(result) == ["a", "b"]


def test_map_leaves_keeps_lists_tuples_and_namedtuples():
    result = map_leaves(lambda leaf: -leaf, [1, (2, Point(3, 4))])
    assert result == [-1, (-2, Point(-3, -4))]
    assert type(result[1][1]) is Point


def test_map_leaves_treats_none_as_an_empty_subtree():
    calls = []
    result = map_leaves(calls.append, {"a": None, "b": [None]})
    assert result == {"a": None, "b": [None]}
    assert calls == []


@pytest.mark.parametrize(
    "leaf",
    [DictSubclass(a=1), "text", b"bytes", np.zeros(3), np.int64(1), 1.5, range(3)],
    ids=["dict-subclass", "str", "bytes", "array", "numpy-scalar", "float", "range"],
)
def test_anything_that_is_not_a_registered_container_is_a_leaf(leaf):
    assert map_leaves(lambda value: "leaf", leaf) == "leaf"


def test_keeping_order_rebuilds_dicts_and_defaultdicts_in_insertion_order():
    tree = {"b": 1, "a": collections.defaultdict(list, z=2, y=3)}
    result = map_leaves_keeping_order(lambda leaf: leaf * 10, tree)
    assert list(result) == ["b", "a"]
    assert type(result["a"]) is collections.defaultdict
    assert result["a"].default_factory is list
    assert list(result["a"].items()) == [("z", 20), ("y", 30)]


def test_keeping_order_with_the_identity_gives_back_the_same_containers():
    tree = [
        collections.OrderedDict(b=None, a=(1, Point(2, [3]))),
        {"y": {"k": 0}, "x": DictSubclass(q=1)},
    ]
    result = map_leaves_keeping_order(lambda leaf: leaf, tree)
    assert result == tree
    assert type(result[0]) is collections.OrderedDict and list(result[0]) == ["b", "a"]
    assert type(result[0]["a"][1]) is Point
    assert list(result[1]) == ["y", "x"]
    assert result[1]["x"] is tree[1]["x"]  # a dict subclass is a leaf: passed on whole


def test_keeping_order_never_passes_none_to_the_leaf_function():
    calls = []
    assert map_leaves_keeping_order(calls.append, {"a": None, "b": [None]}) == {
        "a": None,
        "b": [None],
    }
    assert calls == []


def test_leaves_with_paths_lists_every_leaf_with_its_path_in_the_trees_own_order():
    tree = {"z": [10, None, Point(x=11, y=DictSubclass(a=1))], "a": 12}
    assert leaves_with_paths(tree) == [
        (("z", 0), 10),
        (("z", 2, 0), 11),
        (("z", 2, 1), DictSubclass(a=1)),
        (("a",), 12),
    ]
    assert leaves_with_paths(5) == [((), 5)]


def test_map_together_passes_the_corresponding_leaves_of_every_tree():
    trees = [{"a": 1, "b": (2, 3)}, {"b": (20, 30), "a": 10}]
    assert map_together(list, trees) == {"a": [1, 10], "b": ([2, 20], [3, 30])}


def test_map_together_takes_whatever_is_under_a_leaf_of_the_first_tree():
    # JAX's prefix rule: the first tree's leaf position receives the other trees' subtrees whole.
    assert map_together(list, [1, (2, 3), {"x": None}]) == [1, (2, 3), {"x": None}]


@pytest.mark.parametrize(
    "trees, position, path, reason",
    [
        ([(1, 2), [1, 2]], 1, (), "a list where element 0 has a tuple"),
        (
            [{"a": 1}, {"a": 1}, {"a": 1, "b": 2}],
            2,
            (),
            "2 keys where element 0 has 1 (extra ['b'])",
        ),
        ([{"a": 1}, {"b": 1}], 1, (), "no key 'a' (missing ['a'], extra ['b'])"),
        ([[1, [2]], [1, [2, 3]]], 1, (1,), "2 items where element 0 has 1"),
        ([{"k": None}, {"k": 0}], 1, ("k",), "an int where element 0 has None"),
        ([{"k": {}}, {"k": None}], 1, ("k",), "None where element 0 has a dict"),
        ([Point(1, 2), (1, 2)], 1, (), "a tuple where element 0 has a Point"),
        (
            [collections.OrderedDict(a=1, b=2), collections.OrderedDict(b=2, a=1)],
            1,
            (),
            "OrderedDict keys ['b', 'a'] where element 0 has ['a', 'b']",
        ),
        (
            [collections.defaultdict(int, a=1), collections.defaultdict(list, a=1)],
            1,
            (),
            "default_factory <class 'list'> where element 0 has <class 'int'>",
        ),
    ],
    ids=[
        "list-vs-tuple",
        "extra-key",
        "other-key",
        "nested-length",
        "value-vs-none",
        "none-vs-dict",
        "tuple-vs-namedtuple",
        "ordered-dict-key-order",
        "defaultdict-factory",
    ],
)
def test_map_together_names_the_first_tree_and_path_that_differ(trees, position, path, reason):
    with pytest.raises(StructureMismatch) as caught:
        map_together(list, trees)
    assert (caught.value.position, caught.value.path, caught.value.reason) == (
        position,
        path,
        reason,
    )
    assert isinstance(caught.value, ValueError)


def test_a_mismatch_raised_by_the_leaf_function_gets_the_leafs_path():
    def refuse(leaves):
        raise StructureMismatch(1, (), "refused")

    with pytest.raises(StructureMismatch) as caught:
        map_together(refuse, [{"a": [0, 1]}, {"a": [0, 1]}])
    assert str(caught.value) == "element 1 at ['a'][0]: refused"


@pytest.mark.parametrize(
    "tree, with_dtypes, without_dtypes",
    [
        (np.zeros((2, 3), np.float32), "float32[2, 3]", "array[2, 3]"),
        (np.int64(1), "int64[]", "array[]"),
        ({"b": 1, "a": "s"}, "{'a': str, 'b': int}", "{'a': str, 'b': int}"),
        ((1,), "(int,)", "(int,)"),
        ([None, 1.0], "[None, float]", "[None, float]"),
        (Point(1, np.zeros(2)), "Point(x=int, y=float64[2])", "Point(x=int, y=array[2])"),
        (collections.OrderedDict(b=1, a=2), "OrderedDict({'b': int, 'a': int})", None),
        (collections.defaultdict(int, b=1, a=2), "defaultdict({'a': int, 'b': int})", None),
    ],
    ids=[
        "array",
        "numpy-scalar",
        "dict",
        "one-tuple",
        "list",
        "namedtuple",
        "ordered-dict",
        "defaultdict",
    ],
)
def test_describe_draws_the_structure_in_batching_order(tree, with_dtypes, without_dtypes):
    assert describe(tree) == with_dtypes
    assert describe(tree, dtypes=False) == (without_dtypes or with_dtypes)


@pytest.mark.parametrize(
    "path, text",
    [((), "root"), (("image", 0), "['image'][0]"), ((1, "a"), "[1]['a']")],
    ids=["root", "key-then-index", "index-then-key"],
)
def test_format_path_writes_the_indexing_that_reaches_a_node(path, text):
    assert format_path(path) == text
