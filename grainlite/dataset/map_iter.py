"""Element-wise nodes on an ``IterDataset``: ``map``, ``random_map``, ``map_with_index`` and
``filter`` transform the stream.

``map`` and ``filter`` keep the parent's state unchanged, ``random_map`` adds ``index_for_rng``
(how many elements it has seen, which numbers the next generator) and ``map_with_index`` adds
``counter`` (the next index), as Grain's states do. The functions are taken as on a
``MapDataset`` (:func:`grainlite.dataset.map.transform_function`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grainlite.dataset import element_spec
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map import transform_function, transform_name
from grainlite.dataset.next_index import get_next_index, set_next_index
from grainlite.dataset.seed import IndexRng, node_seed
from grainlite.stats.collect import ElementTimer, callable_name
from grainlite.stats.counters import clock
from grainlite.stats.tracing import span


class _ElementwiseIterDataset(IterDataset):
    _kind = "map"

    def __init__(self, parent: IterDataset, transform: Any) -> None:
        super().__init__(parent)
        self._transform = transform
        self._fn = transform_function(transform, self._kind)

    def __str__(self) -> str:
        return f"{type(self).__name__}(transform={transform_name(self._transform)})"


class MapIterDataset(_ElementwiseIterDataset):
    """``ds.map(f)`` on a stream; the state is the parent's."""

    _element_spec = property(element_spec.map_spec)

    one_to_one = True

    def __iter__(self) -> MapDatasetIterator:
        return MapDatasetIterator(self._parent.__iter__(), self._fn)


class FilterIterDataset(_ElementwiseIterDataset):
    """``ds.filter(f)`` on a stream: skips elements where ``f`` is false; the parent's state."""

    _element_spec = property(element_spec.first_parent_spec)

    _kind = "filter"

    def __iter__(self) -> FilterDatasetIterator:
        return FilterDatasetIterator(
            self._parent.__iter__(),
            self._fn,
            name=f"FilterDatasetIterator(transform={transform_name(self._transform)})",
        )


class MapWithIndexIterDataset(_ElementwiseIterDataset):
    """``ds.map_with_index(f)`` on a stream: ``f(k, element)`` for the ``k``-th element."""

    _element_spec = property(element_spec.map_spec)

    _kind = "map_with_index"
    one_to_one = True

    def __iter__(self) -> MapWithIndexDatasetIterator:
        return MapWithIndexDatasetIterator(self._parent.__iter__(), self._fn)


class RandomMapIterDataset(_ElementwiseIterDataset):
    """``ds.random_map(f, seed=)`` on a stream: the ``k``-th element gets generator ``k``.

    In worker ``w`` of ``W`` of ``mp_prefetch`` (after :meth:`set_worker_share`) the worker's
    ``k``-th element gets generator ``k * W + w``, as in Grain: the number of its place in the
    interleaved output. The state still counts the worker's own elements.
    """

    _element_spec = property(element_spec.map_spec)

    _kind = "random_map"
    one_to_one = True

    def __init__(self, parent: IterDataset, transform: Any, *, seed: int | None = None) -> None:
        super().__init__(parent, transform)
        self._seed = node_seed(self, seed, "random_map")
        self._rng_offset, self._rng_stride = 0, 1

    def set_worker_share(self, worker: int, workers: int) -> None:
        """Numbers generators as worker ``worker`` of ``workers`` does (in place: call it on the
        worker's own copy of the pipeline, as ``mp_prefetch``'s worker slicing does)."""
        self._rng_offset, self._rng_stride = int(worker), int(workers)

    def __iter__(self) -> RandomMapDatasetIterator:
        return RandomMapDatasetIterator(
            self._parent.__iter__(),
            self._fn,
            IndexRng(self._seed),
            offset=getattr(self, "_rng_offset", 0),
            stride=getattr(self, "_rng_stride", 1),
        )


