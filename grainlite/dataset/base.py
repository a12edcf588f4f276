"""The base classes of Grain's Dataset API: ``MapDataset``, ``IterDataset``, ``DatasetIterator``.

A ``MapDataset`` is lazy and random access (``len`` and ``ds[i]``); an ``IterDataset`` is a recipe
for iterators; a ``DatasetIterator`` is one pass with a JSON-able position (``get_state`` /
``set_state``). Every transformation method returns a new dataset node with the receiver as its
parent; the nodes live in one module per family and are imported when a method is first called, so
``import grainlite`` stays cheap.

Beyond Grain's contract, a ``MapDataset`` may answer many indices at once through
:meth:`MapDataset._getitems`: nodes that can work on whole index arrays (a shuffle, a source with a
batched read) override it, and the iterator made by ``to_iter_dataset`` reads in blocks through it.
The results equal ``[ds[i] for i in indices]``; only the cost differs.

Users subclass all three (a constructor taking the parents, ``__len__`` / ``__getitem__``,
``__iter__``, ``__next__``, ``get_state``, ``set_state``); such subclasses work anywhere a built-in
node does, including inside ``mp_prefetch``.
"""

from __future__ import annotations

import abc
import builtins
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

if TYPE_CHECKING:
    from grainlite.dataset.batch import BatchMapDataset

T = TypeVar("T")
S = TypeVar("S")


def _declared_by_grainlite(cls: type) -> bool:
    return cls.__module__ == "grainlite" or cls.__module__.startswith("grainlite.")


