"""Window shuffles: elements shuffled within consecutive windows of ``window_size``.

A window shuffle costs ``window_size`` elements of memory instead of a global shuffle's index over
the whole dataset, and works on streams. Both kinds use Grain's index shuffle
(:func:`~grainlite.sampling.index_shuffle.index_shuffle`, bit-exact with Grain's) with seed
``seed + w`` for window ``w``, as Grain 0.2.18 does (learned by running it):

* ``WindowShuffleMapDataset``: ``ds[i]`` with ``w, p = divmod(i, window_size)`` reads
  ``parent[w * window_size + index_shuffle(p, window_size - 1, seed + w)]``. The last window is
  shuffled as a full one, so its indices past the end wrap around to the parent's first elements
  (Grain's behaviour, kept: a window size that divides ``len(parent)`` avoids it).
* ``WindowShuffleIterDataset``: reads ``window_size`` elements (fewer at the end), orders them as
  ``window[index_shuffle(k, n - 1, seed + w)]`` for ``k = 0 .. n - 1`` and yields that list from
  its end.

The iterator's state is Grain's: ``{"parent_window_start_state": <the parent's state before the
window was read>, "window_index": w, "pos_in_window": <elements of the window yielded>}``, where
``window_index`` moves on once the window is used up. Restoring re-reads the window from the
parent at the next ``next()``, with the saved window index, so a fresh iterator and a running one
restore alike (the case google/grain#1178 reports for a later Grain; 0.2.18 gets it right too).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from grainlite.checks import int_option
from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index, parent_getitems
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.seed import node_seed
from grainlite.sampling.index_shuffle import index_shuffle, index_shuffle_array


def _check_window_size(window_size: Any, node: str) -> int:
    """``window_size`` as an int >= 1 (:func:`grainlite.checks.int_option`)."""
    return int_option(
        window_size,
        1,
        wrong_type=f"{node} window_size must be an int, got {{type}} {{value}}; pass the number "
        "of elements per window.",
        too_small=f"{node} window_size must be positive (got {{value}}); pass window_size >= 1.",
    )


class WindowShuffleMapDataset(MapDataset):
    """``parent`` shuffled within each window of ``window_size`` consecutive indices.

    Args:
      parent: the dataset to shuffle.
      window_size: elements per window, a positive int.
      seed: a non-negative int; None takes the default seed of an upstream ``ds.seed(...)``.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: MapDataset, *, window_size: int, seed: int | None = None) -> None:
        super().__init__(parent)
        self._window_size = _check_window_size(window_size, "WindowShuffleMapDataset")
        self._seed = node_seed(self, seed, "WindowShuffleMapDataset")

    def __len__(self) -> int:
        return len(self._parent)

    def _source_index(self, index: int) -> int:
        window, position = divmod(index, self._window_size)
        shuffled = index_shuffle(position, self._window_size - 1, self._seed + window)
        return window * self._window_size + shuffled

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        return self._parent[self._source_index(as_index(index, "WindowShuffleMapDataset"))]

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        size = self._window_size
        if len(indices) <= 1 or size == 1:
            return [self[int(i)] for i in indices]
        try:
            flat = np.asarray(indices, dtype=np.int64).reshape(-1)
        except OverflowError:
            return [self[int(i)] for i in indices]
        windows, positions = np.divmod(flat, size)
        for window in np.unique(windows).tolist():
            mask = windows == window
            positions[mask] = index_shuffle_array(positions[mask], size - 1, self._seed + window)
        keys: list[int] = (windows * size + positions).tolist()
        return parent_getitems(self._parent)(keys)

    def __str__(self) -> str:
        return f"WindowShuffleMapDataset(window_size={self._window_size}, seed={self._seed})"


class WindowShuffleIterDataset(IterDataset):
    """The stream ``parent`` shuffled within each window of ``window_size`` consecutive elements.

    Args:
      parent: the stream to shuffle.
      window_size: elements per window, a positive int (memory holds one window).
      seed: a non-negative int; None takes the default seed of an upstream ``ds.seed(...)``.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: IterDataset, *, window_size: int, seed: int | None = None) -> None:
        super().__init__(parent)
        self._window_size = _check_window_size(window_size, "WindowShuffleIterDataset")
        self._seed = node_seed(self, seed, "WindowShuffleIterDataset")

    def __iter__(self) -> WindowShuffleDatasetIterator:
        return WindowShuffleDatasetIterator(iter(self._parent), self._window_size, self._seed)

    def __str__(self) -> str:
        return f"WindowShuffleIterDataset(window_size={self._window_size}, seed={self._seed})"


class WindowShuffleDatasetIterator(DatasetIterator):
    """Yields each window of the parent in its shuffled order; Grain's state (module docstring)."""

    def __init__(self, parent: DatasetIterator, window_size: int, seed: int) -> None:
        super().__init__(parent)
        self._window_size = window_size
        self._seed = seed
        self._start_state = parent.get_state()
        self._window_index = 0
        self._pos = 0
        self._window: list[Any] = []  # what is left to yield, yielded from its end
        self._pending = False  # set_state: re-read the window before the next element

    def _fill(self, window_index: int) -> None:
        """Reads the next window from the parent and shuffles it with ``seed + window_index``."""
        elements = []
        parent = self._parent
        for _ in range(self._window_size):
            try:
                elements.append(next(parent))
            except StopIteration:
                break
        count = len(elements)
        if count > 1:
            order = index_shuffle_array(np.arange(count), count - 1, self._seed + window_index)
            elements = [elements[k] for k in order.tolist()]
        self._window = elements

    def _restore_window(self) -> None:
        self._pending = False
        self._parent.set_state(self._start_state)
        self._fill(self._window_index)
        yielded = self._pos
        if yielded >= len(self._window):  # the window was used up: only the parent moved on
            self._window = []
        else:
            del self._window[len(self._window) - yielded :]

    def __next__(self) -> Any:
        if self._pending:
            self._restore_window()
        if not self._window:
            start = self._parent.get_state()
            self._fill(self._window_index)
            if not self._window:
                raise StopIteration
            self._start_state, self._pos = start, 0
        element = self._window.pop()
        self._pos += 1
        if not self._window:
            self._window_index += 1
        return element

    def get_state(self) -> dict[str, Any]:
        """Grain's window shuffle state: the parent's state at the window start, the window
        index and the elements of the window yielded."""
        return {
            "parent_window_start_state": self._start_state,
            "window_index": self._window_index,
            "pos_in_window": self._pos,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to ``state``; the window is re-read from the parent at the next ``next()``."""
        self._start_state = state["parent_window_start_state"]
        self._window_index = int(state["window_index"])
        self._pos = int(state["pos_in_window"])
        self._window = []
        self._pending = True

    def __str__(self) -> str:
        return f"WindowShuffleDatasetIterator(window_size={self._window_size}, seed={self._seed})"
