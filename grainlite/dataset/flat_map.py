"""Grain's FlatMap datasets (``grain.experimental``): one element becomes zero or more elements.

The transform is a ``FlatMapTransform`` (grainlite's or Grain's ``FlatMap``), whose
``flat_map(element)`` returns the pieces (any iterable). The rules, learned by running Grain
0.2.18:

* ``FlatMapMapDataset(parent, transform)`` reserves ``transform.max_fan_out`` slots per parent
  element, so ``len = len(parent) * max_fan_out``, at most ``sys.maxsize`` (Grain's "endless",
  the length after an endless ``repeat()``). Slot ``i`` holds piece ``i % max_fan_out`` of
  parent element ``i // max_fan_out``, or ``None`` when that element has fewer pieces (holes,
  which ``to_iter_dataset`` skips and ``MapDataset.batch`` refuses). An element with more pieces
  than ``max_fan_out`` is a ValueError; a transform without ``max_fan_out`` is an
  AttributeError, one whose ``max_fan_out`` is no integer a TypeError (as in Grain) and one
  below 1 a ValueError. Indices past the end wrap through the parent.
* ``FlatMapIterDataset(parent, transform)`` yields every piece of every element in order;
  ``max_fan_out`` is neither needed nor checked. Its state is
  ``{"parent": <parent state before the element being split>, "next_index_in_buffer": k}``
  (``k`` pieces of that element already returned). Restoring re-reads that element and splits it
  again, so ``flat_map`` must be deterministic.

A block of slots calls ``flat_map`` once per parent element, not once per slot.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from grainlite.checks import int_option, invalid_state, is_int, state_int
from grainlite.dataset._util import as_index, parent_getitems
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.errors import (
    GrainliteTypeError,
    GrainliteValueError,
    MissingFanOutError,
)


def _flat_map_function(transform: Any) -> Any:
    method = getattr(transform, "flat_map", None)
    if isinstance(transform, type) or not callable(method):
        raise GrainliteTypeError(
            f"A FlatMap dataset needs a FlatMapTransform instance with a `flat_map` method (got "
            f"{transform!r} of type {type(transform).__name__}); subclass grain.experimental."
            "FlatMapTransform, define flat_map(element) -> iterable, and pass an instance."
        )
    return method


def _max_fan_out(transform: Any) -> int:
    if not hasattr(transform, "max_fan_out"):
        raise MissingFanOutError(
            f"{type(transform).__name__} has no `max_fan_out`; FlatMapMapDataset reserves that "
            "many slots per element, so set the class attribute, e.g. `max_fan_out = 4`."
        )
    fix = "set it to the most pieces one element can split into."
    owner = type(transform).__name__
    return int_option(
        transform.max_fan_out,
        1,
        wrong_type=f"max_fan_out must be a positive int (got {{value}} on {owner}); {fix}",
        too_small=f"max_fan_out must be a positive int (got {{value}} on {owner}); {fix}",
    )


class FlatMapMapDataset(MapDataset):
    """Random access to the pieces of each element, ``max_fan_out`` slots per element.

    Args:
      parent: the ``MapDataset`` whose elements are split.
      transform: a ``FlatMapTransform`` with ``max_fan_out``.
    """

    leaves_holes = True  # the slots past an element's pieces

    def __init__(self, parent: MapDataset, transform: Any) -> None:
        super().__init__(parent)
        self._transform = transform
        self._flat_map = _flat_map_function(transform)
        self._fan_out = _max_fan_out(transform)

    def __len__(self) -> int:
        return min(sys.maxsize, len(self._parent) * self._fan_out)

    def _pieces(self, element: Any) -> list[Any]:
        pieces = list(self._flat_map(element))
        if len(pieces) > self._fan_out:
            raise GrainliteValueError(
                f"The user-provided FlatMapTransform {type(self._transform).__name__} split an "
                f"element into {len(pieces)} pieces, more than its max_fan_out of "
                f"{self._fan_out}; raise max_fan_out (above 100 it gets slow) or preprocess the "
                "data so that elements split into fewer pieces."
            )
        return pieces

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        element_index, piece = divmod(as_index(index, "FlatMapMapDataset"), self._fan_out)
        element = self._parent[element_index]
        if element is None:
            return None
        pieces = self._pieces(element)
        return pieces[piece] if piece < len(pieces) else None

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        element_indices, piece_indices = np.divmod(
            np.asarray(indices, dtype=np.int64), self._fan_out
        )
        unique, inverse = np.unique(element_indices, return_inverse=True)
        elements = parent_getitems(self._parent)(unique.tolist())
        split = [None if element is None else self._pieces(element) for element in elements]
        out = []
        for position, piece in zip(inverse.reshape(-1).tolist(), piece_indices.tolist()):
            pieces = split[position]
            out.append(pieces[piece] if pieces is not None and piece < len(pieces) else None)
        return out

    def __str__(self) -> str:
        return f"FlatMapMapDataset(transform={type(self._transform).__name__})"


class FlatMapIterDataset(IterDataset):
    """Every piece of every element of the parent stream, in order.

    Args:
      parent: the ``IterDataset`` whose elements are split (a ``MapDataset`` is read through
        ``to_iter_dataset()``).
      transform: a ``FlatMapTransform``.
    """

    def __init__(self, parent: IterDataset, transform: Any) -> None:
        if isinstance(parent, MapDataset):
            parent = parent.to_iter_dataset()
        super().__init__(parent)
        self._transform = transform
        self._flat_map = _flat_map_function(transform)

    def __iter__(self) -> FlatMapDatasetIterator:
        given: Any = getattr(self._transform, "max_fan_out", None)
        # not needed here: only a restored state is checked against it
        fan_out = int(given) if is_int(given) and given >= 1 else None
        return FlatMapDatasetIterator(iter(self._parent), self._flat_map, fan_out)

    def __str__(self) -> str:
        return f"FlatMapIterDataset(transform={type(self._transform).__name__})"


class FlatMapDatasetIterator(DatasetIterator):
    """Splits the parent's elements; state ``{"parent", "next_index_in_buffer"}``."""

    def __init__(
        self, parent: DatasetIterator, flat_map: Any, max_fan_out: int | None = None
    ) -> None:
        super().__init__(parent)
        self._flat_map = flat_map
        self._max_fan_out = max_fan_out  # the transform's, if it declares one
        self._next_parent = parent.__next__
        self._parent_state: Any = None  # the parent before the element in the buffer (None:
        # nothing read yet, so the parent's own state)
        self._buffer: list[Any] = []
        self._position = 0  # pieces of the buffer already returned

    def __next__(self) -> Any:
        position = self._position
        buffer = self._buffer
        while position >= len(buffer):
            self._parent_state = self._parent.get_state()
            buffer = self._buffer = list(self._flat_map(self._next_parent()))
            position = self._position = 0
        self._position = position + 1
        return buffer[position]

    def get_state(self) -> dict[str, Any]:
        """``{"parent": <parent state before the element being split>,
        "next_index_in_buffer": <pieces of it already returned>}``."""
        parent_state = self._parent_state
        if parent_state is None:
            parent_state = self._parent.get_state()
        return {"parent": parent_state, "next_index_in_buffer": self._position}

    def check_state(self, state: dict[str, Any]) -> int:
        """``state``'s ``next_index_in_buffer``, if it is an int from 0 to the transform's
        ``max_fan_out`` (where it declares one); else a ValueError naming the field. Reads
        nothing (``mp_prefetch`` checks a worker's state with it in the parent)."""
        position = state_int(
            state["next_index_in_buffer"], "next_index_in_buffer", _bad_buffer_index, low=0
        )
        fan_out = self._max_fan_out
        if fan_out is not None and position > fan_out:
            raise _bad_buffer_index(
                f"next_index_in_buffer {position} is beyond the transform's max_fan_out {fan_out}"
            )
        check_parent = getattr(self._parent, "check_state", None)
        if callable(check_parent):
            check_parent(state["parent"])
        return position

    def set_state(self, state: dict[str, Any]) -> None:
        """Re-reads the element being split at ``state`` and skips the pieces returned.

        ``next_index_in_buffer`` must be an int from 0 to the transform's ``max_fan_out`` (if it
        declares one) and to the pieces of that element (a state taken at the end of the stream
        has no element): a larger one would skip the element's remaining pieces, so it is a
        ValueError naming the field."""
        position = self.check_state(state)
        parent_state = state["parent"]
        self._parent.set_state(parent_state)
        self._parent_state = parent_state
        try:
            self._buffer = list(self._flat_map(self._next_parent()))
        except StopIteration:
            self._buffer = []  # a state taken at the end: next() ends the stream again
            self._position = position
            return
        if position > len(self._buffer):
            pieces = len(self._buffer)
            self._buffer, self._position = [], 0
            raise _bad_buffer_index(
                f"next_index_in_buffer {position} is beyond the {pieces} pieces of the element it "
                "points into"
            )
        self._position = position


def _bad_buffer_index(what: str) -> GrainliteValueError:
    return invalid_state(
        what,
        "Pass a state returned by get_state() of an iterator over the same pipeline (its "
        "flat_map must be deterministic).",
        subject="Invalid FlatMap iterator state",
    )
