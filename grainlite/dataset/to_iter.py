"""``MapDataset.to_iter_dataset()``: the ``IterDataset`` node that reads a ``MapDataset`` in order.

``PrefetchIterDataset`` (Grain's name; ``ToIterDataset`` too) holds the parent, the
``ReadOptions`` (grainlite's or Grain's) and ``allow_nones``, and takes Grain's in-place worker
slicing hooks for ``mp_prefetch``. Its iterator, which does the reading, is
:class:`grainlite.dataset.prefetch_iterator.PrefetchDatasetIterator`; the node stays small so
what a pipeline is made of reads apart from how it is read.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from grainlite.dataset import element_spec
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.prefetch_iterator import PrefetchDatasetIterator
from grainlite.errors import GrainliteTypeError
from grainlite.options import ReadOptions

if TYPE_CHECKING:
    from grainlite.dataset.map_batch import BatchMapDataset


def _check_read_options(read_options: Any) -> Any:
    """``read_options`` or the default; anything with ``num_threads`` and
    ``prefetch_buffer_size`` (grainlite's or Grain's ``ReadOptions``)."""
    if read_options is None:
        return ReadOptions()
    if not (hasattr(read_options, "num_threads") and hasattr(read_options, "prefetch_buffer_size")):
        raise GrainliteTypeError(
            f"to_iter_dataset(read_options=...) must be a ReadOptions (got {read_options!r} of "
            f"type {type(read_options).__name__}); pass grain.ReadOptions(num_threads=..., "
            "prefetch_buffer_size=...) or leave it out for the defaults."
        )
    return read_options


class PrefetchIterDataset(IterDataset):
    """The elements of a ``MapDataset`` in index order, read ahead (Grain's ``to_iter_dataset``).

    Args:
      parent: the ``MapDataset`` to read.
      read_options: reader threads and read-ahead depth (``ReadOptions``; Grain's defaults).
      allow_nones: yield the ``None`` holes of a filter instead of skipping them.

    Worker slicing (for ``mp_prefetch``): :meth:`set_slice` (Grain's hook) and
    :meth:`set_block_share` make this node read a share of ``parent`` in place, so worker ``w``
    of ``W`` reads the elements ``[w::W]`` (or a contiguous range); its ``next_index`` counts
    positions within that share, as Grain's workers do.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(
        self, parent: MapDataset, *, read_options: Any = None, allow_nones: bool = False
    ) -> None:
        super().__init__(parent)
        self._read_options = _check_read_options(read_options)
        self._allow_nones = bool(allow_nones)

    @property
    def read_options(self) -> Any:
        """The ``ReadOptions`` the iterators read with."""
        return self._read_options

    @property
    def allow_nones(self) -> bool:
        """Whether the iterators yield ``None`` holes instead of skipping them."""
        return self._allow_nones

    def map_batch_read_last(self) -> BatchMapDataset | None:
        """The parent's :meth:`~grainlite.dataset.map_dataset.MapDataset.batch_returned_as_is`: this
        node hands out the elements it reads as they are (grainlite's own node; a subclass may
        change them)."""
        if type(self) is not PrefetchIterDataset:
            return None
        return self._parent.batch_returned_as_is()

    def set_slice(self, sl: builtins.slice, sequential_slice: bool = False) -> None:
        """Grain's in-place slicing hook: from now on this node reads ``parent.slice(sl)``.

        With ``sequential_slice``, ``sl`` is ``slice(worker, None, workers)`` and the node reads
        that worker's contiguous range instead (sized as ``numpy.array_split`` sizes them).
        """
        if sequential_slice:
            self.set_block_share(1, sl.start or 0, sl.step or 1, sequential=True)
        else:
            self._parents = (self._parent.slice(sl),)

    def set_block_share(
        self, block: int, worker: int, workers: int, sequential: bool = False
    ) -> None:
        """Makes this node read worker ``worker`` of ``workers``'s share of its ``MapDataset``,
        in place: blocks of ``block`` consecutive indices, block ``k`` going to worker
        ``k % workers`` (with ``sequential``, the worker's contiguous run of blocks). ``block``
        is 1, element by element (Grain's share), except under ``mp_prefetch``'s batch rule
        (google/grain#1129, :mod:`grainlite.dataset.mp.slicing`)."""
        from grainlite.dataset.source import sequential_share

        parent = self._parent
        if sequential:
            blocks = -(-len(parent) // block)
            start, stop = sequential_share(builtins.slice(worker, None, workers), blocks)
            self.set_slice(builtins.slice(start * block, stop * block))
        elif block == 1:
            self.set_slice(builtins.slice(worker, None, workers))
        else:
            from grainlite.dataset.slice import BlockStrideMapDataset

            self._parents = (BlockStrideMapDataset(parent, block, worker, workers),)

    def __iter__(self) -> PrefetchDatasetIterator:
        return PrefetchDatasetIterator(self)

    def __str__(self) -> str:
        return (
            f"PrefetchIterDataset(read_options={self._read_options}, "
            f"allow_nones={self._allow_nones})"
        )


ToIterDataset = PrefetchIterDataset
