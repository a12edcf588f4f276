"""Grain's ``get_element_spec``: the shape and dtype of a dataset's elements, without reading any.

The spec is a tree of :class:`ShapeDtypeStruct` of the element's structure. Each node answers from
its parent's spec by Grain's rules:

* ``MapDataset.range`` gives ``ShapeDtypeStruct((), int64)``; other sources raise
  ``NotImplementedError`` (their records are not known without reading one), as in Grain;
* ``map``, ``random_map`` and ``map_with_index`` call the transform's
  ``output_spec(input_spec)`` and raise ``ValueError`` when it has none;
* ``batch`` adds a first axis (``batch_size`` with ``drop_remainder=True``, else ``None``), or
  calls a custom ``batch_fn``'s ``output_spec(input_spec, batch_size, drop_remainder)``;
* ``RebatchIterDataset`` replaces the first axis with its ``batch_size``, with or without
  ``drop_remainder`` (as Grain does: only the last batch can be shorter);
* ``zip`` gives the tuple of its parents' specs; ``mix``, ``concatenate`` and selection give
  the first parent's;
* the nodes that only reorder, repeat, cut, prefetch, cache or filter give their parent's.

Every node answers through its ``_element_spec`` property, as in Grain: grainlite's nodes set
it to one of the rules of this module (``_element_spec = property(first_parent_spec)``...), a
user's node defines its own; a node without one raises ``NotImplementedError``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import numpy as np

from grainlite.errors import (
    ElementSpecNotKnownError,
    MissingOutputSpecError,
)


@runtime_checkable
class ShapeDtypeStructProtocol(Protocol):
    """Anything with a ``shape`` and a ``dtype`` (``jax.ShapeDtypeStruct`` qualifies)."""

    @property
    def shape(self) -> tuple[int | None, ...]: ...

    @property
    def dtype(self) -> Any: ...


@dataclasses.dataclass(frozen=True)
class ShapeDtypeStruct:
    """A shape (``None`` for an axis whose length varies) and a dtype."""

    shape: tuple[int | None, ...]
    dtype: Any


def _map_leaves(fn: Any, spec: Any) -> Any:
    if isinstance(spec, ShapeDtypeStructProtocol):
        return fn(spec)
    if isinstance(spec, dict):
        return {key: _map_leaves(fn, value) for key, value in spec.items()}
    if isinstance(spec, tuple) and hasattr(spec, "_fields"):
        return type(spec)(*(_map_leaves(fn, value) for value in spec))
    if isinstance(spec, list | tuple):
        return type(spec)(_map_leaves(fn, value) for value in spec)
    return fn(spec)


def _transform_name(transform: Any) -> str:
    return getattr(transform, "__name__", None) or type(transform).__name__


def get_element_spec(ds: Any) -> Any:
    """The spec (a tree of ``ShapeDtypeStruct``) of ``ds``'s elements; reads no data.

    Asks the node's ``_element_spec`` (grainlite's nodes: one of the rules below). Raises
    ``NotImplementedError`` for a node whose spec needs data (a source other than ``range``, a
    flat map, packing) and ``ValueError`` for a map whose transform has no ``output_spec``.
    """
    if getattr(type(ds), "_element_spec", None) is None:
        raise ElementSpecNotKnownError(
            f"`element_spec` inference is not implemented for {type(ds).__name__}: its elements "
            "are not known without reading them."
        )
    return ds._element_spec


def range_spec(ds: Any) -> ShapeDtypeStruct:
    """``MapDataset.range``'s: an int64 scalar."""
    return ShapeDtypeStruct(shape=(), dtype=np.int64)


def first_parent_spec(ds: Any) -> Any:
    """The first parent's spec: a node that reorders, repeats, cuts, prefetches, caches or
    filters its parent's elements, or mixes, concatenates or selects parents like the first."""
    return get_element_spec(ds.parents[0])


def zip_spec(ds: Any) -> tuple[Any, ...]:
    """``zip``'s: the tuple of its parents' specs."""
    return tuple(get_element_spec(parent) for parent in ds.parents)


def map_spec(ds: Any) -> Any:
    """``map``, ``random_map`` and ``map_with_index``: the transform's
    ``output_spec(input_spec)``."""
    transform = ds._transform
    output_spec = getattr(transform, "output_spec", None)
    if output_spec is None:
        name = _transform_name(transform)
        raise MissingOutputSpecError(
            f"Cannot infer element spec for transform {name} because it does not implement "
            f"`output_spec` method. Implement `{name}.output_spec(self, input_spec)` "
            "returning the tree of ShapeDtypeStruct of its output to enable element spec "
            "inference."
        )
    return output_spec(get_element_spec(ds.parents[0]))


def rebatch_spec(ds: Any) -> Any:
    """``RebatchIterDataset``'s: the parent's batches with a new first axis."""
    axis = ds._batch_size
    return _map_leaves(
        lambda s: ShapeDtypeStruct(shape=(axis, *tuple(s.shape)[1:]), dtype=s.dtype),
        get_element_spec(ds.parents[0]),
    )


def batch_spec(ds: Any) -> Any:
    """``batch``'s: a first axis added, or a custom ``batch_fn``'s ``output_spec``."""
    from grainlite.dataset.batch_arguments import stack

    parent_spec = get_element_spec(ds.parents[0])
    batch_fn = ds._batch_fn
    size, drop = ds._batch_size, ds._drop_remainder
    if batch_fn is not stack:
        output_spec = getattr(batch_fn, "output_spec", None)
        if output_spec is None:
            raise MissingOutputSpecError(
                f"Cannot infer element spec for batch_fn {_transform_name(batch_fn)} because it "
                "does not implement `output_spec(input_spec, batch_size, drop_remainder)`."
            )
        return output_spec(parent_spec, size, drop)
    axis = size if drop else None
    return _map_leaves(
        lambda s: ShapeDtypeStruct(shape=(axis, *tuple(s.shape)), dtype=s.dtype), parent_spec
    )