class MapDatasetIterator(DatasetIterator):
    """Applies ``fn`` to each element of the parent iterator (``None`` passes through).

    A sample of the elements has ``fn`` timed for ``stats()`` (:class:`ElementTimer`); the others
    only count down ``_countdown``.
    """

    def __init__(self, parent: DatasetIterator, fn: Callable[[Any], Any]) -> None:
        super().__init__(parent)
        self._next_parent = parent.__next__
        self._fn = fn
        self._stats_stage = ElementTimer(callable_name(fn))
        self._countdown = self._stats_stage.gap

    def __next__(self) -> Any:
        element = self._next_parent()
        self._countdown -= 1  # counted after the parent: the call that ends the stream is not
        if self._countdown:
            return None if element is None else self._fn(element)
        with span(self._stats_stage.counter.name):  # a profiler span while a trace records
            begin = clock()
            try:
                return None if element is None else self._fn(element)
            finally:
                self._countdown = self._stats_stage.timed(clock() - begin)

    def get_state(self) -> dict[str, Any]:
        """The parent's state (a map adds nothing to the position)."""
        return self._parent.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the parent to ``state``."""
        self._parent.set_state(state)

    def _get_next_index(self) -> int:
        """A map's next index is its parent's (a map neither drops nor adds elements)."""
        return get_next_index(self._parent)

    def _set_next_index(self, index: int) -> None:
        set_next_index(self._parent, index)


class FilterDatasetIterator(MapDatasetIterator):
    """Skips the parent's elements for which ``fn`` is false (Grain calls it on ``None`` too).

    Over windows of 1000 elements read it checks the share dropped against the
    ``DatasetOptions`` in force when it was built (a warning above 90 % by default).
    """

    def __init__(
        self, parent: DatasetIterator, fn: Callable[[Any], Any], name: str = "filter"
    ) -> None:
        super().__init__(parent, fn)
        from grainlite.dataset.options import FilterRatioCheck

        check = FilterRatioCheck(name)
        self._check = check.check if check.active else None

    def __next__(self) -> Any:
        if getattr(self, "_check", None) is not None:
            return self._next_checked()
        next_parent, fn = self._next_parent, self._fn
        if self._countdown > 1:  # counts down on each element returned, not on the end
            while True:
                element = next_parent()
                if fn(element):
                    self._countdown -= 1
                    return element
                self._stats_stage.dropped += 1
        spent = 0
        while True:
            element = next_parent()
            with span(self._stats_stage.counter.name):
                begin = clock()
                kept = fn(element)
                spent += clock() - begin
            if kept:
                self._countdown = self._stats_stage.timed(spent)
                return element
            self._stats_stage.dropped += 1

    def _get_next_index(self) -> int:
        """A filter's position is not one element index (Grain raises here too)."""
        from grainlite.dataset.next_index import NoNextIndexError

        raise NoNextIndexError(
            "A filter's iterator has no next index: the elements it keeps are not known without "
            "reading them; use get_state() / set_state() instead."
        )

    def _set_next_index(self, index: int) -> None:
        self._get_next_index()

    def _next_checked(self) -> Any:
        """``__next__`` with the filter check: the same counting and timing, plus the window."""
        next_parent, fn, check = self._next_parent, self._fn, self._check
        assert check is not None
        timed = self._countdown <= 1
        spent = 0
        while True:
            element = next_parent()
            begin = clock() if timed else 0
            kept = bool(fn(element))
            if timed:
                spent += clock() - begin
            check(kept)
            if kept:
                if timed:
                    self._countdown = self._stats_stage.timed(spent)
                else:
                    self._countdown -= 1
                return element
            self._stats_stage.dropped += 1


class MapWithIndexDatasetIterator(DatasetIterator):
    """Calls ``fn(k, element)`` for the ``k``-th element; state ``{"parent", "counter"}``."""

    def __init__(self, parent: DatasetIterator, fn: Callable[[int, Any], Any]) -> None:
        super().__init__(parent)
        self._next_parent = parent.__next__
        self._fn = fn
        self._counter = 0
        self._stats_stage = ElementTimer(callable_name(fn))
        self._countdown = self._stats_stage.gap

    def __next__(self) -> Any:
        element = self._next_parent()
        index = self._counter
        self._counter = index + 1
        self._countdown -= 1
        if self._countdown:
            return None if element is None else self._fn(index, element)
        with span(self._stats_stage.counter.name):
            begin = clock()
            try:
                return None if element is None else self._fn(index, element)
            finally:
                self._countdown = self._stats_stage.timed(clock() - begin)

    def get_state(self) -> dict[str, Any]:
        """``{"parent": <parent state>, "counter": <index of the next element>}``."""
        return {"parent": self._parent.get_state(), "counter": self._counter}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the parent and the counter to ``state``."""
        counter = state["counter"]
        self._parent.set_state(state["parent"])
        self._counter = int(counter)

    def _get_next_index(self) -> int:
        """Grain's next index of ``map_with_index``: the index it passes to ``fn`` next."""
        return self._counter

    def _set_next_index(self, index: int) -> None:
        """Moves the parent to ``index`` and passes ``index`` to ``fn`` next."""
        set_next_index(self._parent, index)
        self._counter = index


class RandomMapDatasetIterator(DatasetIterator):
    """Calls ``fn(element, rng)`` for the ``k``-th element, ``rng`` number ``k * stride + offset``;
    the state adds ``index_for_rng`` (``k`` of the next element)."""

    def __init__(
        self,
        parent: DatasetIterator,
        fn: Callable[[Any, Any], Any],
        rngs: IndexRng,
        *,
        offset: int = 0,
        stride: int = 1,
    ) -> None:
        super().__init__(parent)
        self._next_parent = parent.__next__
        self._fn = fn
        self._rngs = rngs
        self._index = 0
        self._offset, self._stride = offset, stride
        self._stats_stage = ElementTimer(callable_name(fn))
        self._countdown = self._stats_stage.gap

    def __next__(self) -> Any:
        element = self._next_parent()
        index = self._index
        self._index = index + 1
        if element is None:
            return None
        self._countdown -= 1
        if self._countdown:
            return self._fn(element, self._rngs.rng(index * self._stride + self._offset))
        with span(self._stats_stage.counter.name):
            begin = clock()
            try:
                return self._fn(element, self._rngs.rng(index * self._stride + self._offset))
            finally:
                self._countdown = self._stats_stage.timed(clock() - begin)

    def get_state(self) -> dict[str, Any]:
        """``{"parent": <parent state>, "index_for_rng": <count of elements seen>}``."""
        return {"parent": self._parent.get_state(), "index_for_rng": self._index}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the parent and the element count to ``state``."""
        index = state["index_for_rng"]
        self._parent.set_state(state["parent"])
        self._index = int(index)

    def _get_next_index(self) -> int:
        """Grain's next index of ``random_map``: the count of elements seen, which picks the
        next element's rng."""
        return self._index

    def _set_next_index(self, index: int) -> None:
        """Moves the parent to ``index`` and gives the next element the rng of element
        ``index``, so the elements equal those of an uninterrupted pass."""
        set_next_index(self._parent, index)
        self._index = index
