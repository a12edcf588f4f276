"""``DatasetIterator``: one pass over a dataset, with a JSON-able position and ``close``.

``get_state`` / ``set_state`` save and restore the position in the shapes Grain uses; ``close``
releases what the iterator holds and cascades to the iterators it reads from, as
``start_prefetch`` does. Users subclass it (``__next__``, ``get_state``, ``set_state``); such
subclasses work anywhere a built-in iterator does, including inside ``mp_prefetch``.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

from grainlite.dataset.node_base import _as_parents

T = TypeVar("T")


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
