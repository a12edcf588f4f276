"""``StreamingShuffleMapDataset``: the streaming order (shards, then windows) as a Dataset node.

The Dataset API's form of :class:`~grainlite.sampling.streaming_sampler.StreamingSampler`: the
same order (:class:`~grainlite.sampling.streaming.StreamingOrder`, the rule in
``docs/how-to/streaming-order.md``) over a ``MapDataset`` whose keys form shards (the files of an
``ArrayRecordDataSource``, or fixed ranges). ``ds[i]`` reads ``parent[e * len(parent) + key]``
for ``e = i // len(ds)``, ``key`` the order's key of index ``i``, as ``shuffle`` passes the epoch
down, so an endless view (``repeat()`` above) reorders every epoch and a ``random_map`` below
draws new numbers each epoch. Hosts split the stream with Grain's usual slice
``ds[s::partitions]`` (with ``partitions`` hosts each then reads only its own block of keys), and
``ElasticIterator`` resumes it on any number of shards.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from grainlite.checks import int_option
from grainlite.dataset import element_spec
from grainlite.dataset._util import as_index, parent_getitems
from grainlite.dataset.map import parent_stream
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.seed import node_seed
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sampling.streaming import StreamingOrder, shard_ends

_NODE = "StreamingShuffleMapDataset"


class StreamingShuffleMapDataset(MapDataset):
    """``parent`` in the streaming order: its shards shuffled, then its records within windows.

    Args:
      parent: the dataset to reorder; its keys ``0 .. len(parent) - 1`` form the shards.
      shard_sizes: the records of each shard in key order (e.g. of each file); they add up to
        ``len(parent)``. Pass this or ``records_per_shard``.
      records_per_shard: fixed shards of this many consecutive keys (the last may be shorter).
      window_shards: how many shards are shuffled together (>= 1): the shards in use at once.
      seed: an int in ``[0, 2**32 - 1]``; None takes the default seed of an upstream
        ``ds.seed(...)``.
      partitions: contiguous blocks of keys, one per host (``ds[s::partitions]`` reads block
        ``s``); part of the order.
      drop_remainder: every block holds ``len(parent) // partitions`` keys; the rest is dropped.
    """

    _element_spec = property(element_spec.first_parent_spec)

    reshuffles_each_epoch = True

    def __init__(
        self,
        parent: MapDataset,
        *,
        shard_sizes: Sequence[int] | None = None,
        records_per_shard: int | None = None,
        window_shards: int,
        seed: int | None = None,
        partitions: int = 1,
        drop_remainder: bool = False,
    ) -> None:
        super().__init__(parent)
        length = len(parent)
        if length <= 0:
            raise GrainliteValueError(
                f"{_NODE}: the parent dataset is empty ({parent}); the streaming order needs "
                "records: reorder a dataset with at least one element."
            )
        ends = shard_ends(_NODE, length, shard_sizes, records_per_shard)
        window = int_option(
            window_shards,
            1,
            wrong_type=f"{_NODE}: window_shards must be an int, got {{type}} {{value}}; pass how "
            "many shards are shuffled together.",
            too_small=f"{_NODE}: window_shards must be >= 1, got {{value}}; pass how many shards "
            "are shuffled together.",
        )
        seed = node_seed(self, seed, _NODE)
        if not 0 <= seed <= 2**32 - 1:
            raise GrainliteValueError(
                f"{_NODE}: seed must be an int in [0, 2**32 - 1], got {seed}; pass e.g. "
                "seed % 2**32."
            )
        if isinstance(partitions, bool) or not isinstance(partitions, int):
            raise GrainliteTypeError(
                f"{_NODE}: partitions must be an int, got {type(partitions).__name__} "
                f"{partitions!r}; pass the number of hosts the order is laid out for."
            )
        if not 1 <= partitions <= length:
            raise GrainliteValueError(
                f"{_NODE}: partitions must be in [1, len(parent)={length}], got {partitions}; "
                "every partition needs a record."
            )
        self._order = StreamingOrder(length, ends, window, seed, partitions, bool(drop_remainder))

    @property
    def order(self) -> StreamingOrder:
        """The order this node reads (its rule, windows and shard of every key)."""
        return self._order

    def __len__(self) -> int:
        return self._order.epoch_length

    def _keys(self, indices: Sequence[int]) -> list[int]:
        """The parent indices that ``indices`` (each >= 0) read."""
        flat = np.asarray(indices, dtype=np.int64).reshape(-1)
        epoch = self._order.epoch_length
        # A negative index wraps into the epoch before 0, as a shuffle's does: that epoch reads
        # epoch 0's order (the order is defined for indices >= 0).
        keys = self._order.keys(np.where(flat >= 0, flat, flat % epoch))
        keys += flat // epoch * len(self._parent)
        result: list[int] = keys.tolist()
        return result

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        position = as_index(index, _NODE)
        return self._parent[self._keys([position])[0]]

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        if not len(indices):
            return []
        return parent_getitems(self._parent)(self._keys(indices))

    def _stream(self, indices: Sequence[int]) -> Iterator[Any]:
        """``_getitems`` one element at a time, through the parent's stream."""
        if not len(indices):
            return iter([])
        return parent_stream(self._parent)(self._keys(indices))

    def __str__(self) -> str:
        order = self._order
        return (
            f"{_NODE}(window_shards={order.window_shards}, partitions={order.partitions}, "
            f"seed={order.seed})"
        )
