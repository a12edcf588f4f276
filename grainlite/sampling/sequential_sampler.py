"""``SequentialSampler``: global index ``i`` reads record ``i``, once, in order.

Grain's simplest sampler, with its record order, length and repr (checkpoints compare reprs). Its
keys are the indices themselves; the checks, ``__getitem__`` and the empty-shard warning are the
ones every built-in sampler shares (:mod:`grainlite.sampling.samplers`).
"""

from __future__ import annotations

import numpy as np

from grainlite.errors import GrainliteValueError
from grainlite.sampling.samplers import (
    NO_SHARDING,
    KeyedSampler,
    check_num_records,
    check_shard_options,
    seed_type_error,
    warn_empty_shard,
)
from grainlite.sampling.sharding import ShardOptions


class SequentialSampler(KeyedSampler):
    """Reads records in order: global index ``i`` reads record ``i``, for one pass over the data.

    The sampler does no sharding itself: host ``s`` of ``S`` reads the indices ``s, s + S, ...``,
    so its records are strided. With ``shard_options.drop_remainder`` the length is trimmed to a
    multiple of the shard count so that all hosts read equally many.

    Args:
      num_records: how many records the data source has (> 0).
      shard_options: the sharding the DataLoader inherits; only ``drop_remainder`` affects keys.
      seed: if set, every record gets ``Generator(Philox(key=seed + i))`` for random transforms.
        Unlike IndexSampler's, any non-negative int is accepted, as in Grain.
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions = NO_SHARDING,
        seed: int | None = None,
    ) -> None:
        self._num_records = check_num_records("SequentialSampler", num_records)
        self._shard_options = check_shard_options("SequentialSampler", shard_options)
        if seed is not None and not isinstance(seed, int):
            raise seed_type_error(seed, "an int >= 0")
        if seed is not None and seed < 0:
            # Grain accepts it and fails at the first record, in numpy's Philox.
            raise GrainliteValueError(
                f"SequentialSampler: seed must be a non-negative int or None, got {seed}; pass "
                f"an int >= 0 (e.g. seed % 2**32), or None for records without a generator."
            )
        self._seed = seed
        count = shard_options.shard_count
        if shard_options.drop_remainder:
            self._length = (self._num_records // count) * count
        else:
            self._length = self._num_records
        if shard_options.shard_index >= self._length:  # this host reads no index: as in Grain
            warn_empty_shard("SequentialSampler", shard_options, self._num_records)

    def record_keys(self, indices: np.ndarray) -> np.ndarray:
        """The record keys of global indices in ``[0, len)``: the indices themselves, as int64."""
        return np.array(indices, dtype=np.int64)

    def _longer_stream_hint(self) -> str:
        return "for N passes over the data use IndexSampler(num_records, num_epochs=N)"

    def __repr__(self) -> str:
        return (
            f"SequentialSampler(num_records={self._num_records}, "
            f"shard_options={self._shard_options!r})"
        )
