"""Foreign indices: a record of another host layout, named by a negative sampler index.

After a sampler-sharded ``IndexSampler`` (``shard_options`` on the sampler, one block of records
per host) is restored onto another host count (see :mod:`grainlite.loader.state.resharding`), a host
reads some records of the old layout: records an old host had not delivered yet. Each is named
by the old host count ``S`` and its global index ``i`` there (old host ``i mod S`` read it, at
its position ``i // S``), packed into one negative int so that it can stand in a worker's hole
list next to the host's own (non-negative) indices::

    code = -1 - (i * 2**20 + (S - 1))

``IndexSampler.record_keys`` reads such a code as the old host's sampler would read ``i``, and
its per-record generator is seeded by ``seed + i`` as it was in the old run, so every transform
sees the same input. Codes are plain JSON integers in a state; nothing else is stored.
"""

from __future__ import annotations

import numpy as np

_COUNT_BITS = 20
# The largest host count and old index a code holds (the code stays within int64).
MAX_SHARD_COUNT = 2**_COUNT_BITS
MAX_INDEX = 2**42


def encode(shard_count: int, index: int) -> int:
    """The code of global index ``index`` of a layout of ``shard_count`` hosts."""
    if not 1 <= shard_count <= MAX_SHARD_COUNT or not 0 <= index < MAX_INDEX:
        raise ValueError(
            f"a record at index {index} of {shard_count} hosts cannot be carried to another host "
            f"count (at most {MAX_SHARD_COUNT} hosts and {MAX_INDEX} indices)"
        )
    return -1 - ((index << _COUNT_BITS) | (shard_count - 1))


def decode(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(shard_counts, indices)`` of an int64 array of codes (all negative)."""
    packed = -1 - np.asarray(codes, dtype=np.int64)
    return (packed & (MAX_SHARD_COUNT - 1)) + 1, packed >> _COUNT_BITS


def decode_one(code: int) -> tuple[int, int]:
    """``(shard_count, index)`` of one code."""
    packed = -1 - code
    return (packed & (MAX_SHARD_COUNT - 1)) + 1, packed >> _COUNT_BITS
