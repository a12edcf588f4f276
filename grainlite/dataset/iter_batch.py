"""``IterDataset.batch``: ``batch_size`` consecutive elements of the stream per batch.

The rules, learned by running Grain 0.2.18: it pulls ``batch_size`` elements per batch; the
last, short batch is yielded unless ``drop_remainder``. Its state *is* the parent's state
(nothing is buffered between batches), and an exception from the parent loses the elements
already pulled for that batch. The argument checks and the default ``batch_fn`` are
:mod:`~grainlite.dataset.batch_arguments`'s.

The iterator pulls with ``islice``, which calls the parent's ``__next__`` from C, with no Python
work per element; in an ``mp_prefetch`` worker it may build each batch in shared memory
(:meth:`BatchDatasetIterator.stack_into`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from grainlite.dataset import element_spec
from grainlite.dataset.batch_arguments import check_batch_arguments, stack
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.stats.counters import StageCounter, clock
from grainlite.stats.tracing import span
from grainlite.transforms.batch import make_batch
from grainlite.transforms.batch_rows import BatchRows


class BatchIterDataset(IterDataset):
    """``IterDataset.batch``: ``batch_size`` consecutive elements of the stream per batch.

    Args:
      parent: the ``IterDataset`` to batch.
      batch_size: elements per batch, a positive int.
      drop_remainder: leave out the last batch when it is short.
      batch_fn: makes a batch from the list of elements; ``None`` stacks them.
    """

    _element_spec = property(element_spec.batch_spec)

    def __init__(
        self,
        parent: IterDataset,
        batch_size: int,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[Any]], Any] | None = None,
    ) -> None:
        super().__init__(parent)
        self._batch_size, self._batch_fn = check_batch_arguments(batch_size, batch_fn)
        self._drop_remainder = bool(drop_remainder)

    def __iter__(self) -> BatchDatasetIterator:
        return BatchDatasetIterator(
            iter(self._parent), self._batch_size, self._drop_remainder, self._batch_fn
        )

    @property
    def drop_remainder(self) -> bool:
        """Whether a short last batch is left out."""
        return self._drop_remainder

    @property
    def fixed_batch(self) -> int | None:
        """The batch size when each batch is exactly the next ``batch_size`` elements of the
        stream (grainlite's own node, whatever its ``batch_fn``); None for a subclass, whose
        ``__next__`` may group otherwise. Asked by ``mp_prefetch``'s batch rule
        (google/grain#1129)."""
        return self._batch_size if type(self) is BatchIterDataset else None

    @property
    def fills_shared_memory(self) -> bool:
        """Whether an ``mp_prefetch`` worker may stack this node's batches straight into its
        shared memory (see :meth:`BatchDatasetIterator.stack_into`): true for grainlite's own
        node with the default ``batch_fn``."""
        return type(self) is BatchIterDataset and self._batch_fn is stack

    def enable_shared_memory_output(self) -> None:
        """Grain's request to build batches in shared memory for ``mp_prefetch``'s transport.

        Accepted and recorded: grainlite's ``mp_prefetch`` already moves the batches its workers
        make through shared memory, so the batches given here stay plain arrays.
        """
        self._shared_memory_output = True

    def __str__(self) -> str:
        return (
            f"BatchIterDataset(batch_size={self._batch_size}, "
            f"drop_remainder={self._drop_remainder})"
        )


class BatchDatasetIterator(DatasetIterator):
    """Yields batches of the parent iterator's elements; its state is the parent's state."""

    def __init__(
        self,
        parent: DatasetIterator,
        batch_size: int,
        drop_remainder: bool,
        batch_fn: Callable[[list[Any]], Any],
    ) -> None:
        super().__init__(parent)
        self._batch_size = batch_size
        self._drop_remainder = drop_remainder
        self._batch_fn = batch_fn
        self._stats_stage = StageCounter("Batch", "batch")  # stacking timed for every batch

    def _get_next_index(self) -> int:
        """Grain's next index of a batch: the parent's next index over the batch size, rounded
        up (a short last batch counts)."""
        from grainlite.dataset.next_index import get_next_index

        return -(-get_next_index(self._parent) // self._batch_size)

    def _set_next_index(self, index: int) -> None:
        from grainlite.dataset.next_index import set_next_index

        set_next_index(self._parent, index * self._batch_size)

    _allocate: Callable[..., Any] | None = None  # set by stack_into

    def __next__(self) -> Any:
        if self._allocate is not None:
            return self._next_in_rows(self._allocate)
        return self._stacked(list(itertools.islice(self._parent, self._batch_size)))

    def _stacked(self, values: list[Any], spent: int = 0) -> Any:
        """The batch of ``values`` by ``batch_fn`` (StopIteration where there is none);
        ``spent``: nanoseconds this batch already took here, for its stats."""
        if not values or (self._drop_remainder and len(values) < self._batch_size):
            raise StopIteration
        with span("Batch"):  # a profiler span while a trace records
            begin = clock()
            try:
                return self._batch_fn(values)
            finally:
                self._stats_stage.add(spent + clock() - begin, len(values), 1)

    def _next_in_rows(self, allocate: Callable[..., Any]) -> Any:
        """The next batch, each large element copied into its row of ``allocate``'s memory as
        it comes (:class:`~grainlite.transforms.batch_rows.BatchRows`), so no two are held at
        once; others (small, or of another layout midway) are stacked by :meth:`_stacked`, as
        ``make_batch`` stacks them. Pulling the elements is not counted as this node's time."""
        parent, size = self._parent, self._batch_size
        first = next(parent)  # the stream's end: no batch
        begin = clock()
        rows = BatchRows.start(first, size, allocate) if size > 1 else None
        spent = clock() - begin
        if rows is None:
            return self._stacked([first, *itertools.islice(parent, size - 1)], spent)
        del first  # in its row: the element can go
        for element in itertools.islice(parent, size - 1):
            begin = clock()
            fits = rows.add(element)
            spent += clock() - begin
            if not fits:
                rest = itertools.islice(parent, size - rows.count - 1)
                return self._stacked([*rows.elements(copy=False), element, *rest], spent)
        if self._drop_remainder and rows.count < size:
            raise StopIteration
        with span("Batch"):
            begin = clock()
            batch = rows.batch()
            self._stats_stage.add(spent + clock() - begin, rows.count, 1)
        return batch

    def stack_into(self, allocate: Callable[..., Any]) -> None:
        """Makes the default stacking build each batch in ``allocate``'s memory (an
        ``mp_prefetch`` worker's shared memory), so it is sent without a copy, each large
        element copied into its row as it comes (:meth:`_next_in_rows`); a custom ``batch_fn``
        is kept. A batch that fails there is stacked again by :func:`stack`, which raises with
        its hints."""
        if type(self) is BatchDatasetIterator and self._batch_fn is stack:
            self._batch_fn = functools.partial(_stack_into, allocate=allocate)
            self._allocate = allocate

    def get_state(self) -> dict[str, Any]:
        """The parent's state: a batch iterator holds nothing between batches."""
        return self._parent.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the parent to ``state``."""
        self._parent.set_state(state)


def _stack_into(values: list[Any], allocate: Callable[..., Any]) -> Any:
    """:func:`~grainlite.transforms.batch.make_batch` into ``allocate``'s memory; a failure is
    raised by :func:`stack`, with its hints."""
    try:
        return make_batch(values, allocate)
    except Exception:
        return stack(values)
