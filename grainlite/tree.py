"""Pytree walking for batching and for the worker transport: JAX's container rules, no JAX needed.

Grain batches with ``jax.tree_util.tree_map`` when JAX is installed, so grainlite follows JAX's
pytree rules to produce the same batches. These rules decide what is a container, everywhere in
grainlite:

* the containers are ``dict``, ``collections.OrderedDict``, ``collections.defaultdict``, ``list``,
  ``tuple`` and namedtuples, matched by *exact* type (a dict subclass is a leaf, as in JAX);
* ``None`` is an empty subtree: it stays ``None`` and is never passed to the leaf function;
* everything else is a leaf.

Two orders of walking the same containers:

* **JAX's order** (:func:`map_leaves`, :func:`map_together`, :func:`describe`), used for batches: a
  ``dict`` or ``defaultdict`` is rebuilt with its keys **sorted** (keys that cannot be sorted keep
  their insertion order, where JAX raises); an ``OrderedDict`` keeps its own key order.
* **The element's own order** (:func:`map_leaves_keeping_order`, :func:`leaves_with_paths`), used
  to move elements between processes: every container comes back as it was (type, key order,
  ``default_factory``), so an element crosses to the parent unchanged.

When several trees are mapped together, the first one gives the structure: where it has a leaf, the
other trees may hold anything (JAX's "prefix" rule), and elsewhere they must match it exactly.
"""

from __future__ import annotations

import collections
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

_OrderedDict = collections.OrderedDict
_defaultdict = collections.defaultdict


class StructureMismatch(ValueError):
    """Trees mapped together differ in structure.

    Attributes:
      position: index (into the sequence of trees) of the first tree that differs from tree 0, or
        None when no single tree is to blame.
      path: the keys and indices leading from the root to the node where they differ.
      reason: what differs, in words.
    """

    def __init__(self, position: int | None, path: tuple[Any, ...], reason: str) -> None:
        super().__init__(position, path, reason)
        self.position = position
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        where = "an element" if self.position is None else f"element {self.position}"
        return f"{where} at {format_path(self.path)}: {self.reason}"


def format_path(path: tuple[Any, ...]) -> str:
    """Writes a path as the indexing that reaches it, e.g. ``['image'][0]``, or ``root``."""
    return "".join(f"[{key!r}]" for key in path) or "root"


def is_namedtuple(value: Any) -> bool:
    """True for namedtuple instances (a tuple whose type has ``_fields``), the test JAX uses."""
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def sorted_keys(mapping: dict[Any, Any]) -> list[Any]:
    """The keys of a ``dict`` in JAX's order: sorted, or insertion order when they do not sort."""
    try:
        return sorted(mapping)
    except TypeError:  # e.g. str and int keys mixed; JAX raises here, grainlite keeps going
        return list(mapping)


def map_leaves(fn: Callable[[Any], Any], tree: Any) -> Any:
    """Applies ``fn`` to every leaf of ``tree`` and rebuilds the containers in JAX's order.

    Args:
      fn: called once per leaf.
      tree: a pytree (see the module docstring for what counts as a container).

    Returns:
      A tree of the same structure; dicts and defaultdicts come back with sorted keys, ``None``
      stays ``None``.
    """
    return _rebuild(fn, tree, sorted_keys, None)


def map_leaves_keeping_order(fn: Callable[[Any], Any], tree: Any) -> Any:
    """Applies ``fn`` to every leaf of ``tree`` and rebuilds every container exactly as it was.

    Unlike :func:`map_leaves`, dicts keep their insertion order, so applying the identity gives an
    equal tree with the same container types, key order and ``default_factory`` values.

    Args:
      fn: called once per leaf.
      tree: a pytree (see the module docstring for what counts as a container).

    Returns:
      A tree of the same structure and key order, holding ``fn``'s results as leaves.
    """
    return _rebuild(fn, tree, _insertion_order, None)


def leaves_with_paths(tree: Any) -> list[tuple[tuple[Any, ...], Any]]:
    """Every leaf of ``tree`` with the keys and indices that reach it, in the tree's own order."""
    found: list[tuple[tuple[Any, ...], Any]] = []
    _rebuild(lambda path, leaf: found.append((path, leaf)), tree, _insertion_order, ())
    return found


