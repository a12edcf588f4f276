"""``MapDataset.batch``: batch ``i`` stacks parent elements ``i * batch_size`` onwards.

The rules, learned by running Grain 0.2.18: batch ``i`` holds elements
``[i * batch_size, (i + 1) * batch_size)`` of the parent; there are ``ceil(n / batch_size)``
batches, or ``n // batch_size`` with ``drop_remainder`` (the short last batch is left out).
``ds[i]`` past the end, or negative, reads the parent's later (or earlier) epochs: with
``e, b = divmod(i, len(ds))`` it is batch ``b`` over parent indices offset by ``e * n``, so a
shuffle or a random_map upstream gives that epoch's elements (a parent that wraps gives the same
ones again). It cannot follow a ``filter`` or a ``FlatMapMapDataset`` anywhere upstream (their
``None`` holes would land inside batches): that raises ValueError at construction, and the fix is
to batch after ``to_iter_dataset()``. A user's node that returns ``None`` is not detected: a
batch of only ``None`` is ``None``, a batch mixing ``None`` with elements raises ValueError, and a
custom ``batch_fn`` receives the ``None`` values as they are. The argument checks and the default
``batch_fn`` are :mod:`~grainlite.dataset.batch_arguments`'s.

A batch reads all its elements with one ``_getitems`` call on the parent (blocks of batches with
one call for the block) and stacks once; grainlite's own node with the default stacking fills
each batch row by row as the elements are made, and an ``mp_prefetch`` worker may make it fill
them in shared memory (:meth:`BatchMapDataset.stack_with`).
"""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index, parent_getitems
from grainlite.dataset.batch_arguments import check_batch_arguments, stack
from grainlite.dataset.map import parent_stream
from grainlite.dataset.map_dataset import MapDataset, first_hole_maker
from grainlite.errors import GrainliteValueError
from grainlite.transforms.batch_rows import batch_as_they_come, rows_pay


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
        self._batch_size, self._batch_fn = check_batch_arguments(batch_size, batch_fn)
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
            stream = parent_stream(self._parent)(rows)
            return batch_as_they_come(stream, len(rows), None, stack, self._rows_do_not_pay)
        return self._batch_fn(self._noted(parent_getitems(self._parent)(rows)))

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        if len(indices) <= 1:
            return [self[int(index)] for index in indices]
        if not len(self):
            return [self[int(index)] for index in indices]
        rows, bounds = self._rows(indices)
        if self._in_rows:  # each element into its batch row as it is made
            stream = parent_stream(self._parent)(rows)
            note = self._rows_do_not_pay
            return [
                batch_as_they_come(itertools.islice(stream, b - a), b - a, None, stack, note)
                for a, b in itertools.pairwise(bounds)
            ]
        values = self._noted(parent_getitems(self._parent)(rows))
        batch_fn = self._batch_fn
        return [batch_fn(values[a:b]) for a, b in itertools.pairwise(bounds)]

    @property
    def _in_rows(self) -> bool:
        """Whether batches are filled row by row as the elements are made, in private memory
        (:func:`~grainlite.transforms.batch_rows.batch_as_they_come`): grainlite's own node with
        the default stacking, outside an ``mp_prefetch`` worker (which fills shared memory),
        while its elements are ones rows pay for (:attr:`_rows_pay`). A batch of decoded images
        then never holds its elements and itself at once (the images benchmark's Dataset API at
        W=0: peak RSS 167-169 MB before, 149-156 MB after)."""
        return self._rows_pay and self._fill is None and self.fills_shared_memory

    _rows_pay = True
    """False once a batch's first element was too small for rows (or of another kind,
    :func:`~grainlite.transforms.batch_rows.rows_pay`): such batches are stacked at the end all
    the same, so the next ones read their elements in one block, each not made alone through
    the parents' streams (the Dataset API at W=0 on 16-byte records: see the performance page).
    True again when a block's first element is one rows pay for. Only how elements are
    gathered changes: the same calls in the same order, the same batches and errors."""

    def _rows_do_not_pay(self) -> None:
        self._rows_pay = False

    def _noted(self, values: list[Any]) -> list[Any]:
        """``values``, a block read without rows; notes whether rows pay for them again (the
        elements grew), where this node fills rows at all (here, or in a worker's copy)."""
        may_fill = self._fill is not None or self.fills_shared_memory
        if values and may_fill and not self._rows_pay and rows_pay(values[0]):
            self._rows_pay = True
        return values

    def _stream(self, indices: Sequence[int]) -> Iterator[Any]:
        """``_getitems`` one batch at a time: each batch's rows are one block read of the
        parent (a batch is made when all its rows are), so a batch is handed out before the
        next one's rows are read."""
        fill = self._fill
        if fill is not None and len(indices) and len(self):
            # Each element into its row as it is made (stack_with), while rows pay.
            stream = parent_stream(self._parent)
            getitems = parent_getitems(self._parent)
            rows, bounds = self._rows(indices)
            for a, b in itertools.pairwise(bounds):
                if self._rows_pay:
                    yield fill(stream(rows[a:b]), b - a, stacked=self._rows_do_not_pay)
                    continue
                yield self._batch_fn(self._noted(getitems(rows[a:b])))
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

    _fill: Callable[..., Any] | None = None

    def stack_with(
        self,
        batch_fn: Callable[[list[Any]], Any],
        fill: Callable[..., Any] | None = None,
    ) -> None:
        """Makes this node batch with ``batch_fn`` in place of the default stacking, and, where
        ``fill`` is given, make a batch it streams (:meth:`_stream`) with ``fill(elements,
        count, stacked=...)`` (:func:`~grainlite.transforms.batch_rows.batch_as_they_come`'s
        arguments), which takes each element as it is made while rows pay: an ``mp_prefetch``
        worker's private copy fills its rows in shared memory."""
        self._batch_fn = batch_fn
        self._fill = fill
