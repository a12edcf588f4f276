"""Samplers: which record each global index reads, and the random generator that goes with it.

A sampler maps a global index ``i`` (a position in the stream shared by all hosts; host ``s`` of
``S`` reads the indices ``i = s, s + S, s + 2S, ...``) to :class:`RecordMetadata`. The two built-in
samplers reproduce Grain's record order exactly, and add :meth:`record_keys`, which computes the
keys of a whole block of indices with numpy (the loader's hot path) through the same code that
``__getitem__`` uses. Their reprs are Grain's, because checkpoints compare them.
"""

from __future__ import annotations

import copy
import logging
import numbers
import operator
import sys
from typing import Any, Protocol

import numpy as np

from grainlite.checks import int_option
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sampling import foreign
from grainlite.sampling.index_shuffle import _shuffle_trusted
from grainlite.sampling.records import RecordMetadata
from grainlite.sampling.rng import record_rng
from grainlite.sampling.sharding import NoSharding, ShardOptions, even_split

_UINT32 = 2**32
_LOG = logging.getLogger(__name__)
# What to pass instead of a bad num_epochs (after "pass " or "Pass ").
_EPOCHS_FIX = "num_epochs=N with N >= 1 for N passes over the data, or None for an endless stream."
# The default shard options: one immutable instance, shown as `NoSharding(...)` in signatures.
_NO_SHARDING = NoSharding()


class Sampler(Protocol):
    """What the DataLoader needs of a sampler: metadata for a global index, IndexError past the end.

    ``__len__`` is optional; without it the loader finds the end by the IndexError. A custom sampler
    carries no sharding, so the DataLoader then needs ``shard_options=``.
    """

    def __getitem__(self, index: int) -> RecordMetadata:
        """Returns the metadata of global index ``index``; raises IndexError past the end."""
        ...


def _check_num_records(owner: str, num_records: Any) -> int:
    if not isinstance(num_records, numbers.Integral):
        raise GrainliteTypeError(
            f"{owner}: num_records must be an int, got {type(num_records).__name__} "
            f"{num_records!r}; pass num_records=len(data_source)."
        )
    if num_records <= 0:
        raise GrainliteValueError(
            f"Invalid number of records in Sampler. Got {num_records} records, but number of "
            "records must be greater than 0. A sampler needs a non-empty data source: check that "
            "the data source has records and pass num_records=len(data_source)."
        )
    return int(num_records)


def _check_shard_options(owner: str, shard_options: Any) -> ShardOptions:
    if not isinstance(shard_options, ShardOptions):
        raise GrainliteTypeError(
            f"{owner}: shard_options must be a ShardOptions, got {type(shard_options).__name__} "
            f"{shard_options!r}; pass NoSharding(), ShardByJaxProcess() or ShardOptions(i, n)."
        )
    return shard_options


def _check_index(sampler: Any, index: Any, length: int) -> int:
    """``index`` as an int in ``[0, length)``, else an IndexError (or a TypeError) with the fix."""
    name = type(sampler).__name__
    try:
        position = operator.index(index)
    except TypeError:
        raise GrainliteTypeError(
            f"{name} index must be an int, got {type(index).__name__} {index!r}; pass an int "
            f"in [0, {length}), e.g. sampler[int(index)]."
        ) from None
    if not 0 <= position < length:
        # Grain's text says "should be in [0, N]" although N itself is out of range: not kept.
        fix = (
            "negative indices do not count from the end: pass len(sampler) - k for the k-th "
            "from the end"
            if position < 0
            else sampler._longer_stream_hint()
        )
        raise IndexError(
            f"{name} index {position} is out of range: indices must be in [0, {length}) "
            f"(0 <= index < len(sampler)); {fix}."
        )
    return position


def _seed_type_error(seed: Any, rule: str) -> GrainliteTypeError:
    """Grain's TypeError text for a seed that is not a Python int, with the value and the fix."""
    return GrainliteTypeError(
        f"Expected seed of int type. Got seed with type {type(seed)}: {seed!r}; pass {rule} as "
        "a Python int (int(seed) converts a numpy integer)."
    )


def _make_rng(seed: int | None, index: int) -> np.random.Generator | None:
    """The per-record generator, ``Generator(Philox(key=seed + index))``, as Grain makes it."""
    if seed is None:
        return None
    return record_rng(seed + index)


