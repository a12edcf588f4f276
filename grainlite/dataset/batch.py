"""``batch`` for both dataset kinds: consecutive elements stacked leaf by leaf.

Batches are made by ``batch_fn(list_of_elements)``, by default
:func:`grainlite.transforms.batch.make_batch`, the function the ``DataLoader``'s ``Batch`` uses
(its arrays equal Grain's for dicts, tuples, namedtuples, scalars, strings and ``None`` leaves).
The rules, learned by running Grain 0.2.18:

* ``MapDataset.batch``: batch ``i`` holds elements ``[i * batch_size, (i + 1) * batch_size)``
  of the parent; there are ``ceil(n / batch_size)`` batches, or ``n // batch_size`` with
  ``drop_remainder`` (the short last batch is left out). ``ds[i]`` past the end, or negative,
  reads the parent's later (or earlier) epochs: with ``e, b = divmod(i, len(ds))`` it is batch
  ``b`` over parent indices offset by ``e * n``, so a shuffle or a random_map upstream gives that
  epoch's elements (a parent that wraps gives the same ones again). It cannot follow a
  ``filter`` or a ``FlatMapMapDataset`` anywhere upstream (their ``None`` holes would land inside
  batches): that raises ValueError at construction, and the fix is to batch after
  ``to_iter_dataset()``. A user's node that returns ``None`` is not detected: a batch of only
  ``None`` is ``None``, a batch mixing ``None`` with elements raises ValueError, and a custom
  ``batch_fn`` receives the ``None`` values as they are.
* ``IterDataset.batch``: pulls ``batch_size`` elements per batch; the last, short batch is
  yielded unless ``drop_remainder``. Its state *is* the parent's state (nothing is buffered
  between batches), and an exception from the parent loses the elements already pulled for
  that batch.
* ``batch_size`` must be a positive int (ValueError "batch_size must be positive." for 0 or less,
  TypeError for a non-integer); a ``batch_fn`` that is not callable is a TypeError.

A ``MapDataset`` batch reads all its elements with one ``_getitems`` call on the parent (blocks of
batches with one call for the block) and stacks once; the iterator pulls with ``islice``, which
calls the parent's ``__next__`` from C, with no Python work per element.
"""

from __future__ import annotations

import builtins
import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index, parent_getitems
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map import parent_stream
from grainlite.dataset.map_dataset import MapDataset, first_hole_maker
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.stats.counters import StageCounter, clock
from grainlite.stats.tracing import span
from grainlite.transforms.batch import make_batch, validate_batch_size
from grainlite.transforms.batch_rows import BatchRows, batch_as_they_come


def stack(values: list[Any]) -> Any:
    """The default ``batch_fn``: :func:`make_batch`, with a hint when ``None`` holes broke it."""
    try:
        return make_batch(values)
    except GrainliteValueError as error:
        holes = [position for position, value in enumerate(values) if value is None]
        if not holes:
            raise
        raise GrainliteValueError(
            f"{error} The batch has None at positions {holes}: None marks an element a sparse "
            "transformation (such as filter) removed. Batch after to_iter_dataset(), which "
            "skips them: ds.to_iter_dataset().batch(...)."
        ) from error


def _check_arguments(batch_size: Any, batch_fn: Any) -> tuple[int, Callable[[list[Any]], Any]]:
    size = validate_batch_size(batch_size)
    if batch_fn is None:
        return size, stack
    if not callable(batch_fn):
        raise GrainliteTypeError(
            f"batch_fn must be callable or None (got {batch_fn!r} of type "
            f"{type(batch_fn).__name__}); pass a function from the list of elements to the "
            "batch, or None to stack them."
        )
    return size, batch_fn


def _hole_maker_upstream(dataset: MapDataset) -> str | None:
    """The Grain name of a node at or above ``dataset`` that leaves ``None`` holes, if any (the
    rule of :func:`~grainlite.dataset.map_dataset.first_hole_maker`; a user's node is not
    refused)."""
    node = first_hole_maker(dataset, count_unknown=False)
    if node is None:
        return None
    return str(getattr(node, "hole_maker_name", type(node).__name__))