def _insertion_order(mapping: dict[Any, Any]) -> dict[Any, Any]:
    return mapping


def _rebuild(
    fn: Callable[..., Any],
    tree: Any,
    order: Callable[[dict[Any, Any]], Iterable[Any]],
    path: tuple[Any, ...] | None,
) -> Any:
    """The one walker: rebuilds the containers of ``tree`` around ``fn``'s results for its leaves.

    Args:
      fn: ``fn(leaf)``, or ``fn(path, leaf)`` when ``path`` is given.
      tree: the (sub)tree to walk.
      order: gives the keys of a ``dict`` or ``defaultdict`` in the order to rebuild them; an
        ``OrderedDict`` always keeps its own order, since its order is part of its value.
      path: the keys and indices from the root to ``tree``, or None to not track paths (the
        common case, which then costs nothing per node).
    """
    kind = type(tree)
    if kind is dict:
        return {
            key: _rebuild(fn, tree[key], order, None if path is None else (*path, key))
            for key in order(tree)
        }
    if kind is list or kind is tuple:
        children = [
            _rebuild(fn, child, order, None if path is None else (*path, i))
            for i, child in enumerate(tree)
        ]
        return children if kind is list else tuple(children)
    if tree is None:
        return None
    if kind is _OrderedDict:
        return _OrderedDict(
            (key, _rebuild(fn, child, order, None if path is None else (*path, key)))
            for key, child in tree.items()
        )
    if kind is _defaultdict:
        mapped = {
            key: _rebuild(fn, tree[key], order, None if path is None else (*path, key))
            for key in order(tree)
        }
        return _defaultdict(tree.default_factory, mapped)
    if is_namedtuple(tree):
        return kind(
            *(
                _rebuild(fn, child, order, None if path is None else (*path, i))
                for i, child in enumerate(tree)
            )
        )
    return fn(tree) if path is None else fn(path, tree)


def map_together(fn: Callable[[list[Any]], Any], trees: Sequence[Any]) -> Any:
    """Applies ``fn`` to the list of corresponding leaves of all ``trees`` (at least one).

    ``fn`` receives one list per leaf position of ``trees[0]``, holding that leaf from every tree in
    order. Walking the containers once for all trees (instead of flattening each tree) keeps a
    batch of many small elements cheap.

    Raises:
      StructureMismatch: where a tree's container differs from ``trees[0]``'s (type, length, keys),
        or when ``fn`` raises it about a leaf (its path is then completed here).
    """
    return _map_together(fn, trees if type(trees) is list else list(trees), ())


def _map_together(fn: Callable[[list[Any]], Any], trees: list[Any], path: tuple[Any, ...]) -> Any:
    first = trees[0]
    kind = type(first)
    if kind is dict or kind is _defaultdict or kind is _OrderedDict:
        _check_types(trees, kind, path)
        _check_lengths(trees, path)
        if kind is _OrderedDict:
            keys = list(first)
            _check_same_key_order(trees, keys, path)
        else:
            keys = sorted_keys(first)
        if kind is _defaultdict:
            _check_default_factories(trees, path)
        mapped = {key: _map_together(fn, _gather(trees, key, path), (*path, key)) for key in keys}
        if kind is dict:
            return mapped
        if kind is _defaultdict:
            return _defaultdict(first.default_factory, mapped)
        return _OrderedDict(mapped)
    if kind is list or kind is tuple or is_namedtuple(first):
        _check_types(trees, kind, path)
        _check_lengths(trees, path)
        children = [
            _map_together(fn, list(map(operator.itemgetter(index), trees)), (*path, index))
            for index in range(len(first))
        ]
        if kind is list:
            return children
        if kind is tuple:
            return tuple(children)
        return kind(*children)
    if first is None:
        for position, tree in enumerate(trees):
            if tree is not None:
                raise StructureMismatch(
                    position, path, f"{_kind_name(tree)} where element 0 has None"
                )
        return None
    try:
        return fn(trees)
    except StructureMismatch as error:  # raised by fn about its leaves: say where they are
        error.path = path + error.path
        raise


