"""Element-wise nodes: ``map``, ``random_map``, ``map_with_index`` and ``filter``, for both kinds.

On a ``MapDataset`` they are random access: ``ds[i]`` transforms ``parent[i]``, a ``None`` (a
filter's hole) stays ``None`` without calling the function, and a filter turns the elements it
rejects into ``None``. Blocks of indices (``_getitems``) go through one list comprehension. The
generator ``random_map`` hands the function for index ``i`` depends only on the seed and ``i``
(:mod:`grainlite.dataset.seed`); ``map_with_index`` passes the index the element was read at.

On an ``IterDataset`` they transform the stream: ``map`` and ``filter`` keep the parent's state
unchanged, ``random_map`` adds ``index_for_rng`` (how many elements it has seen, which numbers the
next generator) and ``map_with_index`` adds ``counter`` (the next index), as Grain's states do.
The functions are given either as plain callables or as Grain's transform classes (``Map``,
``RandomMap``, ``MapWithIndex``, ``Filter``; grainlite's or Grain's own), whose method is called.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from grainlite.dataset import element_spec
from grainlite.dataset._util import parent_getitems
from grainlite.dataset.base import DatasetIterator, IterDataset, MapDataset
from grainlite.dataset.next_index import get_next_index, set_next_index
from grainlite.dataset.seed import IndexRng, node_seed
from grainlite.errors import GrainliteTypeError
from grainlite.stats.collect import ElementTimer, callable_name
from grainlite.stats.counters import StageCounter, clock
from grainlite.stats.tracing import span
from grainlite.transforms.kinds import methods_of

# The parameters a plain function of each kind takes (its methods: transforms.kinds.METHODS).
_SIGNATURES = {
    "map": "f(element)",
    "filter": "f(element) -> bool",
    "random_map": "f(element, rng)",
    "map_with_index": "f(index, element)",
}


def transform_function(transform: Any, kind: str) -> Callable[..., Any]:
    """The function to call for ``transform``: its ``kind`` method if it has one, else itself.

    A transform class instance (grainlite's or Grain's ``Map``, ``Filter``, ...) is called
    through its method even when it is also callable, as Grain does.
    """
    methods, signature = methods_of(kind), _SIGNATURES[kind]
    if not isinstance(transform, type):
        for name in methods:
            method = getattr(transform, name, None)
            if callable(method):
                return method  # type: ignore[no-any-return]
    if callable(transform) and not (isinstance(transform, type) and _is_transform_class(transform)):
        return transform  # type: ignore[no-any-return]
    raise GrainliteTypeError(
        f"{kind}(...) takes a function {signature} or a transform object with a `{methods[0]}` "
        f"method (got {transform!r} of type {type(transform).__name__}); pass e.g. "
        f"ds.{kind}(lambda ...) or an instance (not the class) of a transform."
    )


def _is_transform_class(cls: type) -> bool:
    """A transform class passed where its instance belongs (``ds.map(MyMap)``).

    A dataset class is not one: its ``map`` / ``filter`` are dataset methods, and the class
    itself is a function of the element (``files.map(ParquetIterDataset)``, as in Grain).
    """
    if issubclass(cls, MapDataset | IterDataset):
        return False
    return any(
        callable(getattr(cls, name, None)) for kind in _SIGNATURES for name in methods_of(kind)
    )


def parent_stream(parent: Any) -> Callable[[Sequence[int]], Iterator[Any]]:
    """``parent._stream``: the elements at ``indices`` handed out one by one, each made when it
    is asked for (the source block still read in one call), where the parent streams; else its
    block read (:func:`parent_getitems`) handed out in order once the whole block is made; a
    user's node that reads element by element is asked element by element."""
    stream = getattr(parent, "_stream", None)
    if stream is not None:
        return stream  # type: ignore[no-any-return]
    getitems = getattr(parent, "_getitems", None)
    if getitems is None or getattr(type(parent), "_getitems", None) is MapDataset._getitems:
        return lambda indices: (parent[int(i)] for i in indices)
    return functools.partial(_block_stream, getitems)


def _block_stream(getitems: Callable[[Sequence[int]], list[Any]], indices: Any) -> Iterator[Any]:
    """``getitems(indices)`` read at the first ``next()`` (an error is raised there, as a
    streaming node's is), then handed out in order."""
    yield from getitems(indices)


def _name(transform: Any) -> str:
    return getattr(transform, "__name__", type(transform).__name__)