class BatchMapDataset(MapDataset):
    """``MapDataset.batch``: batch ``i`` stacks parent elements ``i * batch_size`` onwards.

    Args:
      parent: the ``MapDataset`` to batch (no filter upstream).
      batch_size: elements per batch, a positive int.
      drop_remainder: leave out the last batch when it is short.
      batch_fn: makes a batch from the list of elements; ``None`` stacks them.
    """

    _element_spec = property(element_spec.batch_spec)

    def __init__(
        self,
        parent: MapDataset,
        batch_size: int,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[Any]], Any] | None = None,
    ) -> None:
        super().__init__(parent)
        self._batch_size, self._batch_fn = _check_arguments(batch_size, batch_fn)
        self._drop_remainder = bool(drop_remainder)
        hole_maker = _hole_maker_upstream(parent)
        if hole_maker is not None:
            raise GrainliteValueError(
                f"`MapDataset.batch` can not follow `{hole_maker}` because `{hole_maker}` can "
                "discard elements, which would leave holes inside batches. Convert `MapDataset` "
                "to `IterDataset` with `to_iter_dataset()` before calling `batch`."
            )

    def __len__(self) -> int:
        size = len(self._parent)
        if self._drop_remainder:
            return size // self._batch_size
        return -(-size // self._batch_size)

    def _batch_rows(self, index: int, length: int) -> range:
        epoch, batch = divmod(index, length)
        total = len(self._parent)
        start = batch * self._batch_size
        return range(epoch * total + start, epoch * total + min(start + self._batch_size, total))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        index = as_index(index, "BatchMapDataset")
        length = len(self)
        if length == 0:
            raise ZeroDivisionError(
                f"BatchMapDataset index {index} cannot be read: the dataset has no batches "
                f"({len(self._parent)} elements, batch_size={self._batch_size}, "
                f"drop_remainder={self._drop_remainder}); batch a larger dataset, or keep the "
                "short batch with drop_remainder=False."
            )
        rows = self._batch_rows(index, length)
        if self._in_rows:
            return batch_as_they_come(parent_stream(self._parent)(rows), len(rows), None, stack)
        return self._batch_fn(parent_getitems(self._parent)(rows))

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        if len(indices) <= 1:
            return [self[int(index)] for index in indices]
        if not len(self):
            return [self[int(index)] for index in indices]
        rows, bounds = self._rows(indices)
        if self._in_rows:  # each element into its batch row as it is made
            stream = parent_stream(self._parent)(rows)
            return [
                batch_as_they_come(itertools.islice(stream, b - a), b - a, None, stack)
                for a, b in itertools.pairwise(bounds)
            ]
        values = parent_getitems(self._parent)(rows)
        batch_fn = self._batch_fn
        return [batch_fn(values[a:b]) for a, b in itertools.pairwise(bounds)]

    @property
    def _in_rows(self) -> bool:
        """Whether batches are filled row by row as the elements are made, in private memory
        (:func:`~grainlite.transforms.batch_rows.batch_as_they_come`): grainlite's own node with
        the default stacking, outside an ``mp_prefetch`` worker (which fills shared memory). A
        batch of decoded images then never holds its elements and itself at once (the images
        benchmark's Dataset API at W=0: peak RSS 167-169 MB before, 149-156 MB after)."""
        return self._fill is None and self.fills_shared_memory

    def _stream(self, indices: Sequence[int]) -> Iterator[Any]:
        """``_getitems`` one batch at a time: each batch's rows are one block read of the
        parent (a batch is made when all its rows are), so a batch is handed out before the
        next one's rows are read."""
        fill = self._fill
        if fill is not None and len(indices) and len(self):
            # Each element into its row as it is made (stack_with).
            stream = parent_stream(self._parent)
            rows, bounds = self._rows(indices)
            for a, b in itertools.pairwise(bounds):
                yield fill(stream(rows[a:b]), b - a)
            return
        if len(indices) <= 1 or not len(self):
            yield from self._getitems(indices)
            return
        rows, bounds = self._rows(indices)
        getitems = parent_getitems(self._parent)
        batch_fn = self._batch_fn
        for a, b in itertools.pairwise(bounds):
            yield batch_fn(getitems(rows[a:b]))

    @property
    def _rows_per_index(self) -> int:
        """Parent rows one index reads (:mod:`~grainlite.dataset.key_hints` sizes its hints)."""
        return self._batch_size

    def _parent_keys(self, indices: Any) -> Any:
        """The parent rows reading the batches at ``indices`` reads, in order
        (:mod:`~grainlite.dataset.key_hints`)."""
        if not len(indices) or not len(self):
            return indices[:0]
        return self._rows(indices)[0]

    def _rows(self, indices: Sequence[int]) -> tuple[list[int], list[int]]:
        """The parent rows of the batches at ``indices`` (one or more; some batches exist),
        and where each batch's rows start and end in them."""
        length, size, total = len(self), self._batch_size, len(self._parent)
        epochs, batches = np.divmod(np.asarray(indices, dtype=np.int64), length)
        sizes = np.minimum(size, total - batches * size)  # only an epoch's last batch is short
        offsets = np.arange(size)
        rows = (epochs * total + batches * size)[:, np.newaxis] + offsets
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        return rows[offsets < sizes[:, np.newaxis]].tolist(), bounds.tolist()

    def __str__(self) -> str:
        return (
            f"BatchMapDataset(batch_size={self._batch_size}, drop_remainder={self._drop_remainder})"
        )

    @property
    def fills_shared_memory(self) -> bool:
        """Whether a worker may stack this node's batches straight into its shared memory: true
        for grainlite's own node with the default ``batch_fn`` (a subclass or a custom
        ``batch_fn`` makes its batches itself, so they are copied there when sent)."""
        return type(self) is BatchMapDataset and self._batch_fn is stack

    def batch_returned_as_is(self) -> BatchMapDataset | None:
        """This node, when its batches may be stacked in shared memory
        (:attr:`fills_shared_memory`)."""
        return self if self.fills_shared_memory else None

    _fill: Callable[[Iterator[Any], int], Any] | None = None

    def stack_with(
        self,
        batch_fn: Callable[[list[Any]], Any],
        fill: Callable[[Iterator[Any], int], Any] | None = None,
    ) -> None:
        """Makes this node batch with ``batch_fn`` in place of the default stacking, and, where
        ``fill`` is given, make a batch it streams (:meth:`_stream`) with ``fill(elements,
        count)``, which takes each element as it is made: an ``mp_prefetch`` worker's private
        copy fills its rows in shared memory."""
        self._batch_fn = batch_fn
        self._fill = fill


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
        self._batch_size, self._batch_fn = _check_arguments(batch_size, batch_fn)
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