def _kind_name(value: Any) -> str:
    if value is None:
        return "None"
    return _a(type(value).__name__)


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _check_types(trees: list[Any], kind: type, path: tuple[Any, ...]) -> None:
    if list(map(type, trees)).count(kind) != len(trees):
        for position, tree in enumerate(trees):
            if type(tree) is not kind:
                raise StructureMismatch(
                    position, path, f"{_kind_name(tree)} where element 0 has {_a(kind.__name__)}"
                )


def _check_lengths(trees: list[Any], path: tuple[Any, ...]) -> None:
    length = len(trees[0])
    if list(map(len, trees)).count(length) != len(trees):
        for position, tree in enumerate(trees):
            if len(tree) != length:
                noun = "key" if isinstance(tree, dict) else "item"
                raise StructureMismatch(
                    position,
                    path,
                    f"{_count(len(tree), noun)} where element 0 has {length}"
                    + _key_difference(trees[0], tree),
                )


def _key_difference(first: Any, other: Any) -> str:
    if not isinstance(first, dict):
        return ""
    missing = [key for key in first if key not in other]
    extra = [key for key in other if key not in first]
    parts = [f"missing {missing}"] * bool(missing) + [f"extra {extra}"] * bool(extra)
    return f" ({', '.join(parts)})" if parts else ""


def _check_same_key_order(trees: list[Any], keys: list[Any], path: tuple[Any, ...]) -> None:
    for position, tree in enumerate(trees):
        if list(tree) != keys:
            raise StructureMismatch(
                position, path, f"OrderedDict keys {list(tree)} where element 0 has {keys}"
            )


def _check_default_factories(trees: list[Any], path: tuple[Any, ...]) -> None:
    factory = trees[0].default_factory
    for position, tree in enumerate(trees):
        if tree.default_factory != factory:
            raise StructureMismatch(
                position,
                path,
                f"default_factory {tree.default_factory!r} where element 0 has {factory!r}",
            )


def _gather(trees: list[Any], key: Any, path: tuple[Any, ...]) -> list[Any]:
    try:
        return list(map(operator.itemgetter(key), trees))
    except KeyError:
        for position, tree in enumerate(trees):
            if key not in tree:
                raise StructureMismatch(
                    position, path, f"no key {key!r}" + _key_difference(trees[0], tree)
                ) from None
        raise


def describe(tree: Any, *, dtypes: bool = True) -> str:
    """A one-line picture of a tree's structure for error messages, e.g. ``{'x': int64[2, 3]}``.

    Args:
      tree: any pytree.
      dtypes: whether array leaves show their dtype (``float32[2]``) or only their shape
        (``array[2]``). Comparing descriptions without dtypes finds the elements that cannot be
        stacked, since differing dtypes are promoted but differing shapes are an error.

    Returns:
      Containers written as Python literals in the order batching uses; arrays and NumPy scalars as
      ``dtype[shape]``; other leaves by type name; ``None`` as ``None``.
    """
    kind = type(tree)
    if kind is dict or kind is _defaultdict:
        body = ", ".join(f"{k!r}: {describe(tree[k], dtypes=dtypes)}" for k in sorted_keys(tree))
        return f"{{{body}}}" if kind is dict else f"defaultdict({{{body}}})"
    if kind is _OrderedDict:
        body = ", ".join(f"{k!r}: {describe(v, dtypes=dtypes)}" for k, v in tree.items())
        return f"OrderedDict({{{body}}})"
    if kind is list:
        return "[" + ", ".join(describe(child, dtypes=dtypes) for child in tree) + "]"
    if kind is tuple:
        body = ", ".join(describe(child, dtypes=dtypes) for child in tree)
        return f"({body},)" if len(tree) == 1 else f"({body})"
    if is_namedtuple(tree):
        fields = ", ".join(
            f"{name}={describe(child, dtypes=dtypes)}"
            for name, child in zip(kind._fields, tree)  # type: ignore[attr-defined]
        )
        return f"{kind.__name__}({fields})"
    if tree is None:
        return "None"
    if isinstance(tree, np.ndarray | np.generic):
        shape = ", ".join(map(str, np.shape(tree)))
        return f"{tree.dtype if dtypes else 'array'}[{shape}]"
    return kind.__name__
