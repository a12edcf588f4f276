"""``IterDataset``: a recipe for iterators, each ``iter(ds)`` a fresh pass with its own position.

Every transformation method returns a new dataset node with the receiver as its parent, its module
imported when the method is first called. Every ``__iter__`` of a subclass, grainlite's or a
user's, runs with the DatasetOptions of the whole pipeline in force (:func:`_in_options_scope`
wraps it when the class is made). Users subclass ``IterDataset`` (a constructor taking the
parents, ``__iter__``); such subclasses work anywhere a built-in node does, including inside
``mp_prefetch``.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from grainlite.dataset.node_base import _Dataset, _declared_by_grainlite

if TYPE_CHECKING:
    from grainlite.dataset.dataset_iterator import DatasetIterator
    from grainlite.dataset.map_batch import BatchMapDataset
    from grainlite.dataset.map_dataset import MapDataset

T = TypeVar("T")
S = TypeVar("S")


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
        from grainlite.dataset.mixed_datasets import MixedIterDataset

        return MixedIterDataset(datasets, weights)

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> IterDataset:
        """Groups consecutive elements into batches (numpy arrays stacked leaf by leaf)."""
        from grainlite.dataset.iter_batch import BatchIterDataset

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