class _KeyedSampler:
    """What the built-in samplers share: ``__getitem__`` goes through ``record_keys``.

    Subclasses set ``_length``, ``_seed`` and ``_shard_options`` (read by the DataLoader) and
    implement :meth:`record_keys`; one-element lookups then use the same code as whole blocks.
    """

    _length: int
    _seed: int | None
    _shard_options: ShardOptions

    @property
    def seed(self) -> int | None:
        """The seed of the per-record generators (and of the shuffle), or None."""
        return self._seed

    def __len__(self) -> int:
        return self._length

    def record_keys(self, indices: np.ndarray) -> np.ndarray:
        """The record keys of global indices, all in ``[0, len)``, as an int64 array."""
        raise NotImplementedError

    def _longer_stream_hint(self) -> str:
        """What to do about an index past the end: the fix in the IndexError."""
        raise NotImplementedError

    def __getitem__(self, index: int) -> RecordMetadata:
        """The metadata of global index ``index``; IndexError outside ``[0, len)``."""
        position = _check_index(self, index, self._length)
        key = int(self.record_keys(np.array([position], dtype=np.int64))[0])
        return RecordMetadata(index=position, record_key=key, rng=_make_rng(self._seed, position))


def _empty_shard_text(sampler: str, options: ShardOptions, num_records: int) -> str:
    """Why a host's shard has no record to read (the rule for every sampler)."""
    return (
        f"{sampler}: shard {options.shard_index} of {options.shard_count} gets no records, "
        f"because num_records={num_records} is smaller than shard_count={options.shard_count}"
    )


def _warn_empty_shard(sampler: str, options: ShardOptions, num_records: int) -> None:
    """A host whose shard has no record reads an empty stream, as in Grain (a 3-host evaluation
    over 2 records is valid); it is told so, with what that means for a multi-host job."""
    _LOG.warning(
        "%s, so this host's stream is empty. In a multi-host job every host must leave its loop "
        "the same way (one that stops early skips the collectives the others wait at); use at "
        "most %d shard%s to give every host records.",
        _empty_shard_text(sampler, options, num_records),
        num_records,
        "s" if num_records > 1 else "",
    )


class SequentialSampler(_KeyedSampler):
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
        shard_options: ShardOptions = _NO_SHARDING,
        seed: int | None = None,
    ) -> None:
        self._num_records = _check_num_records("SequentialSampler", num_records)
        self._shard_options = _check_shard_options("SequentialSampler", shard_options)
        if seed is not None and not isinstance(seed, int):
            raise _seed_type_error(seed, "an int >= 0")
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
            _warn_empty_shard("SequentialSampler", shard_options, self._num_records)

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


class IndexSampler(_KeyedSampler):
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
        shard_options: ShardOptions = _NO_SHARDING,
        shuffle: bool = False,
        num_epochs: int | None = None,
        seed: int | None = None,
    ) -> None:
        self._num_records = _check_num_records("IndexSampler", num_records)
        self._shard_options = _check_shard_options("IndexSampler", shard_options)
        if num_epochs is not None:
            num_epochs = int_option(
                num_epochs,
                1,
                wrong_type=f"IndexSampler: num_epochs must be an int or None, got {{type}} "
                f"{{value}}; pass {_EPOCHS_FIX}",
                # Grain's words (with the space after its first sentence); users match on them.
                too_small="Invalid number of epochs in Index Sampler. Got {value} epochs, but "
                f"number of epochs must be greater than 0. Pass {_EPOCHS_FIX}",
            )
        if shuffle and seed is None:
            raise GrainliteValueError(
                "Shuffling requires specifying a seed. Pass seed=<an int in [0, 2**32 - 1]>."
            )
        if seed is not None:
            if not isinstance(seed, int):
                raise _seed_type_error(seed, "an int in [0, 2**32 - 1]")
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
            _warn_empty_shard("IndexSampler", shard_options, self._num_records)

    def _no_records_error(self) -> GrainliteValueError:
        """The error for reading another host's index from a sampler whose shard is empty."""
        return GrainliteValueError(
            f"{_empty_shard_text('IndexSampler', self._shard_options, self._num_records)}, so "
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