def _in_options_scope(iter_fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``iter_fn`` (an ``IterDataset.__iter__``), run with the DatasetOptions of the whole
    pipeline in force: :func:`grainlite.dataset.options.pipeline_scope` is the rule."""

    @functools.wraps(iter_fn)
    def __iter__(self: Any) -> Any:
        from grainlite.dataset.options import pipeline_scope

        with pipeline_scope(self):
            return iter_fn(self)

    __iter__._builds_in_options_scope = True  # type: ignore[attr-defined]
    return __iter__


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


def _as_parents(parents: Any) -> tuple[Any, ...]:
    """The parents given to a constructor, as a tuple (one dataset or a sequence of them)."""
    if isinstance(parents, MapDataset | IterDataset | DatasetIterator):
        return (parents,)
    return tuple(parents)


class _Dataset:
    """What both dataset kinds share: parents, the default seed and ``pipe``."""

    def __init__(self, parents: Any = ()) -> None:
        self._parents = _as_parents(parents)
        self._seed_override: int | None = None

    @property
    def parents(self) -> Sequence[Any]:
        """The datasets this one reads from (empty for a source)."""
        return getattr(self, "_parents", ())

    @property
    def _parent(self) -> Any:
        """The single parent of a one-input node."""
        parents = self.parents
        if len(parents) != 1:
            raise ValueError(
                f"{type(self).__name__} has {len(parents)} parents; `_parent` is defined for "
                "nodes with exactly one."
            )
        return parents[0]

    @property
    def _default_seed(self) -> int | None:
        """The seed that random nodes without their own ``seed=`` use (from ``.seed(...)``)."""
        from grainlite.dataset.seed import default_seed

        return default_seed(self)

    def pipe(self, func: Callable[..., S], /, *args: Any, **kwargs: Any) -> S:
        """Returns ``func(self, *args, **kwargs)``: chains a user's function like a method."""
        return func(self, *args, **kwargs)


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
        from grainlite.dataset.mix import MixedMapDataset

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
        from grainlite.dataset.batch import BatchMapDataset

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


class IterDataset(_Dataset, Generic[T], abc.ABC):
    """A recipe for iterators: each ``iter(ds)`` is a fresh pass with its own position."""

    # True for a node that gives exactly one element for each element of its single parent, in
    # order (a map): the mp_prefetch batch rule (grainlite.dataset.mp.slicing) may look
    # through it. False for every other node, and for a class defined outside grainlite that
    # does not declare it.
    one_to_one: ClassVar[bool] = False

    def map_batch_read_last(self) -> BatchMapDataset | None:
        """The ``MapDataset.batch`` (default stacking) whose batches this node returns as they
        are: a ``to_iter_dataset()`` over it, through slices only (see
        :meth:`MapDataset.batch_returned_as_is`); None here. Asked by ``mp_prefetch``, which then
        fills that batch's rows in shared memory when a batch is sent."""
        return None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "one_to_one" not in vars(cls) and not _declared_by_grainlite(cls):
            cls.one_to_one = False
        own_iter = vars(cls).get("__iter__")
        if own_iter is not None and not getattr(own_iter, "_builds_in_options_scope", False):
            cls.__iter__ = _in_options_scope(own_iter)  # type: ignore[method-assign]

    def __init__(
        self, parents: MapDataset | IterDataset | Sequence[MapDataset | IterDataset] = ()
    ) -> None:
        super().__init__(parents)

    @abc.abstractmethod
    def __iter__(self) -> DatasetIterator[T]:
        """A new iterator at the start of the stream."""

    @staticmethod
    def mix(
        datasets: Sequence[IterDataset] | Mapping[str, IterDataset],
        weights: Sequence[float] | Mapping[str, float] | None = None,
    ) -> IterDataset:
        """Interleaves ``datasets`` in proportion to ``weights``, until one of them ends."""
        from grainlite.dataset.mix import MixedIterDataset

        return MixedIterDataset(datasets, weights)

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> IterDataset:
        """Groups consecutive elements into batches (numpy arrays stacked leaf by leaf)."""
        from grainlite.dataset.batch import BatchIterDataset

        return BatchIterDataset(self, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)

    def filter(self, transform: Any) -> IterDataset[T]:
        """Keeps elements for which ``transform`` is true."""
        from grainlite.dataset.map_iter import FilterIterDataset

        return FilterIterDataset(self, transform)

    def map(self, transform: Any) -> IterDataset:
        """Applies a ``Map`` (or a plain callable) to each element."""
        from grainlite.dataset.map_iter import MapIterDataset

        return MapIterDataset(self, transform)

    def random_map(self, transform: Any, *, seed: int | None = None) -> IterDataset:
        """Applies a ``RandomMap`` with a generator derived from the seed and the element count."""
        from grainlite.dataset.map_iter import RandomMapIterDataset

        return RandomMapIterDataset(self, transform, seed=seed)

    def map_with_index(self, transform: Any) -> IterDataset:
        """Applies a ``MapWithIndex`` (or a callable of ``(index, element)``)."""
        from grainlite.dataset.map_iter import MapWithIndexIterDataset

        return MapWithIndexIterDataset(self, transform)

    def seed(self, seed: int) -> IterDataset[T]:
        """Sets the default seed that downstream random nodes without their own seed derive from."""
        from grainlite.dataset.seed import with_seed

        return with_seed(self, seed)

    def apply(self, transformations: Any) -> IterDataset:
        """Applies a transformation or a list of them (Map, RandomMap, Filter, Batch, ...)."""
        from grainlite.dataset import apply

        return apply.apply_transformations(self, transformations)

    def mp_prefetch(
        self,
        options: Any = None,
        worker_init_fn: Callable[[int, int], None] | None = None,
        sequential_slice: bool = False,
        backend: Any = None,
    ) -> IterDataset[T]:
        """Runs this pipeline in grainlite worker processes, interleaving their output.

        ``backend=grainlite.ray.RayWorkers(num_workers=N)`` runs the workers as Ray actors
        instead (same elements, order and states; docs/how-to/ray.md).
        """
        from grainlite.dataset.mp import prefetch

        return prefetch.MultiprocessPrefetchIterDataset(
            self,
            options,
            worker_init_fn=worker_init_fn,
            sequential_slice=sequential_slice,
            backend=backend,
        )

    def prefetch(self, multiprocessing_options: Any) -> IterDataset[T]:
        """Deprecated spelling of :meth:`mp_prefetch` (Grain's); kept so old code runs."""
        from grainlite.dataset.mp import prefetch

        return prefetch.deprecated_prefetch(self, multiprocessing_options)


class DatasetIterator(Generic[T], Iterator[T], abc.ABC):
    """One pass over a dataset, with a JSON-able position.

    ``get_state()`` returns a dict of plain JSON values (the shapes equal Grain's for every node);
    ``set_state(state)`` moves the iterator there, so the next element is the one that followed
    when the state was taken. ``close()`` releases threads, processes and shared memory of this
    iterator and every iterator it reads from; it is idempotent and also runs on ``with`` exit.
    """

    def __init__(self, parents: DatasetIterator | Sequence[DatasetIterator] = ()) -> None:
        # Any iterator is one parent, not a sequence of them: a user's ``__iter__`` may return
        # a generator or an iterator of its own class, and reading it here as a sequence would
        # consume its elements (and never end for an endless one).
        self._parents = (parents,) if isinstance(parents, Iterator) else _as_parents(parents)
        self._closed = False

    @property
    def _parent(self) -> DatasetIterator:
        parents: tuple[Any, ...] = getattr(self, "_parents", ())
        if len(parents) != 1:
            raise ValueError(
                f"{type(self).__name__} has {len(parents)} parent iterators; `_parent` is "
                "defined for iterators with exactly one."
            )
        return parents[0]

    def __iter__(self) -> DatasetIterator[T]:
        return self

    @abc.abstractmethod
    def __next__(self) -> T:
        """The next element; ``StopIteration`` at the end of the stream."""

    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]:
        """The position after the last element returned, as JSON-able values."""

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to the position ``state`` (from ``get_state`` here or in Grain)."""

    def stats(self) -> Any:
        """Where this iterator's time went, per node, with a diagnosis (a
        :class:`~grainlite.stats.report.Stats`; ``print()`` it for a table).

        Nodes that count: ``to_iter_dataset`` (block reads) and the MapDataset ``map``,
        ``filter``, ``random_map``, ``map_with_index`` it reads through (per block); the
        IterDataset ``map``, ``filter``, ``random_map`` (timed on a sample of elements) and
        ``batch``; and ``mp_prefetch`` (the workers' own nodes, transport, the consumer's wait).
        Other nodes are left out.
        """
        from grainlite.stats.collect import dataset_stats

        return dataset_stats(self)

    def start_prefetch(self) -> None:
        """Starts reading ahead now (threads, worker processes) instead of at the first ``next()``.

        Nodes without read-ahead pass the call on to the iterators they read from, so calling it
        on the last iterator of a pipeline starts every read-ahead below it.
        """
        for parent in getattr(self, "_parents", ()):
            start = getattr(parent, "start_prefetch", None)
            if start is not None:
                start()

    def close(self) -> None:
        """Releases this iterator's resources and those of every iterator it reads from."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        for parent in getattr(self, "_parents", ()):
            if isinstance(parent, DatasetIterator) or hasattr(parent, "close"):
                parent.close()

    def __enter__(self) -> DatasetIterator[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
