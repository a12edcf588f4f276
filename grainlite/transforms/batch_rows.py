"""Filling a batch row by row: each element is copied into its row as it arrives.

Stacking at the end (:func:`~grainlite.transforms.batch.make_batch`) needs every element of the
batch alive at once, and then the batch beside them: twice the batch in memory. For large elements
(decoded images) that is tens of megabytes per process. :class:`BatchRows` allocates the batch
when its first element comes (in shared memory, in a worker whose Batch is last) and copies each
element into its row at once, so the element can be freed right away.

It takes only the common case, where the result is exactly ``make_batch``'s: elements that are a
plain ``np.ndarray`` or a ``dict`` of arrays and numeric scalars (NumPy's, or Python's ``bool``,
``int``, ``float``, ``complex``), every leaf of the type, dtype and shape of the first element's,
holding at least :data:`MIN_ELEMENT_BYTES`. Anything else (a different key, dtype or
shape midway, another leaf type) hands the rows back as elements (:meth:`BatchRows.elements`)
and the batch is stacked the usual way, errors included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from grainlite.transforms.batch import Allocator
from grainlite.tree import sorted_keys

MIN_ELEMENT_BYTES = 16 * 1024
"""Smaller elements are stacked at the end: one copy per element costs more than it saves."""

# Python scalar types and the dtype make_batch gives a batch of them.
_PYTHON_SCALARS: dict[type, np.dtype] = {
    bool: np.dtype(np.bool_),
    int: np.dtype(np.int64),
    float: np.dtype(np.float64),
    complex: np.dtype(np.complex128),
}


def _dtype(leaf: Any) -> np.dtype:
    dtype = _PYTHON_SCALARS.get(type(leaf))
    return leaf.dtype if dtype is None else dtype


def _leaf(kind: type, row: Any, copy: bool) -> Any:
    """An element's leaf again, from its row: the array (a view or a copy), or the scalar."""
    if kind is np.ndarray:
        return row.copy() if copy else row
    if kind in _PYTHON_SCALARS:
        return row.item()
    return kind(row)


