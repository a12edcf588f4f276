"""``IndexSampler``: Grain's standard sampler, sharded, shuffled per epoch, for N or endless epochs.

It reproduces Grain's record order exactly (each host's contiguous block of records, a fresh
``index_shuffle`` permutation of it per epoch) and its repr, which checkpoints compare. Beyond
Grain it computes the keys of a whole block of indices with numpy (:meth:`IndexSampler.record_keys`,
the loader's hot path) and reads the foreign codes of another host layout
(:mod:`grainlite.sampling.foreign`) through :meth:`IndexSampler.resharded`, for elastic restores.
"""

from __future__ import annotations

import copy
import sys

import numpy as np

from grainlite.checks import int_option
from grainlite.errors import GrainliteValueError
from grainlite.sampling import foreign
from grainlite.sampling.index_shuffle import _shuffle_trusted
from grainlite.sampling.samplers import (
    EPOCHS_FIX,
    NO_SHARDING,
    KeyedSampler,
    check_num_records,
    check_shard_options,
    empty_shard_text,
    seed_type_error,
    warn_empty_shard,
)
from grainlite.sampling.sharding import NoSharding, ShardOptions, even_split

_UINT32 = 2**32


class IndexSampler(KeyedSampler):
    """Grain's standard sampler: sharded, optionally shuffled, for some or unlimited epochs.

    The host's records are the contiguous block ``[a, a + L)`` that :func:`even_split` gives its
    shard. Host position ``p = i // shard_count`` is in epoch ``e = p // L`` at offset ``j = p % L``
    and reads record ``a + j``, or with ``shuffle`` record ``a + index_shuffle(j, L - 1, (seed + e)
    % 2**32)``: every epoch is a fresh permutation of the host's block, reproducible from the seed.

    Args:
      num_records: how many records the data source has (> 0).
      shard_options: which block of the records this host reads.
      shuffle: permute the records of every epoch (needs ``seed``).
      num_epochs: how many passes over the data, or None for an endless stream.
      seed: an int in ``[0, 2**32 - 1]``; seeds the shuffle and the per-record generators
        ``Generator(Philox(key=seed + i))``.
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions = NO_SHARDING,
        shuffle: bool = False,
        num_epochs: int | None = None,
        seed: int | None = None,
    ) -> None:
        self._num_records = check_num_records("IndexSampler", num_records)
        self._shard_options = check_shard_options("IndexSampler", shard_options)
        if num_epochs is not None:
            num_epochs = int_option(
                num_epochs,
                1,
                wrong_type=f"IndexSampler: num_epochs must be an int or None, got {{type}} "
                f"{{value}}; pass {EPOCHS_FIX}",
                # Grain's words (with the space after its first sentence); users match on them.
                too_small="Invalid number of epochs in Index Sampler. Got {value} epochs, but "
                f"number of epochs must be greater than 0. Pass {EPOCHS_FIX}",
            )
        if shuffle and seed is None:
            raise GrainliteValueError(
                "Shuffling requires specifying a seed. Pass seed=<an int in [0, 2**32 - 1]>."
            )
        if seed is not None:
            if not isinstance(seed, int):
                raise seed_type_error(seed, "an int in [0, 2**32 - 1]")
            if seed < 0 or seed.bit_length() > 32:
                # Grain's words ("Seed should be positive 32-bit integer") are false for 0, which
                # it accepts: the rule is stated as it is.
                raise GrainliteValueError(
                    f"IndexSampler seed must be an int in [0, 2**32 - 1], got {seed}; pass an int "
                    "in that range, e.g. seed % 2**32."
                )
        self._shuffle = shuffle
        self._num_epochs = num_epochs
        self._seed = seed
        start, end = even_split(self._num_records, shard_options)
        self._block_start, self._block_len = start, end - start
        self._length = self._compute_length()
        if self._block_len == 0:
            # Grain yields nothing where this host has no index below its length, and fails
            # with ZeroDivisionError at the first read where it has some (more epochs): here the
            # length ends before this host's first index, so its stream is empty either way.
            self._length = min(self._length, shard_options.shard_index)
            warn_empty_shard("IndexSampler", shard_options, self._num_records)

    def _no_records_error(self) -> GrainliteValueError:
        """The error for reading another host's index from a sampler whose shard is empty."""
        return GrainliteValueError(
            f"{empty_shard_text('IndexSampler', self._shard_options, self._num_records)}, so "
            f"it has no record key for another host's index; read index i from the sampler of "
            f"shard i % {self._shard_options.shard_count}."
        )

    def _longer_stream_hint(self) -> str:
        if self._num_epochs is None:
            return "this endless stream (num_epochs=None) ends at sys.maxsize"
        return f"for a longer stream pass num_epochs above {self._num_epochs}, or None (endless)"

    def _compute_length(self) -> int:
        if self._num_epochs is None:
            return sys.maxsize
        if self._shard_options.drop_remainder:
            # Every shard reads the same L records per epoch; the remainder is never read.
            return self._num_epochs * self._block_len * self._shard_options.shard_count
        # Each host reads its own indices below E*N; short blocks wrap into a partial epoch.
        return self._num_epochs * self._num_records

    def record_keys(self, indices: np.ndarray) -> np.ndarray:
        """The record keys of global indices, all in ``[0, len)``, as an int64 array.

        The vectorized form of ``sampler[i].record_key``: no generators are made, and each epoch
        present in the block is shuffled with one vectorized call.
        """
        positions = np.array(indices, dtype=np.int64)
        if positions.size and positions.min() < 0:  # read by their own layout's blocks
            return self._foreign_keys(positions)
        if not self._block_len:
            # Only reachable for another host's index: this host reads none (see __init__).
            raise self._no_records_error()
        if self._shard_options.shard_count > 1:
            positions //= self._shard_options.shard_count
        if not positions.size:
            return positions
        if self._shuffle:
            positions = self._shuffle_positions(positions.ravel()).reshape(positions.shape)
        else:
            positions %= self._block_len
        positions += self._block_start
        return positions

    def resharded(self, shard_index: int, shard_count: int) -> IndexSampler:
        """This sampler as host ``shard_index`` of ``shard_count`` builds it (same class of shard
        options, same records, seed, shuffle and epochs): the sampler of another host layout."""
        other = copy.copy(self)
        options = copy.copy(self._shard_options)
        object.__setattr__(options, "shard_index", shard_index)
        object.__setattr__(options, "shard_count", shard_count)
        other._shard_options = options
        start, end = even_split(self._num_records, options)
        other._block_start, other._block_len = start, end - start
        other._length = other._compute_length()
        return other

    def foreign_problem(self, code: int) -> str | None:
        """Why ``code`` (a negative index, see :mod:`grainlite.sampling.foreign`) names no record
        of this sampler in another host layout, or None when it does."""
        count, index = foreign.decode_one(code)
        if code >= 0 or index >= foreign.MAX_INDEX:
            return f"{code}, which names no record of another host count"
        if count > self._num_records:
            return (
                f"{code}, which names a record of {count} hosts, more hosts than the sampler's "
                f"{self._num_records} records"
            )
        if isinstance(self._shard_options, NoSharding):
            return (
                f"{code}, which names a record of {count} hosts, but this sampler is not "
                f"sharded by itself (NoSharding)"
            )
        if index >= self.resharded(index % count, count)._length:
            return (
                f"{code}, which names index {index} of {count} hosts, past the end of that sampler"
            )
        return None

    def rng_indices(self, indices: np.ndarray) -> np.ndarray:
        """The index each record's generator is seeded with (``seed + index``): the index
        itself, or for a foreign code the index it had in its own layout."""
        indices = np.asarray(indices, dtype=np.int64)
        if not indices.size or indices.min() >= 0:
            return indices
        _, old = foreign.decode(np.minimum(indices, -1))
        return np.where(indices < 0, old, indices)

    def _foreign_keys(self, positions: np.ndarray) -> np.ndarray:
        """Record keys where some indices are foreign codes: each read by its own layout."""
        keys = np.empty_like(positions)
        native = positions >= 0
        if native.any():
            keys[native] = self.record_keys(positions[native])
        counts, old = foreign.decode(positions[~native])
        out = np.empty_like(old)
        for count in np.unique(counts).tolist():
            of_count = counts == count
            hosts = old[of_count] % count
            part = np.empty(int(of_count.sum()), dtype=np.int64)
            for host in np.unique(hosts).tolist():
                mine = hosts == host
                sampler = self.resharded(int(host), int(count))
                part[mine] = sampler.record_keys(old[of_count][mine])
            out[of_count] = part
        keys[~native] = out
        return keys

    def _shuffle_positions(self, positions: np.ndarray) -> np.ndarray:
        """Host positions to shuffled offsets in the block, one permutation per epoch present."""
        length, seed = self._block_len, int(self._seed)  # type: ignore[arg-type]  # shuffle has one
        first, last = int(positions.min()) // length, int(positions.max()) // length
        if first == last:  # the common case: the whole block lies in one epoch
            if first:
                positions -= first * length
            return _shuffle_trusted(positions, length - 1, (seed + first) % _UINT32)
        epochs, offsets = np.divmod(positions, length)
        order = np.argsort(epochs, kind="stable")
        bounds = np.flatnonzero(np.diff(epochs[order])) + 1
        for group in np.split(order, bounds):
            epoch_seed = (seed + int(epochs[group[0]])) % _UINT32
            offsets[group] = _shuffle_trusted(offsets[group], length - 1, epoch_seed)
        return offsets

    def __repr__(self) -> str:
        return (
            f"IndexSampler(num_records={self._num_records}, "
            f"shard_options={self._shard_options!r}, shuffle={self._shuffle}, "
            f"num_epochs={self._num_epochs}, seed={self._seed})"
        )
