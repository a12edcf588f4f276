"""``Batch``, the batching operation, and ``make_batch``, Grain's default way to combine elements.

``make_batch`` gives the same arrays as Grain 0.2.18's default batch function (values, dtypes,
shapes, container types and dict key order), which stacks each leaf with ``np.stack`` under
``jax.tree_util.tree_map`` rules (see :mod:`grainlite.tree`). It is several times
faster: it walks the containers once for the whole batch and stacks the common leaves (arrays of
one type, Python and NumPy scalars, strings) without ``np.stack``'s per-element overhead. With an
``allocate`` callback it writes each batch leaf straight into memory the caller provides, so a
worker fills shared memory once instead of building a batch and then copying it.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grainlite.checks import int_option
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.tree import StructureMismatch, describe, format_path, map_together
from grainlite.tree import map_leaves as _map_leaves

Allocator = Callable[[tuple[int, ...], np.dtype], np.ndarray]
"""``allocate(shape, dtype)`` returns an empty, writable array of exactly that shape and dtype."""

# The dtype np.stack gives a list of Python scalars of one exact type (ints beyond int64 excepted).
_PYTHON_SCALAR_DTYPES: dict[type, np.dtype | None] = {
    bool: np.dtype(np.bool_),
    int: np.dtype(np.int64),
    float: np.dtype(np.float64),
    complex: np.dtype(np.complex128),
    str: None,  # np.array picks "<U<longest>", as np.stack does
    bytes: None,  # "|S<longest>"
}
_add_batch_axis = operator.itemgetter(np.newaxis)  # x[np.newaxis], the step np.stack takes
_get_shape = operator.attrgetter("shape")
MAX_LISTED_POSITIONS = 10  # how many mismatched positions an error message lists


def validate_batch_size(batch_size: Any) -> int:
    """Returns ``batch_size`` as an int, or raises the error Grain users expect for it.

    Raises:
      GrainliteTypeError: not an integer (bools are rejected too).
      GrainliteValueError: zero or negative, with Grain's text "batch_size must be positive.".
    """
    return int_option(
        batch_size,
        1,
        wrong_type="batch_size must be an int, got {value} of type {type}; pass a positive "
        "integer such as Batch(batch_size=32).",
        too_small="batch_size must be positive. Got batch_size={value}; pass Batch(batch_size=N) "
        "with N >= 1.",
    )


@dataclasses.dataclass(frozen=True)
class Batch:
    """Combines ``batch_size`` consecutive elements of one worker into a batch.

    Attributes:
      batch_size: elements per batch; a positive int.
      drop_remainder: whether the last, smaller batch of each worker is dropped (Grain's default,
        False, keeps it).
      batch_fn: turns the list of elements into the batch; None uses :func:`make_batch`, which
        stacks every leaf along a new first axis.
    """

    batch_size: int
    drop_remainder: bool = False
    batch_fn: Callable[[Sequence[Any]], Any] | None = None

    def __post_init__(self) -> None:
        # Grain checks batch_size only when the DataLoader is built; here a mistake surfaces
        # where it is made, with the same exception type and text.
        object.__setattr__(self, "batch_size", validate_batch_size(self.batch_size))
        if not isinstance(self.drop_remainder, bool | np.bool_):
            raise GrainliteTypeError(
                f"drop_remainder must be a bool, got {self.drop_remainder!r} of type "
                f"{type(self.drop_remainder).__name__}; pass True or False."
            )
        if self.batch_fn is not None and not callable(self.batch_fn):
            raise GrainliteTypeError(
                f"batch_fn must be callable or None, got {self.batch_fn!r} of type "
                f"{type(self.batch_fn).__name__}; pass a function from the list of elements to "
                "the batch, or None to stack them with make_batch."
            )


def make_batch(values: Sequence[Any], allocate: Allocator | None = None) -> Any:
    """Stacks same-structured elements leaf by leaf along a new first axis, as Grain does.

    Args:
      values: the elements: pytrees of the same structure (dicts, lists, tuples, namedtuples,
        None, with arrays, scalars or strings as leaves).
      allocate: optional ``allocate(shape, dtype)``; every batch leaf whose dtype is not object and
        whose size is not zero is written into an array it returns instead of a new one.
        Zero-size leaves are never allocated, since a shared memory segment cannot be empty.

    Returns:
      One tree of the elements' structure whose leaves have a new first axis of length
      ``len(values)``: ``np.stack`` of the leaves, or ``np.expand_dims(leaf, 0)`` for a single
      element. Python scalars and strings become arrays; dict keys come back sorted.

    Raises:
      GrainliteValueError: ``values`` is empty, or the elements differ in structure or leaf shape;
        the message names the positions that differ and their structures.
    """
    if type(values) is not list:
        values = list(values)
    if not values:
        raise GrainliteValueError(
            "Cannot batch 0 values: make_batch got an empty sequence; pass at least one element."
        )
    if len(values) == 1:
        return _map_leaves(lambda leaf: _expand(leaf, allocate), values[0])
    try:
        return map_together(lambda leaves: _stack(leaves, allocate), values)
    except StructureMismatch as mismatch:
        raise GrainliteValueError(_mismatch_message(values, mismatch)) from mismatch


def _shareable(array: np.ndarray) -> bool:
    return not array.dtype.hasobject and array.size > 0


def _expand(leaf: Any, allocate: Allocator | None) -> Any:
    if allocate is None:
        return np.expand_dims(leaf, 0)
    array = np.asanyarray(leaf)
    if not _shareable(array):
        return np.expand_dims(array, 0)
    buffer = allocate((1, *array.shape), array.dtype)
    buffer[0] = array
    return buffer


def _stack(leaves: list[Any], allocate: Allocator | None) -> np.ndarray:
    """``np.stack(leaves)``, faster for the common leaf types and optionally into ``allocate``."""
    first = leaves[0]
    kind = type(first)
    one_type = list(map(type, leaves)).count(kind) == len(leaves)
    out = None
    if allocate is not None and one_type and kind is np.ndarray:
        dtypes = {leaf.dtype for leaf in leaves}
        if len(dtypes) == 1 and _shareable(first):
            out = allocate((len(leaves), *first.shape), first.dtype)
    try:
        stacked = _stack_values(leaves, kind if one_type else None, out)
    except ValueError as error:  # numpy: shapes differ
        raise _shape_mismatch(leaves, error) from error
    if allocate is None or stacked is out or not _shareable(stacked):
        return stacked
    buffer = allocate(stacked.shape, stacked.dtype)
    buffer[...] = stacked
    return buffer


def _stack_values(leaves: list[Any], kind: type | None, out: np.ndarray | None) -> np.ndarray:
    if kind is np.ndarray:
        shape = leaves[0].shape
        if shape and list(map(_get_shape, leaves)).count(shape) == len(leaves):
            # Joining along the existing first axis, then splitting it, skips a view per leaf.
            if out is None:
                return np.concatenate(leaves).reshape(len(leaves), *shape)
            if out.flags.c_contiguous:  # so the reshape below is a view of ``out``
                np.concatenate(leaves, out=out.reshape(-1, *shape[1:]))
                return out
        # np.stack is exactly this after converting and checking each leaf, which costs more.
        return np.concatenate(list(map(_add_batch_axis, leaves)), out=out)
    if kind in _PYTHON_SCALAR_DTYPES:
        try:
            return np.array(leaves, dtype=_PYTHON_SCALAR_DTYPES[kind])
        except OverflowError:  # an int beyond int64; np.stack promotes it its own way
            return np.stack(leaves)
    if kind is not None and issubclass(kind, np.generic) and leaves[0].dtype.kind in "biufc":
        # One numeric NumPy scalar type means one dtype (datetimes and strings carry units or
        # widths, so they take np.stack below).
        return np.array(leaves, dtype=leaves[0].dtype)
    return np.stack(leaves)


def _shape_mismatch(leaves: list[Any], error: ValueError) -> StructureMismatch:
    def shape(leaf: Any) -> tuple[int, ...] | None:
        try:
            return np.shape(leaf)
        except ValueError:  # a ragged nested list
            return None

    first = shape(leaves[0])
    for position, leaf in enumerate(leaves):
        if shape(leaf) != first:
            found = "a ragged leaf" if shape(leaf) is None else f"a leaf of shape {shape(leaf)}"
            return StructureMismatch(position, (), f"{found} where element 0 has shape {first}")
    return StructureMismatch(None, (), f"numpy could not stack them ({error})")


def structure_outliers(values: Sequence[Any]) -> list[int]:
    """The positions of the values whose tree structure differs from that of ``values[0]``."""
    keys = [describe(value, dtypes=False) for value in values]
    return [position for position, key in enumerate(keys) if key != keys[0]]


def _mismatch_message(values: list[Any], mismatch: StructureMismatch) -> str:
    odd = structure_outliers(values)
    head = "Expected all input elements to have the same structure but got: "
    if odd:
        listed = odd[:MAX_LISTED_POSITIONS]
        more = f" (and {len(odd) - len(listed)} more)" if len(odd) > len(listed) else ""
        if len(odd) == 1:
            others = f"the element at position {odd[0]} has structure {describe(values[odd[0]])}"
        else:
            structures = ", ".join(describe(values[position]) for position in listed)
            others = f"the elements at positions {listed}{more} have structures [{structures}]"
        body = (
            f"the element at position 0 has structure {describe(values[0])}, while {others}. "
            f"First difference: {mismatch}."
        )
    else:
        body = (
            f"all {len(values)} elements have structure {describe(values[0])}, but their leaves "
            f"at {format_path(mismatch.path)} could not be stacked: {mismatch.reason}."
        )
    fix = (
        " Make every element the same pytree with leaves of equal shape (pad or crop them in a "
        "transform), or pass Batch(batch_size, batch_fn=...) to combine them yourself."
    )
    return head + body + fix
