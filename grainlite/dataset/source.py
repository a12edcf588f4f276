"""The leaves of a Dataset pipeline: ``MapDataset.source(seq)`` and ``MapDataset.range(...)``.

Both are random access with Grain's index rule: ``ds[i]`` is element ``i % len(ds)``, so indices
past the end (and negative ones) wrap around, which is what lets ``repeat`` and the endless epoch
views above read any index. Both answer a block of indices at once (:meth:`_getitems`): the source
through :func:`~grainlite.sources.protocol.read_many` (its batched ``__getitems__`` where it has
one; an error of the source names the record key it failed on, as in the DataLoader), the range
with numpy arithmetic.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index, empty_read, wrapped_keys
from grainlite.dataset.map_dataset import MapDataset
from grainlite.engine.packed_records import FixedSizeRecords, PicklesRecordsPacked
from grainlite.errors import NotSequentialSliceError
from grainlite.sources.list_reads import active_for
from grainlite.sources.protocol import read_many


def sequential_share(sl: builtins.slice, length: int) -> tuple[int, int]:
    """The contiguous ``[start, stop)`` that worker ``sl.start`` of ``sl.step`` reads.

    This is Grain's ``set_slice(slice(worker, None, workers), sequential_slice=True)``: instead of
    every ``workers``-th element, each worker takes one contiguous block (the sizes of
    ``numpy.array_split``), so a worker reads neighbouring records.
    """
    workers = sl.step or 1
    worker = sl.start or 0
    base, extra = divmod(length, workers)
    start = worker * base + min(worker, extra)
    return start, start + base + (worker < extra)


def check_sequential(sequential_slice: bool, node: str) -> None:
    if not sequential_slice:
        raise NotSequentialSliceError(
            f"{node}.set_slice(sl, sequential_slice=False) is not supported: a source takes "
            "only sequential slices (pass sequential_slice=True); ds[sl] slices any dataset."
        )


class _Window:
    """Records ``[start, stop)`` of a random-access source, read through the source (blocks are
    read from the source itself, by :meth:`SourceMapDataset._getitems`)."""

    def __init__(self, source: Any, start: int, stop: int) -> None:
        self.source, self.start, self.stop = source, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: int) -> Any:
        return self.source[self.start + index]


class SourceMapDataset(PicklesRecordsPacked, MapDataset):
    """A ``MapDataset`` over a random-access source: anything with ``len`` and ``__getitem__``.

    Lists, numpy arrays, grainlite's and Grain's data sources, TFDS and Hugging Face datasets all
    qualify. ``ds[i]`` reads ``source[i % len(source)]``; a block of indices is read with the
    source's ``__getitems__`` where it has one (one call instead of one per record).

    Args:
      source: the random-access source; it travels to worker processes, so it must pickle.
    """

    _packed_attribute = "_source"  # a large list of bytes records travels as one buffer

    def __init__(self, source: Any) -> None:
        super().__init__()
        self._source = source

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        length = len(self._source)
        if length == 0:
            raise empty_read(
                "SourceMapDataset",
                index,
                "the source is empty (len 0); build the dataset over a source with at least "
                "one record.",
            )
        return self._source[as_index(index, "SourceMapDataset") % length]

    def _hinted_source(self) -> Any:
        """The source whose ``prefetch_keys`` hears the keys ahead
        (:mod:`~grainlite.dataset.key_hints`): a window's own source."""
        source = self._source
        return source.source if isinstance(source, _Window) else source

    def _source_keys(self, indices: np.ndarray) -> np.ndarray:
        """The keys of :meth:`_hinted_source` that reading ``indices`` reads, as
        :meth:`_getitems` reads them."""
        length = len(self._source)
        if not length or not len(indices):
            return np.asarray(indices, dtype=np.int64)[:0]
        keys = wrapped_keys(indices, length)
        if isinstance(self._source, _Window):
            keys = keys + self._source.start
        return keys

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        length = len(self._source)
        if length == 0 or not len(indices):
            return [self[i] for i in indices]
        keys_array = wrapped_keys(indices, length)
        if isinstance(self._source, np.ndarray):  # one fancy-indexing read
            return list(self._source[keys_array])
        keys = keys_array.tolist()
        source = self._source
        if isinstance(source, _Window):  # read the records themselves, named by their own keys
            keys = [source.start + key for key in keys]
            source = source.source
        reads = active_for(source)  # the iterator's big list reads ahead (list_reads)
        if reads is not None:
            records = reads.take(keys)
            if records is not None:
                return records
        # The block read of both APIs: batched where the source can (ArrayRecord, in-memory and
        # range sources), a note naming the record key where the source fails.
        return read_many(source)(keys)

    def set_slice(self, sl: builtins.slice, sequential_slice: bool = False) -> None:
        """Keeps only worker ``sl.start`` of ``sl.step``'s contiguous block of records (in place).

        Grain's hook for ``mp_prefetch(sequential_slice=True)``; only sequential slices.
        """
        check_sequential(sequential_slice, "SourceMapDataset")
        start, stop = sequential_share(sl, len(self._source))
        source = self._source
        if isinstance(source, list | tuple | range | np.ndarray):
            self._source = source[start:stop]
        else:
            self._source = _Window(source, start, stop)

    def __str__(self) -> str:
        # A worker reads a list's records in place (FixedSizeRecords): it names the list still.
        kind = "list" if type(self._source) is FixedSizeRecords else type(self._source).__name__
        return f"SourceMapDataset(source={kind})"


class RangeMapDataset(MapDataset[int]):
    """The integers ``range(start, stop, step)`` as a ``MapDataset`` (Grain's ``MapDataset.range``).

    With one argument it counts from 0 (``range(5)`` is 0..4), as Python's ``range`` does, and it
    rejects what Python's ``range`` rejects (a zero step, non-integers) with the same error types.
    """

    _element_spec = property(element_spec.range_spec)

    def __init__(self, start: int, stop: int | None = None, step: int = 1) -> None:
        super().__init__()
        self._range = range(start) if stop is None else range(start, stop, step)
        self.start, self.stop, self.step = self._range.start, self._range.stop, self._range.step

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        length = len(self._range)
        if length == 0:
            raise empty_read(
                "RangeMapDataset",
                index,
                f"{self._range} is empty; pass a range with at least one integer.",
            )
        return self._range[as_index(index, "RangeMapDataset") % length]

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        length = len(self._range)
        if length == 0 or not len(indices):
            return [self[i] for i in indices]
        keys = wrapped_keys(indices, length)
        if abs(self.start) + abs(self.step) * length >= 2**62:  # beyond int64: Python ints
            return [self._range[k] for k in keys.tolist()]
        values: list[int] = (keys * self.step + self.start).tolist()
        return values

    def set_slice(self, sl: builtins.slice, sequential_slice: bool = False) -> None:
        """Keeps only worker ``sl.start`` of ``sl.step``'s contiguous block of integers (in place).

        Grain's hook for ``mp_prefetch(sequential_slice=True)``; only sequential slices.
        """
        check_sequential(sequential_slice, "RangeMapDataset")
        start, stop = sequential_share(sl, len(self._range))
        self._range = self._range[start:stop]
        self.start, self.stop, self.step = self._range.start, self._range.stop, self._range.step

    def __str__(self) -> str:
        return f"RangeMapDataset(start={self.start}, stop={self.stop}, step={self.step})"