class BatchRows:
    """A batch of rows shaped like one element; ``count`` rows are written."""

    __slots__ = ("buffers", "count", "dtypes", "keys", "order", "shapes", "types")

    def __init__(self, keys: list[Any] | None, leaves: list[Any]) -> None:
        self.keys = keys  # None: the elements are arrays, not dicts
        self.order = None if keys is None else sorted_keys(dict.fromkeys(keys))
        self.types = [type(leaf) for leaf in leaves]
        self.shapes = [np.shape(leaf) for leaf in leaves]
        self.dtypes = [_dtype(leaf) for leaf in leaves]
        self.buffers: list[np.ndarray] = []
        self.count = 0

    @classmethod
    def layout(cls, element: Any) -> BatchRows | None:
        """Rows shaped like ``element``, none allocated yet, or None if it is not a case this
        class takes."""
        if type(element) is np.ndarray:
            keys, leaves = None, [element]
        elif type(element) is dict and element:
            keys, leaves = list(element), list(element.values())
        else:
            return None
        total = 0
        for leaf in leaves:
            kind = type(leaf)
            if kind is np.ndarray:
                if leaf.dtype.hasobject or leaf.size == 0:
                    return None
                total += leaf.nbytes
            elif kind not in _PYTHON_SCALARS and not (
                issubclass(kind, np.generic) and leaf.dtype.kind in "biufc"
            ):
                return None
        if total < MIN_ELEMENT_BYTES:
            return None
        return cls(keys, leaves)

    @classmethod
    def start(cls, element: Any, size: int, allocate: Allocator | None) -> BatchRows | None:
        """A batch of ``size`` rows with ``element`` in row 0, or None if it is not a case
        this class takes."""
        rows = cls.layout(element)
        if rows is None:
            return None
        rows.allocate(size, allocate)
        if not rows.add(element):  # a Python int beyond int64: stacked the usual way
            return None
        return rows

    def allocate(self, size: int, allocate: Allocator | None) -> None:
        """Makes the ``size`` rows: in ``allocate``'s memory, or private if None."""
        make = allocate if allocate is not None else np.empty
        layouts = zip(self.shapes, self.dtypes, strict=True)
        self.buffers = [make((size, *shape), dtype) for shape, dtype in layouts]

    def _leaves(self, element: Any) -> Any:
        """``element``'s leaves in row order if it has this layout, else None."""
        if self.keys is None:
            return (element,) if type(element) is np.ndarray else None
        if type(element) is not dict or len(element) != len(self.types):
            return None
        if list(element) != self.keys:
            return None
        return element.values()

    def _fits(self, leaves: Any) -> bool:
        layouts = zip(self.types, self.shapes, self.dtypes, leaves, strict=True)
        for kind, shape, dtype, leaf in layouts:
            if type(leaf) is not kind:
                return False
            if kind is np.ndarray and (leaf.dtype != dtype or leaf.shape != shape):
                return False
        return True

    def takes_all(self, elements: list[Any]) -> bool:
        """Whether :meth:`add` will write every one of ``elements`` (none is refused, none
        overflows): then filling rows from them later cannot fail."""
        if int in self.types:  # a Python int may not fit int64: only writing it tells
            return False
        for element in elements:
            leaves = self._leaves(element)
            if leaves is None or not self._fits(leaves):
                return False
        return True

    def add(self, element: Any) -> bool:
        """Copies ``element`` into the next row; False (nothing written) if it does not fit."""
        leaves = self._leaves(element)
        if leaves is None:
            return False
        leaves = list(leaves)
        if not self._fits(leaves):
            return False
        row = self.count
        try:
            for buffer, leaf in zip(self.buffers, leaves, strict=True):
                buffer[row] = leaf
        except OverflowError:  # a Python int beyond int64: np.stack decides what it becomes
            return False
        self.count = row + 1
        return True

    def elements(self, copy: bool) -> list[Any]:
        """The elements written so far, rebuilt from their rows: views of the rows, or copies
        (when the batch's memory is about to be given back)."""
        rows = []
        for row in range(self.count):
            leaves = [
                _leaf(kind, buffer[row], copy)
                for kind, buffer in zip(self.types, self.buffers, strict=True)
            ]
            rows.append(
                leaves[0] if self.keys is None else dict(zip(self.keys, leaves, strict=True))
            )
        return rows

    def batch(self) -> Any:
        """The batch of the rows written: ``make_batch`` of those elements."""
        count = self.count
        arrays = [buffer if count == len(buffer) else buffer[:count] for buffer in self.buffers]
        if self.keys is None:
            return arrays[0]
        by_key = dict(zip(self.keys, arrays, strict=True))
        return {key: by_key[key] for key in self.order or ()}


def rows_pay(element: Any) -> bool:
    """Whether a batch of elements like ``element`` is worth filling row by row
    (:class:`BatchRows` takes it): where not, it is stacked at the end, and a batch node may as
    well read its elements in one block (no element made alone, one after the other)."""
    return BatchRows.layout(element) is not None


def batch_as_they_come(
    elements: Iterator[Any],
    size: int,
    allocate: Allocator | None,
    stack: Callable[[list[Any]], Any],
    stacked: Callable[[], None] | None = None,
) -> Any:
    """The batch of ``elements`` (one to ``size`` of them), each copied into its row of
    ``allocate``'s memory (private memory where None) as it comes, so no two are held at once
    (:class:`BatchRows`); ``stack`` of them all where they are not a case :class:`BatchRows`
    takes, as ``make_batch`` would stack them (the rows already filled are handed back as
    elements). ``stacked`` is called where the first element says rows do not pay
    (:func:`rows_pay`).

    An error raised by ``elements`` propagates; the rows allocated for the batch stay with the
    element being made, whose memory the caller gives back with it."""
    first = next(elements)
    rows = BatchRows.layout(first)
    if rows is None:  # rows do not pay for it
        if stacked is not None:
            stacked()
        return stack([first, *elements])
    rows.allocate(size, allocate)
    if not rows.add(first):  # a Python int beyond int64: stacked the usual way
        return stack([first, *elements])
    del first  # in its row: the element can go
    for element in elements:
        if not rows.add(element):
            return stack([*rows.elements(copy=False), element, *elements])
    return rows.batch()
