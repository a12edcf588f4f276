"""Small helpers the Dataset API's nodes share: index checks, wrapped block keys, block reads.

They live here, not in a node module, so a node imports no other node family for them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grainlite.errors import GrainliteTypeError, shown


def as_index(index: Any, node: str) -> int:
    """``index`` as a Python int, or a TypeError naming the node (Grain raises TypeError too)."""
    try:
        return operator.index(index)
    except TypeError:
        raise GrainliteTypeError(
            f"{node} indices must be integers or slices (got {index!r} of type "
            f"{type(index).__name__}); index with an int, e.g. ds[0], or a slice, e.g. ds[2:5]."
        ) from None


def empty_read(node: str, index: Any, what: str) -> ZeroDivisionError:
    """The error for reading ``index`` of an empty node: Grain divides by the length there, so
    a ZeroDivisionError; ``what`` says what is empty and the fix."""
    return ZeroDivisionError(f"{node} index {shown(index)} cannot be read: {what}")


def wrapped_keys(indices: Sequence[int] | np.ndarray, length: int) -> np.ndarray:
    """``indices % length`` as an int64 array (Grain's wrap-around of indices past the end)."""
    try:
        keys = np.asarray(indices, dtype=np.int64).reshape(-1)
    except OverflowError:  # Python ints past int64 (the far end of an endless view)
        return np.array([int(i) % length for i in indices], dtype=np.int64)
    if keys.size and (int(keys.min()) < 0 or int(keys.max()) >= length):
        keys = keys % length
    return keys


def parent_getitems(parent: Any) -> Callable[[Sequence[int]], list[Any]]:
    """``parent._getitems`` where the parent has it (a user's class may not), else a loop."""
    getitems = getattr(parent, "_getitems", None)
    if getitems is not None:
        return getitems  # type: ignore[no-any-return]
    return lambda indices: [parent[i] for i in indices]
