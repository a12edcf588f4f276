"""``ds.slice(sl)`` and ``ds[start:stop:step]``: a view of the elements a Python slice selects.

``len(view) == len(range(len(ds))[sl])`` and ``view[k]`` is ``ds[r[k]]`` for ``r`` that range.
Past the end, Grain reads epoch ``e, k = divmod(i, len(view))`` of the view at
``ds[e * len(ds) + r[k]]``, so nodes below that vary by epoch (a ``random_map``) draw new
numbers in each epoch of a repeat.

One rule differs from Grain, where Grain has a bug (google/grain#1200): when a shuffle is below
the view, ``e * len(ds) + r[k]`` is a position in a *different* permutation, so later epochs of
``shuffle → slice → repeat`` read elements outside the slice (a train split leaking into the
validation split). Here a view over a shuffle wraps within itself instead (``view[i]`` is
``view[i % len(view)]``): every epoch has exactly the slice's elements. Shuffle above the slice
(``ds[a:b].shuffle(seed)``) to get a new order in every epoch.

:class:`BlockStrideMapDataset` is the view of whole blocks an ``mp_prefetch`` worker reads under
its batch rule.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index, parent_getitems
from grainlite.dataset.map import parent_stream
from grainlite.dataset.map_dataset import MapDataset, map_lineage
from grainlite.errors import GrainliteValueError, shown

if TYPE_CHECKING:
    from grainlite.dataset.map_batch import BatchMapDataset

_INT64_SAFE = 2**62


def _reorders_by_epoch(ds: Any) -> bool:
    """Whether ``ds`` or a node below it permutes differently in each epoch (a shuffle: its
    :attr:`~grainlite.dataset.map_dataset.MapDataset.reshuffles_each_epoch`)."""
    return any(node.reshuffles_each_epoch for node in map_lineage(ds))


class SliceMapDataset(MapDataset):
    """The elements of ``parent`` that the slice ``sl`` selects, as a lazy view.

    Args:
      parent: the dataset to view.
      sl: a Python ``slice`` (negative bounds and steps as for lists).

    Raises:
      ValueError: ``sl`` is not a slice (Grain's type), or its step is zero.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: MapDataset, sl: builtins.slice) -> None:
        if not isinstance(sl, builtins.slice):
            raise GrainliteValueError(
                f"sl is not a slice: {type(sl)}; slice(sl) needs a Python slice (got "
                f"{shown(sl)} of type {type(sl).__name__}); pass e.g. ds.slice(slice(2, 10, 2)), "
                "or index with ds[2:10:2]."
            )
        super().__init__(parent)
        self._slice = sl
        self._range = range(len(parent))[sl]  # ValueError for a zero step, as Grain
        self._wrap_within: bool | None = None  # computed on first read (see the module doc)

    def __len__(self) -> int:
        return len(self._range)

    def batch_returned_as_is(self) -> BatchMapDataset | None:
        """The parent's: a view returns its parent's elements as they are (grainlite's own node;
        a subclass may change them)."""
        return self._parent.batch_returned_as_is() if type(self) is SliceMapDataset else None

    def _wraps(self) -> bool:
        wraps = self._wrap_within
        if wraps is None:
            wraps = self._wrap_within = _reorders_by_epoch(self._parent)
        return wraps

    def _parent_index(self, index: int) -> int:
        epoch, position = divmod(index, len(self._range))
        if self._wraps():
            return self._range[position]
        return epoch * len(self._parent) + self._range[position]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        return self._parent[self._parent_index(as_index(index, "SliceMapDataset"))]

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        if not len(indices) or not len(self._range):
            return [self[i] for i in indices]
        return parent_getitems(self._parent)(self._keys(indices))

    def _stream(self, indices: Sequence[int]) -> Iterator[Any]:
        """``_getitems`` one element at a time, through the parent's stream."""
        if not len(indices) or not len(self._range):
            return iter(self._getitems(indices))
        return parent_stream(self._parent)(self._keys(indices))

    def _parent_keys(self, indices: Any) -> Any:
        """The parent indices reading ``indices`` reads (:mod:`~grainlite.dataset.key_hints`)."""
        if not len(indices) or not len(self._range):
            return indices
        return self._keys(indices)

    def _keys(self, indices: Sequence[int]) -> list[int]:
        """The parent indices that ``indices`` (not empty; a view that is not empty) read."""
        length = len(self._range)
        flat = np.asarray(indices).reshape(-1)
        parent_len = len(self._parent)
        keys: list[int] | None = None
        if (
            flat.dtype.kind in "iu"
            and max(abs(int(flat.min())), abs(int(flat.max()))) < _INT64_SAFE
        ):
            epochs, positions = np.divmod(flat.astype(np.int64, copy=False), length)
            values = positions * self._range.step + self._range.start
            if self._wraps() or not epochs.any():
                keys = values.tolist()
            elif int(np.abs(epochs).max()) * parent_len < _INT64_SAFE:
                keys = (values + epochs * parent_len).tolist()
        if keys is None:  # beyond int64 arithmetic (the far end of an endless view)
            keys = [self._parent_index(int(i)) for i in flat.tolist()]
        return keys

    def __str__(self) -> str:
        return f"SliceMapDataset[{self._slice.start}:{self._slice.stop}:{self._slice.step}]"


class BlockStrideMapDataset(MapDataset):
    """Blocks ``first, first + stride, ...`` of ``block`` consecutive elements of ``parent``.

    Worker ``first`` of ``stride`` of ``mp_prefetch`` reads these under its batch rule
    (google/grain#1129, :mod:`grainlite.dataset.mp.slicing`).
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: MapDataset, block: int, first: int, stride: int) -> None:
        super().__init__(parent)
        self._block, self._first, self._stride = block, first, stride
        total = len(parent)
        blocks = -(-total // block)
        mine = max(0, -(-(blocks - first) // stride))
        length = mine * block
        last = first + stride * (mine - 1)
        if mine and last == blocks - 1 and total % block:
            length -= block - total % block  # this worker holds the stream's partial last block
        self._length = length

    def __len__(self) -> int:
        return self._length

    def _index(self, index: int) -> int:
        k, r = divmod(index % self._length, self._block)
        return (self._first + self._stride * k) * self._block + r

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        return self._parent[self._index(int(index))]

    def _getitems(self, indices: Any) -> list[Any]:
        return self._parent._getitems([self._index(int(i)) for i in indices])

    def _parent_keys(self, indices: np.ndarray) -> np.ndarray:
        """The parent indices reading ``indices`` reads (:mod:`~grainlite.dataset.key_hints`):
        :meth:`_index` on the whole array."""
        if not self._length:
            return indices
        k, r = np.divmod(np.asarray(indices, dtype=np.int64) % self._length, self._block)
        return (self._first + self._stride * k) * self._block + r

    def _stream(self, indices: Any) -> Iterator[Any]:
        """``_getitems`` one element at a time, through the parent's stream."""
        return parent_stream(self._parent)([self._index(int(i)) for i in indices])
