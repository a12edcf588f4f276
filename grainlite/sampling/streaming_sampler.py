"""``StreamingSampler``: the DataLoader's sampler for the streaming order (shards, then windows).

The order itself is :class:`~grainlite.sampling.streaming.StreamingOrder`; this module gives it a
sampler's shape (a length, metadata per index, per-record generators ``Philox(seed + i)`` as
Grain's samplers give them, a repr for checkpoints). Its repr names no host: every host builds the
same sampler, so a checkpoint restores onto another host or worker count through the DataLoader's
elastic rule (one index space shared by every layout).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from grainlite.checks import int_option
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sampling.samplers import (
    EPOCHS_FIX,
    KeyedSampler,
    check_num_records,
    check_shard_options,
    seed_type_error,
)
from grainlite.sampling.sharding import NoSharding, ShardOptions
from grainlite.sampling.streaming import StreamingOrder, shard_ends, shards_text

_NO_SHARDING = NoSharding()


class StreamingSampler(KeyedSampler):
    """Shards shuffled, then records shuffled within windows of ``window_shards`` shards.

    For data far larger than the local cache: at any time the records read come from the
    ``window_shards`` shards of one window (``docs/how-to/streaming-order.md`` states the rule).
    Every epoch reads every record once, in a new order; the order is a pure function of the
    global index, so checkpoints restore exactly, and onto other worker and host counts.

    Args:
      num_records: how many records the data source has (> 0).
      shard_sizes: the records of each shard in key order (e.g. of each file); they add up to
        ``num_records``. Pass this or ``records_per_shard``.
      records_per_shard: fixed shards of this many consecutive keys (the last may be shorter).
      window_shards: how many shards are shuffled together (>= 1): the shards in use at once.
      seed: an int in ``[0, 2**32 - 1]``: the order and the per-record generators
        ``Generator(Philox(key=seed + i))``.
      num_epochs: passes over the data, or None for an endless stream.
      shard_options: the DataLoader inherits these (which indices this host reads); without
        ``partitions``, their ``shard_count`` and ``drop_remainder`` also set the partitions.
      partitions: split the keys into this many contiguous blocks, one per host: host ``s`` of
        ``partitions`` hosts then reads only block ``s`` (a cache per host holds only its shards).
        Part of the order: keep it the same when resuming on another host count.
    """

    def __init__(
        self,
        num_records: int,
        *,
        shard_sizes: Sequence[int] | None = None,
        records_per_shard: int | None = None,
        window_shards: int,
        seed: int,
        num_epochs: int | None = None,
        shard_options: ShardOptions = _NO_SHARDING,
        partitions: int | None = None,
    ) -> None:
        owner = "StreamingSampler"
        self._num_records = check_num_records(owner, num_records)
        self._shard_options = check_shard_options(owner, shard_options)
        ends = shard_ends(owner, self._num_records, shard_sizes, records_per_shard)
        self._shards = shards_text(ends, records_per_shard)
        window = int_option(
            window_shards,
            1,
            wrong_type=f"{owner}: window_shards must be an int, got {{type}} {{value}}; pass how "
            "many shards are shuffled together (the shards a cache holds at once).",
            too_small=f"{owner}: window_shards must be >= 1, got {{value}}; pass how many shards "
            "are shuffled together.",
        )
        if num_epochs is not None:
            num_epochs = int_option(
                num_epochs,
                1,
                wrong_type=f"{owner}: num_epochs must be an int or None, got {{type}} {{value}}; "
                f"pass {EPOCHS_FIX}",
                too_small=f"{owner}: num_epochs must be >= 1, got {{value}}; pass {EPOCHS_FIX}",
            )
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise seed_type_error(seed, "an int in [0, 2**32 - 1]")
        if seed < 0 or seed.bit_length() > 32:
            raise GrainliteValueError(
                f"{owner}: seed must be an int in [0, 2**32 - 1], got {seed}; pass e.g. "
                "seed % 2**32."
            )
        if partitions is None:
            partitions = shard_options.shard_count
        elif isinstance(partitions, bool) or not isinstance(partitions, int):
            raise GrainliteTypeError(
                f"{owner}: partitions must be an int or None, got {type(partitions).__name__} "
                f"{partitions!r}; pass the host count the order is laid out for."
            )
        if not 1 <= partitions <= self._num_records:
            raise GrainliteValueError(
                f"{owner}: partitions must be in [1, num_records={self._num_records}], got "
                f"{partitions}; pass the host count of the first run (every partition needs a "
                "record)."
            )
        self._order = StreamingOrder(
            self._num_records, ends, window, seed, partitions, shard_options.drop_remainder
        )
        self._seed = seed
        self._num_epochs = num_epochs
        epoch = self._order.epoch_length
        self._length = sys.maxsize if num_epochs is None else num_epochs * epoch

    @property
    def order(self) -> StreamingOrder:
        """The order this sampler reads (its rule, windows and shard of every key)."""
        return self._order

    def record_keys(self, indices: np.ndarray) -> np.ndarray:
        """The record keys of global indices in ``[0, len)``, as an int64 array."""
        return self._order.keys(indices)

    def _longer_stream_hint(self) -> str:
        if self._num_epochs is None:
            return "this endless stream (num_epochs=None) ends at sys.maxsize"
        return f"for a longer stream pass num_epochs above {self._num_epochs}, or None (endless)"

    def __repr__(self) -> str:
        # No shard index: every host's sampler is the same, which elastic restore relies on.
        order = self._order
        return (
            f"StreamingSampler(num_records={self._num_records}, {self._shards}, "
            f"window_shards={order.window_shards}, partitions={order.partitions}, "
            f"drop_remainder={order.drop_remainder}, num_epochs={self._num_epochs}, "
            f"seed={self._seed})"
        )
