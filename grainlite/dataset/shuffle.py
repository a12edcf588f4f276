"""``MapDataset.shuffle(seed)``: a global shuffle, bit-exact with Grain's, new in every epoch.

``ds[i]`` for ``n = len(ds)`` reads epoch ``e, p = divmod(i, n)``: position ``p`` goes through
Grain's index shuffle (:func:`~grainlite.sampling.index_shuffle.index_shuffle`) over
``[0, n - 1]`` with seed ``(seed + e) mod 2**32``, and the element is ``parent[e * n + shuffled]``,
so an endless view (``repeat()`` above it) reshuffles every epoch and passes the epoch on to the
nodes below (a ``random_map`` there draws new numbers each epoch). A block of indices is
shuffled with one :func:`~grainlite.sampling.index_shuffle.index_shuffle_array` call per epoch.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index, parent_getitems
from grainlite.dataset.map import parent_stream
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.seed import node_seed
from grainlite.errors import GrainliteValueError
from grainlite.sampling.index_shuffle import index_shuffle, index_shuffle_array

_MASK32 = 2**32 - 1
_INT64_SAFE = 2**62  # indices from here on are mapped with Python ints (no int64 overflow)


class ShuffleMapDataset(MapDataset):
    """A seeded permutation of ``parent``, a different one in each epoch of an endless view.

    Args:
      parent: the dataset to shuffle.
      seed: an unsigned 32-bit seed; None takes the default seed of an upstream ``ds.seed(...)``.

    Raises:
      ValueError: no seed at all, or one outside ``[0, 2**32 - 1]`` (Grain's rule).
    """

    _element_spec = property(element_spec.first_parent_spec)

    reshuffles_each_epoch = True

    def __init__(self, parent: MapDataset, *, seed: int | None = None) -> None:
        super().__init__(parent)
        seed = node_seed(self, seed, "shuffle")
        if not 0 <= seed <= _MASK32:
            raise GrainliteValueError(
                f"Seed must be an integer between 0 and 2**32-1 (got seed={seed}); pass a "
                "seed in that range, e.g. seed % 2**32."
            )
        self._seed = seed

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        return self._parent[self._source_index(as_index(index, "ShuffleMapDataset"))]

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        if not len(indices) or not len(self._parent):
            return [self[i] for i in indices]
        return parent_getitems(self._parent)(self._keys(indices))

    def _stream(self, indices: Sequence[int]) -> Iterator[Any]:
        """``_getitems`` one element at a time, through the parent's stream."""
        if not len(indices) or not len(self._parent):
            return iter(self._getitems(indices))
        return parent_stream(self._parent)(self._keys(indices))

    def _parent_keys(self, indices: Any) -> Any:
        """The parent indices reading ``indices`` reads (:mod:`~grainlite.dataset.key_hints`)."""
        if not len(indices) or not len(self._parent):
            return indices
        return self._keys(indices)

    def _keys(self, indices: Sequence[int]) -> list[Any]:
        """The parent indices that ``indices`` (not empty, of a dataset that is not) read."""
        length = len(self._parent)
        flat = np.asarray(indices, dtype=object if _too_wide(indices) else np.int64).reshape(-1)
        if flat.dtype == object:
            return [self._source_index(int(i)) for i in flat]
        epochs, positions = np.divmod(flat, length)
        if length > 1:
            first = int(epochs.min())
            if first == int(epochs.max()):  # the usual block: all in one epoch
                seed = (self._seed + first) & _MASK32
                positions = index_shuffle_array(positions, length - 1, seed)
            else:
                for epoch in np.unique(epochs).tolist():
                    mask = epochs == epoch
                    positions[mask] = index_shuffle_array(
                        positions[mask], length - 1, (self._seed + epoch) & _MASK32
                    )
        keys: list[int] = (epochs * length + positions).tolist()
        return keys

    def _source_index(self, index: int) -> int:
        """The parent index that ``index`` reads."""
        length = len(self._parent)
        epoch, position = divmod(index, length)
        if length > 1:
            position = index_shuffle(position, length - 1, (self._seed + epoch) & _MASK32)
        return epoch * length + position

    def __str__(self) -> str:
        return f"ShuffleMapDataset(seed={self._seed})"


def _too_wide(indices: Sequence[int]) -> bool:
    """Whether ``indices`` reach past what int64 arithmetic can map (an endless view's far end)."""
    if isinstance(indices, range):
        return max(abs(indices.start), abs(indices.stop)) >= _INT64_SAFE
    array = np.asarray(indices)
    if array.dtype == object:
        return True
    return bool(array.size) and int(np.abs(array).max()) >= _INT64_SAFE
