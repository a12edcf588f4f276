"""What a sampler is, and what the built-in samplers share.

A sampler maps a global index ``i`` (a position in the stream shared by all hosts; host ``s`` of
``S`` reads the indices ``i = s, s + S, s + 2S, ...``) to :class:`RecordMetadata`. This module
holds that contract (:class:`Sampler`) and the parts every built-in sampler uses, so that they
cannot drift apart: the argument checks and their messages, :class:`KeyedSampler` (``__getitem__``
through the vectorized :meth:`~KeyedSampler.record_keys`, the per-record generator, the
IndexError) and the warning for a host whose shard has no record. The samplers themselves live in
:mod:`~grainlite.sampling.index_sampler`, :mod:`~grainlite.sampling.sequential_sampler` and
:mod:`~grainlite.sampling.streaming_sampler`.
"""

from __future__ import annotations

import logging
import numbers
import operator
from typing import Any, Protocol

import numpy as np

from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sampling.records import RecordMetadata
from grainlite.sampling.rng import record_rng
from grainlite.sampling.sharding import NoSharding, ShardOptions

_LOG = logging.getLogger(__name__)
# What to pass instead of a bad num_epochs (after "pass " or "Pass ").
EPOCHS_FIX = "num_epochs=N with N >= 1 for N passes over the data, or None for an endless stream."
# The default shard options: one immutable instance, shown as `NoSharding(...)` in signatures.
NO_SHARDING = NoSharding()


class Sampler(Protocol):
    """What the DataLoader needs of a sampler: metadata for a global index, IndexError past the end.

    ``__len__`` is optional; without it the loader finds the end by the IndexError. A custom sampler
    carries no sharding, so the DataLoader then needs ``shard_options=``.
    """

    def __getitem__(self, index: int) -> RecordMetadata:
        """Returns the metadata of global index ``index``; raises IndexError past the end."""
        ...


def check_num_records(owner: str, num_records: Any) -> int:
    """``num_records`` as an int > 0, else a TypeError or ValueError with ``owner`` and the fix."""
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


def check_shard_options(owner: str, shard_options: Any) -> ShardOptions:
    """``shard_options`` if it is a ShardOptions, else a TypeError naming ``owner`` and the fix."""
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


def seed_type_error(seed: Any, rule: str) -> GrainliteTypeError:
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


class KeyedSampler:
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


def empty_shard_text(sampler: str, options: ShardOptions, num_records: int) -> str:
    """Why a host's shard has no record to read (the rule for every sampler)."""
    return (
        f"{sampler}: shard {options.shard_index} of {options.shard_count} gets no records, "
        f"because num_records={num_records} is smaller than shard_count={options.shard_count}"
    )


def warn_empty_shard(sampler: str, options: ShardOptions, num_records: int) -> None:
    """A host whose shard has no record reads an empty stream, as in Grain (a 3-host evaluation
    over 2 records is valid); it is told so, with what that means for a multi-host job."""
    _LOG.warning(
        "%s, so this host's stream is empty. In a multi-host job every host must leave its loop "
        "the same way (one that stops early skips the collectives the others wait at); use at "
        "most %d shard%s to give every host records.",
        empty_shard_text(sampler, options, num_records),
        num_records,
        "s" if num_records > 1 else "",
    )
