"""Element-wise nodes on a ``MapDataset``: ``map``, ``random_map``, ``map_with_index``, ``filter``.

They are random access: ``ds[i]`` transforms ``parent[i]``, a ``None`` (a filter's hole) stays
``None`` without calling the function, and a filter turns the elements it rejects into ``None``.
Blocks of indices (``_getitems``) go through one list comprehension. The generator ``random_map``
hands the function for index ``i`` depends only on the seed and ``i``
(:mod:`grainlite.dataset.seed`); ``map_with_index`` passes the index the element was read at.
Their ``IterDataset`` twins are in :mod:`grainlite.dataset.map_iter`.

The functions are given either as plain callables or as Grain's transform classes (``Map``,
``RandomMap``, ``MapWithIndex``, ``Filter``; grainlite's or Grain's own), whose method is called
(:func:`transform_function`).
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from grainlite.dataset import element_spec
from grainlite.dataset._util import parent_getitems
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.seed import IndexRng, node_seed
from grainlite.errors import GrainliteTypeError
from grainlite.stats.collect import callable_name
from grainlite.stats.counters import StageCounter, clock
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


def transform_name(transform: Any) -> str:
    """The name nodes show for ``transform``: a function's own, else its class's."""
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
        return f"{type(self).__name__}(transform={transform_name(self._transform)})"


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
