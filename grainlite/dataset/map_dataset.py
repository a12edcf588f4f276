"""``MapDataset``: a lazy, random-access dataset (``len``, ``ds[i]``) and the walks up its lineage.

Every transformation method returns a new dataset node with the receiver as its parent; the nodes
live in one module per family and are imported when a method is first called, so
``import grainlite`` stays cheap.

Beyond Grain's contract, a ``MapDataset`` may answer many indices at once through
:meth:`MapDataset._getitems`: nodes that can work on whole index arrays (a shuffle, a source with a
batched read) override it, and the iterator made by ``to_iter_dataset`` reads in blocks through it.
The results equal ``[ds[i] for i in indices]``; only the cost differs.

A node that may leave ``None`` holes says so (:attr:`MapDataset.leaves_holes`);
:func:`first_hole_maker`, over :func:`map_lineage`, is the one rule every walk that cares about
holes asks. Users subclass ``MapDataset`` (a constructor taking the parents, ``__len__``,
``__getitem__``); such subclasses work anywhere a built-in node does, including inside
``mp_prefetch``.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

from grainlite.dataset.node_base import _Dataset, _declared_by_grainlite

if TYPE_CHECKING:
    from grainlite.dataset.dataset_iterator import DatasetIterator
    from grainlite.dataset.iter_dataset import IterDataset
    from grainlite.dataset.map_batch import BatchMapDataset

T = TypeVar("T")
S = TypeVar("S")


def map_lineage(dataset: Any) -> Iterator[MapDataset]:
    """Every ``MapDataset`` node at or above ``dataset`` (through ``parents``) once."""
    pending, seen = [dataset], set()
    while pending:
        node = pending.pop()
        if id(node) in seen or not isinstance(node, MapDataset):
            continue
        seen.add(id(node))
        yield node
        pending.extend(node.parents)


def first_hole_maker(dataset: Any, *, count_unknown: bool) -> MapDataset | None:
    """The first node at or above ``dataset`` that leaves ``None`` holes (its
    :attr:`MapDataset.leaves_holes` is True), or, with ``count_unknown``, that may (None: a user's
    class); None if there is none. The one rule every walk that cares about holes asks."""
    for node in map_lineage(dataset):
        if node.leaves_holes or (count_unknown and node.leaves_holes is None):
            return node
    return None


class MapDataset(_Dataset, Generic[T], abc.ABC):
    """A lazy, random-access dataset: ``len(ds)`` elements, ``ds[i]`` computed on demand.

    Indices past ``len(ds)`` follow Grain: most nodes wrap them around (an epoch view over an
    endless index space); ``None`` marks an element a filter removed.
    """

    # Whether this node may answer ``None`` (a hole) where its parents have an element, so that
    # a block of its indices is not a block of elements: True for a filter and a
    # FlatMapMapDataset, False for grainlite's other nodes, None (unknown: it may) for a class
    # defined outside grainlite that does not declare it. Asked through first_hole_maker().
    leaves_holes: ClassVar[bool | None] = False

    # Whether this node permutes its parent differently in each epoch of an endless view (a
    # shuffle): a slice above it then wraps within itself (see grainlite.dataset.slice).
    reshuffles_each_epoch: ClassVar[bool] = False

    def batch_returned_as_is(self) -> BatchMapDataset | None:
        """The ``batch`` node with the default stacking whose batches this node returns as they
        are (itself, or through slices only): an ``mp_prefetch`` worker may stack them straight
        into its shared memory when it sends them. None here; asked by the ``to_iter_dataset``
        above (:meth:`IterDataset.map_batch_read_last`)."""
        return None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = "leaves_holes" in vars(cls) or _declared_by_grainlite(cls)
        if not declared and cls.leaves_holes is False:
            cls.leaves_holes = None

    def __init__(self, parents: MapDataset | Sequence[MapDataset] = ()) -> None:
        super().__init__(parents)

    # The random-access contract -------------------------------------------------------------
    @abc.abstractmethod
    def __len__(self) -> int:
        """The number of elements (of one epoch, for a repeated dataset: see ``repeat``)."""

    @overload
    def __getitem__(self, index: int) -> T | None: ...

    @overload
    def __getitem__(self, index: builtins.slice) -> MapDataset[T]: ...

    @abc.abstractmethod
    def __getitem__(self, index: Any) -> Any:
        """The element at ``index`` (``None`` where a filter removed it); a slice gives a view."""

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        """The elements at ``indices``, equal to ``[self[i] for i in indices]``; nodes vectorise.

        ``indices`` is any sequence of ints: a ``range`` (as ``to_iter_dataset`` passes), a list
        or an int64 array. A node that overrides this reads its parent's block through the
        parent's ``_getitems`` where it has one (a user's class may not).
        """
        return [self[int(i)] for i in indices]

    def __iter__(self) -> DatasetIterator[T]:
        return self.to_iter_dataset().__iter__()

    # Constructors ---------------------------------------------------------------------------
    @staticmethod
    def source(source: Any) -> MapDataset:
        """A dataset over any sequence or random-access source (``len`` and ``__getitem__``)."""
        from grainlite.dataset.source import SourceMapDataset

        return SourceMapDataset(source)

    @staticmethod
    def range(start: int, stop: int | None = None, step: int = 1) -> MapDataset[int]:
        """The integers of ``range(start, stop, step)``."""
        from grainlite.dataset.source import RangeMapDataset

        return RangeMapDataset(start, stop, step)

    @staticmethod
    def mix(datasets: Sequence[MapDataset], weights: Sequence[float] | None = None) -> MapDataset:
        """Interleaves ``datasets`` in proportion to ``weights`` (equal by default)."""
        from grainlite.dataset.mixed_datasets import MixedMapDataset

        return MixedMapDataset(datasets, weights)

    @staticmethod
    def concatenate(datasets: Sequence[MapDataset]) -> MapDataset:
        """The elements of each dataset in turn."""
        from grainlite.dataset.select import ConcatenateMapDataset

        return ConcatenateMapDataset(datasets)

    @staticmethod
    def select_from_datasets(datasets: Sequence[MapDataset], selection_map: Any) -> MapDataset:
        """Elements picked from ``datasets`` by a :class:`~grainlite.DatasetSelectionMap`."""
        from grainlite.dataset.select import SelectionMapDataset

        return SelectionMapDataset(datasets, selection_map)

    # Transformations ------------------------------------------------------------------------
    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> MapDataset:
        """Groups consecutive elements into batches (numpy arrays stacked leaf by leaf)."""
        from grainlite.dataset.map_batch import BatchMapDataset

        return BatchMapDataset(self, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)

    def filter(self, transform: Any) -> MapDataset[T]:
        """Keeps elements for which ``transform`` is true; the others become ``None`` holes."""
        from grainlite.dataset.map import FilterMapDataset

        return FilterMapDataset(self, transform)

    def map(self, transform: Any) -> MapDataset:
        """Applies a ``Map`` (or a plain callable) to each element."""
        from grainlite.dataset.map import MapMapDataset

        return MapMapDataset(self, transform)

    def random_map(self, transform: Any, *, seed: int | None = None) -> MapDataset:
        """Applies a ``RandomMap`` with a generator that depends only on the seed and the index."""
        from grainlite.dataset.map import RandomMapMapDataset

        return RandomMapMapDataset(self, transform, seed=seed)

    def map_with_index(self, transform: Any) -> MapDataset:
        """Applies a ``MapWithIndex`` (or a callable of ``(index, element)``)."""
        from grainlite.dataset.map import MapWithIndexMapDataset

        return MapWithIndexMapDataset(self, transform)

    def shuffle(self, seed: int | None = None) -> MapDataset[T]:
        """A global shuffle, bit-exact with Grain's, reshuffled in each epoch of an endless view."""
        from grainlite.dataset import shuffle

        return shuffle.ShuffleMapDataset(self, seed=seed)

    def seed(self, seed: int) -> MapDataset[T]:
        """Sets the default seed that downstream random nodes without their own seed derive from."""
        from grainlite.dataset.seed import with_seed

        return with_seed(self, seed)

    def repeat(
        self, num_epochs: int | None = None, *, reseed_each_epoch: bool = True
    ) -> MapDataset[T]:
        """Repeats the dataset ``num_epochs`` times (``None``: endlessly)."""
        from grainlite.dataset import repeat

        return repeat.RepeatMapDataset(
            self, num_epochs=num_epochs, reseed_each_epoch=reseed_each_epoch
        )

    def slice(self, sl: builtins.slice) -> MapDataset[T]:
        """The elements ``sl`` selects, as a view (``ds[start:stop:step]``)."""
        from grainlite.dataset.slice import SliceMapDataset

        return SliceMapDataset(self, sl)

    def apply(self, transformations: Any) -> MapDataset:
        """Applies a transformation or a list of them (Map, RandomMap, Filter, Batch, ...)."""
        from grainlite.dataset import apply

        return apply.apply_transformations(self, transformations)

    def to_iter_dataset(
        self, read_options: Any = None, *, allow_nones: bool = False
    ) -> IterDataset[T]:
        """An ``IterDataset`` over the elements in order, read in blocks, holes skipped."""
        from grainlite.dataset import to_iter

        return to_iter.ToIterDataset(self, read_options=read_options, allow_nones=allow_nones)
