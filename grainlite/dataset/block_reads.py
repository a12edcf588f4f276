"""What a read of a block of elements becomes when it raises: each element read again alone,
so the error belongs to one of them.

A read that raises an ``Exception`` is read again element by element (:func:`read_block`), so
the error belongs to one element: the block reader
(:meth:`~grainlite.dataset.read_ahead.BlockReader.next_block`) hands out the good elements
before it, then raises :class:`ElementReadError` for it (one index), then goes on after it. The
elements before a failure in its block are thus made twice (their transformations run again);
none is delivered twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class ElementReadError(Exception):
    """Reading the element at ``index`` raised ``error`` (raised by the block reader at that
    element's place; the reader goes on after it)."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(index, error)
        self.index, self.error = index, error


class FailedElement:
    """The place of an element whose read raised, in a block read element by element."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class FailedBlock(list):  # type: ignore[type-arg]
    """A block read element by element after a failure: holds :class:`FailedElement` places."""


def timed_read_block(
    getitems: Callable[[Any], list[Any]], indices: range
) -> tuple[list[Any], float, float]:
    """:func:`read_block` in a reader thread, with its wall and CPU time in seconds."""
    begin, cpu_begin = time.perf_counter(), time.thread_time()
    block = read_block(getitems, indices)
    return block, time.perf_counter() - begin, time.thread_time() - cpu_begin


def read_block(getitems: Callable[[Any], list[Any]], indices: range) -> list[Any]:
    """``getitems(indices)``; if it raises an ``Exception``, each index read on its own, an
    element whose read raises held as a :class:`FailedElement` place (a :class:`FailedBlock`)."""
    try:
        return getitems(indices)
    except Exception as error:
        if len(indices) == 1:
            return FailedBlock([FailedElement(error)])
    block = FailedBlock()
    for index in indices:
        try:
            block.extend(getitems(range(index, index + 1)))
        except Exception as error:
            block.append(FailedElement(error))
    return block
