"""``CacheIterDataset``: the parent's elements kept in memory after the first full pass.

The first iterator that reads the parent to its end from the start stores every element in the
dataset; iterators made afterwards (the next epoch of a ``RepeatIterDataset``, a new
``iter(ds)``) give the stored elements and never read the parent again. Keep it for streams that
fit in memory and cost more to make than to keep.

The state is Grain's: ``{"parent": <the parent's state>, "position": <elements given>,
"cache_filled": <whether the elements come from the cache>}``; the iterator that fills the cache
takes its elements from the cache once the parent has ended. Any state restored where the cache
is full gives the cached elements from ``position`` on, without reading the parent: the next
epoch of a ``RepeatIterDataset`` (which restores the first state) reads the parent once in all,
as in Grain. A state with ``cache_filled`` restored where the cache is empty (a new process)
reads the parent again from the start, skips ``position`` elements and fills the cache on the
way.
"""

from __future__ import annotations

from typing import Any

from grainlite.dataset import element_spec
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.errors import GrainliteValueError, shown


class CacheIterDataset(IterDataset):
    """Caches the elements of ``parent`` in memory once an iterator has read all of them."""

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: IterDataset) -> None:
        super().__init__(parent)
        self._cache: list[Any] | None = None

    def __iter__(self) -> CacheDatasetIterator:
        return CacheDatasetIterator(self)

    def __str__(self) -> str:
        return "CacheIterDataset()"


class CacheDatasetIterator(DatasetIterator):
    """Gives the cached elements, or reads the parent (recording them) until the cache is full."""

    def __init__(self, dataset: CacheIterDataset) -> None:
        super().__init__()
        self._dataset = dataset
        self._position = 0
        self._parent_it: DatasetIterator | None = None
        self._recording: list[Any] | None = None
        self._parent_state: Any = None
        if dataset._cache is None:
            self._open_parent()

    def _open_parent(self) -> None:
        self._parent_it = self._dataset._parent.__iter__()
        self._parents = (self._parent_it,)
        self._recording = []
        self._parent_state = self._parent_it.get_state()

    def __next__(self) -> Any:
        cache = self._dataset._cache
        if self._parent_it is None:
            assert cache is not None
            if self._position >= len(cache):
                raise StopIteration
            element = cache[self._position]
            self._position += 1
            return element
        try:
            element = next(self._parent_it)
        except StopIteration:
            if self._recording is not None and self._dataset._cache is None:
                self._dataset._cache = self._recording
            self._recording = None
            if self._dataset._cache is not None:  # from now on states and restores use it
                self._close_parent()
            raise
        self._parent_state = self._parent_it.get_state()
        if self._recording is not None:
            self._recording.append(element)
        self._position += 1
        return element

    def get_state(self) -> dict[str, Any]:
        """Grain's cache state: the parent's state, elements given, whether from the cache."""
        return {
            "parent": self._parent_state,
            "position": self._position,
            "cache_filled": self._parent_it is None,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to ``state``: in the cache, or in the parent (refilling the cache if needed)."""
        if not isinstance(state, dict) or not {"parent", "position", "cache_filled"} <= set(state):
            raise GrainliteValueError(
                "CacheIterDataset state must be a dict with 'parent', 'position' and "
                f"'cache_filled' (from get_state()); got {shown(state)}."
            )
        position = int(state["position"])
        self._parent_state = state["parent"]
        if self._dataset._cache is not None:  # the cache holds what the parent would give
            self._close_parent()
            self._position = position
            return
        if state["cache_filled"]:  # the cache is not here: read it again up to the position
            self._close_parent()
            self._open_parent()
            self._position = 0
            while self._position < position:
                next(self)
            return
        if self._parent_it is None:
            self._open_parent()
        assert self._parent_it is not None
        self._parent_it.set_state(state["parent"])
        self._position = position
        self._recording = [] if position == 0 else None  # only a pass from the start fills it

    def _close_parent(self) -> None:
        if self._parent_it is not None:
            self._parent_it.close()
        self._parent_it = None
        self._parents = ()
        self._recording = None
