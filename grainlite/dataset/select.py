"""MapDatasets that read several: ``concatenate`` and ``select_from_datasets``.

The rules, learned by running Grain 0.2.18:

* ``MapDataset.concatenate(datasets)`` is each input in turn. ``ds[i]`` past the end (or
  negative) reads the inputs' later (or earlier) epochs: with ``e, p = divmod(i, len(ds))``,
  position ``p`` falls in input ``k`` at local index ``j``, and the read is
  ``datasets[k][e * len(datasets[k]) + j]`` (the same element again for inputs that wrap).
* ``MapDataset.select_from_datasets(datasets, selection_map)`` has ``len(selection_map)``
  elements; ``ds[i]`` reads ``datasets[k][j]`` for ``(k, j) = selection_map[i]``, with ``i``
  passed to the map unchanged (the map decides what indices past its length mean).
* ``MapDataset.mix`` lives in :mod:`grainlite.dataset.mixed_datasets`; it checks and reads its
  inputs with :func:`check_map_datasets` and :func:`gather` from here.

Blocks of indices go through one ``_getitems`` call per input.
"""

from __future__ import annotations

import bisect
import builtins
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index, empty_read, parent_getitems
from grainlite.dataset.map_dataset import MapDataset
from grainlite.errors import (
    GrainliteTypeError,
    SelectionIndexError,
)

__all__ = [
    "ConcatenateMapDataset",
    "SelectionIndexError",
    "SelectionMapDataset",
]


def check_map_datasets(datasets: Any, method: str) -> tuple[MapDataset, ...]:
    if isinstance(datasets, MapDataset | Mapping) or not isinstance(datasets, Sequence):
        raise GrainliteTypeError(
            f"MapDataset.{method} takes a sequence of MapDatasets (got a single object of type "
            f"{type(datasets).__name__}); pass a list such as [ds_a, ds_b]."
        )
    for position, dataset in enumerate(datasets):
        if not isinstance(dataset, MapDataset):
            raise GrainliteTypeError(
                f"MapDataset.{method} got {dataset!r} of type {type(dataset).__name__} at "
                f"position {position}; every input must be a MapDataset (an IterDataset mixes "
                "with IterDataset.mix)."
            )
    return tuple(datasets)


def gather(which: np.ndarray, inner: np.ndarray, parents: Sequence[Any]) -> list[Any]:
    """``[parents[which[n]][inner[n]] for n ...]`` with one ``_getitems`` call per parent."""
    if not which.size:
        return []
    first = int(which[0])
    if (which == first).all():  # the common case for a block of a concatenation
        return list(parent_getitems(parents[first])(inner.tolist()))
    order = np.argsort(which, kind="stable")
    grouped = which[order]
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]).tolist()
    gathered: list[Any] = []
    for start, stop in zip(starts, [*starts[1:], len(order)]):
        read = parent_getitems(parents[int(grouped[start])])
        gathered.extend(read(inner[order[start:stop]].tolist()))
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return list(map(gathered.__getitem__, inverse.tolist()))


class ConcatenateMapDataset(MapDataset):
    """``MapDataset.concatenate``: the elements of each input in turn.

    Args:
      datasets: the ``MapDataset`` inputs (empty ones contribute nothing).
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, datasets: Sequence[MapDataset]) -> None:
        super().__init__(check_map_datasets(datasets, "concatenate"))
        self._starts = [0, *itertools.accumulate(len(parent) for parent in self._parents)]
        self._length = self._starts[-1]

    def __len__(self) -> int:
        return self._length

    def _check_not_empty(self, index: Any) -> None:
        if self._length == 0:
            raise empty_read(
                "ConcatenateMapDataset",
                index,
                "every input is empty (total length 0); concatenate at least one non-empty "
                "dataset.",
            )

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        index = as_index(index, "ConcatenateMapDataset")
        self._check_not_empty(index)
        epoch, position = divmod(index, self._length)
        k = bisect.bisect_right(self._starts, position) - 1
        size = self._starts[k + 1] - self._starts[k]
        return self._parents[k][epoch * size + position - self._starts[k]]

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        if not len(indices):
            return []
        self._check_not_empty(indices[0])
        epochs, positions = np.divmod(np.asarray(indices, dtype=np.int64), self._length)
        starts = np.asarray(self._starts, dtype=np.int64)
        which = np.searchsorted(starts, positions, side="right") - 1
        sizes = np.diff(starts)
        return gather(which, epochs * sizes[which] + positions - starts[which], self._parents)

    def __str__(self) -> str:
        return f"ConcatenateMapDataset([{len(self._parents)} parents])"


class SelectionMapDataset(MapDataset):
    """``MapDataset.select_from_datasets``: elements routed by a ``DatasetSelectionMap``.

    Args:
      datasets: the ``MapDataset`` inputs.
      selection_map: ``len(selection_map)`` is the length; ``selection_map[i]`` is
        ``(dataset index, index in that dataset)``.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, datasets: Sequence[MapDataset], selection_map: Any) -> None:
        super().__init__(check_map_datasets(datasets, "select_from_datasets"))
        if not (hasattr(selection_map, "__len__") and hasattr(selection_map, "__getitem__")):
            raise GrainliteTypeError(
                f"select_from_datasets needs a selection map with __len__ and __getitem__ (got "
                f"{selection_map!r} of type {type(selection_map).__name__}); subclass "
                "grain.DatasetSelectionMap and define both."
            )
        self._selection_map = selection_map

    def __len__(self) -> int:
        return len(self._selection_map)

    def _dataset(self, k: Any, index: int) -> MapDataset:
        if isinstance(k, int | np.integer) and -len(self._parents) <= k < len(self._parents):
            return self._parents[int(k)]  # type: ignore[no-any-return]
        raise SelectionIndexError(
            f"The selection map sent index {index} to dataset {k!r}, but there are only "
            f"{len(self._parents)} datasets (positions 0 to {len(self._parents) - 1}); make "
            "its __getitem__ return (dataset position, index in that dataset)."
        )

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        index = as_index(index, "SelectionMapDataset")
        k, inner = self._selection_map[index]
        return self._dataset(k, index)[inner]

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        pairs = [self._selection_map[int(index)] for index in indices]
        for index, (k, _) in zip(indices, pairs):
            self._dataset(k, int(index))
        which = np.asarray([k for k, _ in pairs], dtype=np.int64).reshape(-1)
        which %= max(len(self._parents), 1)  # Python's negative positions count from the end
        inner = np.empty(len(pairs), dtype=object)
        inner[:] = [index for _, index in pairs]
        return gather(which, inner, self._parents)

    def __str__(self) -> str:
        return f"SelectionMapDataset(selection_map={type(self._selection_map).__name__})"