class _ElementwiseMapDataset(MapDataset):
    """What the four ``MapDataset`` nodes share: one parent, the same length, slicing."""

    _kind = "map"

    def __init__(self, parent: MapDataset, transform: Any) -> None:
        super().__init__(parent)
        self._transform = transform
        self._fn = transform_function(transform, self._kind)
        # Block reads (_getitems) are timed into it, for the stats of iterators that read here.
        self._stats_stage = StageCounter(callable_name(self._fn), "transform")

    def __len__(self) -> int:
        return len(self._parent)

    def _timed(self, begin: int, out: list[Any], kept: int | None = None) -> list[Any]:
        """Counts one block of ``out`` made since ``begin`` (``kept``: elements not holes)."""
        self._stats_stage.add(clock() - begin, len(out), len(out) if kept is None else kept)
        return out

    def _stream(self, indices: Sequence[int]) -> Iterator[Any]:
        """The elements at ``indices`` one by one, each made when asked for (read through the
        parent's stream, so the source block is one read); counted into the stats as one
        block when the stream ends or is dropped."""
        make = self._make
        stage = self._stats_stage
        ns = made = kept = 0
        try:
            for index, element in zip(indices, parent_stream(self._parent)(indices)):
                begin = clock()
                out = None if element is None else make(index, element)
                ns += clock() - begin
                made += 1
                kept += out is not None
                yield out
        finally:
            stage.add(ns, made, made if self._kind != "filter" else kept)

    def _make(self, index: int, element: Any) -> Any:
        """The element this node makes at ``index`` from its parent's ``element`` (not None);
        what ``_getitems`` computes for one index."""
        raise NotImplementedError

    def _parent_keys(self, indices: Any) -> Any:
        """The parent indices reading ``indices`` reads: the same (:mod:`~grainlite.dataset.
        key_hints`)."""
        return indices

    def __str__(self) -> str:
        return f"{type(self).__name__}(transform={_name(self._transform)})"


class MapMapDataset(_ElementwiseMapDataset):
    """``ds.map(f)``: ``f(parent[i])``; holes stay ``None``."""

    _element_spec = property(element_spec.map_spec)

    _kind = "map"

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        element = self._parent[index]
        return None if element is None else self._fn(element)

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        fn = self._fn
        elements = parent_getitems(self._parent)(indices)
        begin = clock()
        return self._timed(begin, [None if x is None else fn(x) for x in elements])

    def _stream(self, indices: Sequence[int]) -> Iterator[Any]:
        """The shared ``_stream``, less its per-element index (the most common node)."""
        fn = self._fn
        stage = self._stats_stage
        ns = made = 0
        try:
            for element in parent_stream(self._parent)(indices):
                begin = clock()
                out = None if element is None else fn(element)
                ns += clock() - begin
                made += 1
                yield out
        finally:
            stage.add(ns, made, made)

    def _make(self, index: int, element: Any) -> Any:
        return self._fn(element)


class FilterMapDataset(_ElementwiseMapDataset):
    """``ds.filter(f)``: ``parent[i]`` where ``f`` is true, else ``None`` (a hole)."""

    _element_spec = property(element_spec.first_parent_spec)

    _kind = "filter"
    leaves_holes = True
    hole_maker_name = "MapDataset.filter"  # as Grain's errors name it

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        element = self._parent[index]
        return element if element is not None and self._fn(element) else None

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        fn = self._fn
        elements = parent_getitems(self._parent)(indices)
        begin = clock()
        out = [x if x is not None and fn(x) else None for x in elements]
        return self._timed(begin, out, sum(1 for x in out if x is not None))

    def _make(self, index: int, element: Any) -> Any:
        return element if self._fn(element) else None


class MapWithIndexMapDataset(_ElementwiseMapDataset):
    """``ds.map_with_index(f)``: ``f(i, parent[i])`` with the index ``i`` it was read at."""

    _element_spec = property(element_spec.map_spec)

    _kind = "map_with_index"

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        element = self._parent[index]
        return None if element is None else self._fn(index, element)

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        fn = self._fn
        elements = parent_getitems(self._parent)(indices)
        keys = indices.tolist() if hasattr(indices, "tolist") else indices
        begin = clock()
        out = [None if x is None else fn(i, x) for i, x in zip(keys, elements, strict=True)]
        return self._timed(begin, out)

    def _make(self, index: int, element: Any) -> Any:
        return self._fn(int(index), element)


class RandomMapMapDataset(_ElementwiseMapDataset):
    """``ds.random_map(f, seed=)``: ``f(parent[i], rng_i)``, ``rng_i`` fixed by seed and ``i``.

    Raises:
      ValueError: at construction, when neither ``seed`` nor an upstream ``ds.seed(...)`` is set.
    """

    _element_spec = property(element_spec.map_spec)

    _kind = "random_map"

    def __init__(self, parent: MapDataset, transform: Any, *, seed: int | None = None) -> None:
        super().__init__(parent, transform)
        self._rngs = IndexRng(node_seed(self, seed, "random_map"))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        element = self._parent[index]
        return None if element is None else self._fn(element, self._rngs.rng(index))

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        fn, rng = self._fn, self._rngs.rng
        elements = parent_getitems(self._parent)(indices)
        keys = indices.tolist() if hasattr(indices, "tolist") else indices
        begin = clock()
        out = [None if x is None else fn(x, rng(i)) for i, x in zip(keys, elements, strict=True)]
        return self._timed(begin, out)

    def _make(self, index: int, element: Any) -> Any:
        return self._fn(element, self._rngs.rng(int(index)))


# IterDataset twins ------------------------------------------------------------------------------
class _ElementwiseIterDataset(IterDataset):
    _kind = "map"

    def __init__(self, parent: IterDataset, transform: Any) -> None:
        super().__init__(parent)
        self._transform = transform
        self._fn = transform_function(transform, self._kind)

    def __str__(self) -> str:
        return f"{type(self).__name__}(transform={_name(self._transform)})"


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
            name=f"FilterDatasetIterator(transform={_name(self._transform)})",
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
