"""``RebatchIterDataset`` and ``batch_and_pad``: batches of a new size, and padded batches.

``RebatchIterDataset(parent, batch_size, drop_remainder=False)`` takes a stream of batches (trees of
arrays with one leading dimension) and yields batches of ``batch_size`` rows, cut from and joined
across the parent's batches, in order; the last one is short unless ``drop_remainder``. A parent
batch of 0 rows is a ValueError (Grain's too). Its state,
as in Grain 0.2.18 (learned by running it), is ``{"parent": <the parent's state before the batch
now being cut>, "batch_idx": <rows of that batch already used>}``: the parent's state is taken
before each read of the parent, and ``batch_idx`` starts again at 0 only when a read returns a
batch. Restoring reads that batch again and skips its used rows.

``batch_and_pad(values, *, batch_size, pad_value=0)`` stacks ``values`` like ``batch`` and fills
the rows up to ``batch_size`` with ``pad_value`` (every leaf, in its dtype): a ``batch_fn`` that
keeps the shapes static for the last, short batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from grainlite import tree
from grainlite.dataset import element_spec
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.transforms.batch import make_batch, validate_batch_size


def batch_and_pad(values: Sequence[Any], *, batch_size: int, pad_value: Any = 0) -> Any:
    """Stacks ``values`` and pads every leaf to ``batch_size`` rows with ``pad_value``.

    Args:
      values: at most ``batch_size`` elements of one structure.
      batch_size: the rows of the result.
      pad_value: the value of the padding rows (cast to each leaf's dtype).

    Raises:
      ValueError: ``values`` is empty or longer than ``batch_size`` (Grain's texts first).
    """
    count = len(values)
    if count == 0:
        raise GrainliteValueError(
            "Cannot batch 0 values. batch_and_pad needs at least one element to learn the "
            "shapes and dtypes to pad; drop empty batches before it."
        )
    if count > batch_size:
        raise GrainliteValueError(
            f"Cannot batch {count} values to {batch_size}. batch_and_pad pads up to batch_size "
            f"and never cuts; pass batch_size >= {count}."
        )
    batch = make_batch(list(values))
    if count == batch_size:
        return batch

    def pad(leaf: Any) -> Any:
        array = np.asarray(leaf)
        filler = np.full((batch_size - count, *array.shape[1:]), pad_value, dtype=array.dtype)
        return np.concatenate([array, filler])

    return tree.map_leaves_keeping_order(pad, batch)


def _rows(batch: Any) -> int:
    leaves = tree.leaves_with_paths(batch)
    if not leaves:
        return 0
    first = leaves[0][1]
    shape = getattr(first, "shape", None)
    if not shape:
        raise GrainliteTypeError(
            f"RebatchIterDataset needs batches (arrays with a leading batch dimension) from its "
            f"parent, got an element whose leaf is {first!r} of type {type(first).__name__}; "
            "batch the stream first (ds.batch(n)) or use ds.batch instead of rebatching."
        )
    rows = int(shape[0])
    if rows == 0:
        raise GrainliteValueError(
            "Rebatching with starting batch size of 0 is not supported: RebatchIterDataset got a "
            "parent batch of 0 rows and cannot learn the shapes to cut from it; leave empty "
            "batches out before rebatching (ds.filter(lambda b: len(<a leaf>) > 0))."
        )
    return rows


def _cut(batch: Any, start: int, stop: int) -> Any:
    return tree.map_leaves_keeping_order(lambda leaf: np.asarray(leaf)[start:stop], batch)


class RebatchIterDataset(IterDataset):
    """Batches of ``batch_size`` rows cut from a stream of batches of any size.

    Args:
      parent: a stream of batches (one leading dimension on every leaf).
      batch_size: rows per output batch, a positive int.
      drop_remainder: leave out the last batch when it is short.
    """

    _element_spec = property(element_spec.rebatch_spec)

    def __init__(self, parent: IterDataset, batch_size: int, drop_remainder: bool = False) -> None:
        super().__init__(parent)
        self._batch_size = validate_batch_size(batch_size)
        self._drop_remainder = bool(drop_remainder)

    def __iter__(self) -> RebatchDatasetIterator:
        return RebatchDatasetIterator(iter(self._parent), self._batch_size, self._drop_remainder)

    def __str__(self) -> str:
        return (
            f"RebatchIterDataset(batch_size={self._batch_size}, "
            f"drop_remainder={self._drop_remainder})"
        )


class RebatchDatasetIterator(DatasetIterator):
    """Cuts the parent's batches into ``batch_size`` rows; Grain's state (module docstring)."""

    def __init__(self, parent: DatasetIterator, batch_size: int, drop_remainder: bool) -> None:
        super().__init__(parent)
        self._batch_size = batch_size
        self._drop_remainder = drop_remainder
        self._state_before = parent.get_state()
        self._current: Any = None
        self._rows = 0
        self._used = 0
        self._pending = False  # set_state: read the batch being cut again at the next next()

    def _read(self) -> bool:
        """Reads the parent's next batch; False at its end (``batch_idx`` is then kept)."""
        self._state_before = self._parent.get_state()
        try:
            batch = next(self._parent)
        except StopIteration:
            self._current, self._rows = None, 0
            return False
        self._current, self._rows, self._used = batch, _rows(batch), 0
        return True

    def _reread(self) -> None:
        self._pending = False
        self._parent.set_state(self._state_before)
        try:
            batch = next(self._parent)
        except StopIteration:
            self._current, self._rows = None, 0
            return
        self._current, self._rows = batch, _rows(batch)

    def __next__(self) -> Any:
        if self._pending:
            self._reread()
        pieces, need = [], self._batch_size
        while need:
            if (self._current is None or self._used >= self._rows) and not self._read():
                break
            take = min(need, self._rows - self._used)
            if take:
                pieces.append(_cut(self._current, self._used, self._used + take))
            self._used += take
            need -= take
        if not pieces or (need and self._drop_remainder):
            raise StopIteration
        if len(pieces) == 1:
            return pieces[0]
        return tree.map_together(np.concatenate, pieces)

    def get_state(self) -> dict[str, Any]:
        """``{"parent": <state before the batch being cut>, "batch_idx": <its rows used>}``."""
        return {"parent": self._state_before, "batch_idx": self._used}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to ``state``; the batch being cut is read again at the next ``next()``."""
        self._state_before = state["parent"]
        self._used = int(state["batch_idx"])
        self._current, self._rows = None, 0
        self._pending = True

    def __str__(self) -> str:
        return f"RebatchDatasetIterator(batch_size={self._batch_size})"
