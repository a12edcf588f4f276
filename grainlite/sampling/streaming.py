"""The streaming order: shards shuffled, then records shuffled within windows of a few shards.

A global shuffle reads every shard (file) of the dataset at once, so a cache that must hold what
the next reads need holds the whole dataset. The streaming order (the two-level order of LitData
and MosaicML Streaming) bounds that set: it shuffles the shards, groups them into windows of
``K`` consecutive shards in the shuffled order, and shuffles the records of each window among
themselves. Reading window after window, only the ``K`` shards of the current window are in use.

The rule, written once here and in ``docs/how-to/streaming-order.md``. ``n`` records (keys
``0 .. n-1``) form shards: consecutive ranges of keys (the files of a source, or fixed-size
ranges). ``P`` partitions (usually the number of hosts) split the keys into contiguous blocks, as
:func:`~grainlite.sampling.sharding.even_split` splits them between hosts (with
``drop_remainder`` each block has ``n // P`` keys and the last ``n mod P`` keys are never read).
A shard cut by a block boundary counts as one "unit" in each block; every other shard is one unit.
``N`` is the number of keys read per epoch (``n``, or ``P * (n // P)`` with ``drop_remainder``).

1. **Index to place.** Global index ``i >= 0`` is in epoch ``e = i // N``; ``r = i mod N`` reads
   partition ``q = r mod P`` at position ``p = r // P`` of that partition's epoch. (Host ``s`` of
   ``P`` hosts reads the indices ``i = s (mod P)``: its own partition.)
2. **Seeds.** ``numpy.random.SeedSequence([seed, q, e]).generate_state(1 + windows)`` gives
   uint32 seeds: the first shuffles the units, seed ``1 + k`` shuffles window ``k``.
3. **Shards.** The ``U`` units of partition ``q`` (in key order ``u = 0 .. U-1``) are read in the
   order ``u_j = index_shuffle(j, U - 1, seed_0)`` (Grain's index shuffle,
   :func:`~grainlite.sampling.index_shuffle.index_shuffle`), and their keys are laid end to end in
   that order: the epoch's "concatenation".
4. **Windows.** Window ``k`` holds the units ``u_{kK} .. u_{kK+K-1}`` (the last window may hold
   fewer), i.e. the stretch ``[b_k, b_{k+1})`` of the concatenation, of ``m = b_{k+1} - b_k``
   keys. Position ``p`` with ``b_k <= p < b_{k+1}`` reads concatenation place ``b_k + π_k(p -
   b_k)``, and the key at that place, where ``π_k(o)`` is ``index_shuffle(o, m - 1,
   seed_{1+k})`` for ``m > 2**14``, and for smaller windows the ``o``-th entry of
   ``argsort(splitmix64(seed_{1+k} * 0x9E3779B97F4A7C15 + j) for j in 0 .. m-1)`` (stable sort;
   :func:`small_window_order`), which costs far less than building Grain's small-range table for
   every window.

So positions ``[b_k, b_{k+1})`` of an epoch read exactly the keys of window ``k``'s units, each
once: at most ``K`` shards are in use at a time, and every epoch reads each of its ``N`` keys
once. Everything is a pure function of ``i``: any index is computed on its own (random access,
what checkpoints and worker striding need), with ``O(U)`` memory per epoch in use.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import numbers
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sampling.index_shuffle import _shuffle_trusted

# Epoch plans kept per order (each is O(units)); a worker reads one or two epochs at a time.
_PLANS_KEPT = 8
# Windows of at most this many keys are shuffled by small_window_order (rule 4).
SMALL_WINDOW = 2**14
_MASK64 = 2**64 - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _runs(values: np.ndarray) -> list[np.ndarray]:
    """The positions of each distinct value of ``values``, one array per value (sorted by value):
    one sort, not one pass per value."""
    order = np.argsort(values, kind="stable")
    bounds = np.flatnonzero(np.diff(values[order])) + 1
    return np.split(order, bounds)


@functools.lru_cache(maxsize=64)
def small_window_order(size: int, seed: int) -> np.ndarray:
    """The permutation of a window of ``size <= SMALL_WINDOW`` keys (rule 4): ``argsort`` of
    SplitMix64 of ``seed * 0x9E3779B97F4A7C15 + j`` (mod 2**64) for ``j = 0 .. size - 1``."""
    start = np.uint64((seed * _GOLDEN) & _MASK64)
    z = np.arange(size, dtype=np.uint64) + start  # uint64 arrays wrap silently
    z += np.uint64(_GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    order = np.argsort(z, kind="stable").astype(np.int64)
    order.flags.writeable = False
    return order


@dataclass(frozen=True)
class _Plan:
    """One partition's epoch: where each window starts in its concatenation, and each unit."""

    window_starts: np.ndarray  # b_0 = 0, b_1, ..., b_windows = the partition's length
    window_seeds: list[int]  # seed_{1+k} of window k
    slot_starts: np.ndarray  # where the j-th unit of the shuffled order starts
    slot_keys: np.ndarray  # the first key of the j-th unit of the shuffled order


def _int(owner: str, name: str, value: Any, low: int, fix: str) -> int:
    """``value`` as an int ``>= low``, else a TypeError or ValueError naming it and the fix."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise GrainliteTypeError(
            f"{owner}: {name} must be an int, got {type(value).__name__} {value!r}; {fix}."
        )
    if value < low:
        raise GrainliteValueError(f"{owner}: {name} must be >= {low}, got {value}; {fix}.")
    return int(value)


def shard_ends(
    owner: str,
    num_records: int,
    shard_sizes: Sequence[int] | None,
    records_per_shard: int | None,
) -> np.ndarray:
    """The end key of every shard (cumulative sizes), from exactly one of the two descriptions.

    Args:
      owner: who asks (named in errors).
      num_records: the record count the shards must cover exactly.
      shard_sizes: the records of each shard, in key order (e.g. of each file); all > 0.
      records_per_shard: fixed-size shards of this many keys (the last may be shorter).
    """
    if (shard_sizes is None) == (records_per_shard is None):
        raise GrainliteValueError(
            f"{owner}: pass exactly one of shard_sizes= (the records of each shard in key order, "
            f"e.g. of each file) and records_per_shard= (fixed ranges of keys), got "
            f"shard_sizes={_shown(shard_sizes)} and records_per_shard={records_per_shard!r}."
        )
    if records_per_shard is not None:
        size = _int(owner, "records_per_shard", records_per_shard, 1, "pass the keys of one shard")
        return np.append(np.arange(size, num_records, size, dtype=np.int64), num_records)
    if isinstance(shard_sizes, str | bytes) or not isinstance(shard_sizes, Sequence | np.ndarray):
        raise GrainliteTypeError(
            f"{owner}: shard_sizes must be a sequence of ints, got "
            f"{type(shard_sizes).__name__} {_shown(shard_sizes)}; pass the records of each "
            f"shard in key order, e.g. [len(ArrayRecordDataSource(p)) for p in paths]."
        )
    sizes = [
        _int(owner, f"shard_sizes[{j}]", size, 1, "every shard holds at least one record")
        for j, size in enumerate(shard_sizes)
    ]
    if sum(sizes) != num_records:
        raise GrainliteValueError(
            f"{owner}: shard_sizes add up to {sum(sizes)} records ({len(sizes)} shards), but "
            f"num_records is {num_records}; the shards must cover every key exactly once: pass "
            f"the record count of each file of the data source, in key order."
        )
    return np.cumsum(np.asarray(sizes, dtype=np.int64))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def shards_text(ends: np.ndarray, records_per_shard: int | None) -> str:
    """How a repr names the shards: the fixed size, or the count and a digest of the sizes."""
    if records_per_shard is not None:
        return f"records_per_shard={records_per_shard}"
    digest = hashlib.sha1(np.diff(ends, prepend=0).astype("<i8").tobytes()).hexdigest()[:16]
    return f"shards={len(ends)}, hash_of_shard_sizes={digest}"


class StreamingOrder:
    """The record key of every global index under the streaming order (the module's rule).

    Args:
      num_records: the keys ``0 .. num_records - 1`` (> 0).
      ends: the end key of every shard (:func:`shard_ends`).
      window_shards: ``K``, the units shuffled together (>= 1).
      seed: the order's seed (an int >= 0).
      partitions: ``P``, the contiguous blocks the keys are split into (>= 1, <= num_records).
      drop_remainder: each block ``num_records // P`` keys, the rest never read.
    """

    def __init__(
        self,
        num_records: int,
        ends: np.ndarray,
        window_shards: int,
        seed: int,
        partitions: int = 1,
        drop_remainder: bool = False,
    ) -> None:
        self.num_records = num_records
        self.ends = ends
        self.window_shards = window_shards
        self.seed = seed
        self.partitions = partitions
        self.drop_remainder = drop_remainder
        per, rest = divmod(num_records, partitions)
        if drop_remainder:
            rest = 0
        self.epoch_length = per * partitions + rest
        # Each partition's units: their first keys and lengths, in key order.
        self._units: list[tuple[np.ndarray, np.ndarray]] = []
        for q in range(partitions):
            start = per * q + min(q, rest)
            stop = start + per + (q < rest)
            inner = ends[(ends > start) & (ends < stop)]
            cuts = np.concatenate(([start], inner, [stop])).astype(np.int64)
            self._units.append((cuts[:-1], np.diff(cuts)))
        self._plans: OrderedDict[tuple[int, int], _Plan] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_plans"] = OrderedDict()  # rebuilt where used; no need to ship it to workers
        return state

    def shard_of(self, keys: np.ndarray) -> np.ndarray:
        """The shard (0-based, in key order) of each key."""
        return np.searchsorted(self.ends, np.asarray(keys, dtype=np.int64), side="right")

    def plan(self, partition: int, epoch: int) -> _Plan:
        """Partition ``partition``'s order in epoch ``epoch`` (rules 2 to 4), cached."""
        key = (partition, epoch)
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        starts, lengths = self._units[partition]
        units = len(starts)
        windows = -(-units // self.window_shards)
        seeds = np.random.SeedSequence([self.seed, partition, epoch]).generate_state(1 + windows)
        order = np.arange(units, dtype=np.int64)
        if units > 1:
            order = _shuffle_trusted(order, units - 1, int(seeds[0]))
        slot_lengths = lengths[order]
        slot_starts = np.concatenate(([0], np.cumsum(slot_lengths)[:-1])).astype(np.int64)
        total = int(slot_lengths.sum())
        window_starts = np.append(slot_starts[:: self.window_shards], total).astype(np.int64)
        plan = _Plan(window_starts, [int(s) for s in seeds[1:]], slot_starts, starts[order])
        self._plans[key] = plan
        if len(self._plans) > _PLANS_KEPT:
            self._plans.popitem(last=False)
        return plan

    def keys(self, indices: np.ndarray) -> np.ndarray:
        """The record key of every global index (each ``>= 0``), as an int64 array of its shape."""
        flat = np.asarray(indices, dtype=np.int64)
        shape = flat.shape
        flat = flat.ravel()
        if not flat.size:
            return flat.reshape(shape)
        epochs, rest = np.divmod(flat, self.epoch_length)
        partitions = rest % self.partitions
        positions = rest // self.partitions
        groups = epochs * self.partitions + partitions
        out = np.empty_like(flat)
        first = int(groups[0])
        if (groups == first).all():  # the usual block: one host's reads in one epoch
            e, q = divmod(first, self.partitions)
            return self._place(self.plan(q, e), positions).reshape(shape)
        for members in _runs(groups):
            e, q = divmod(int(groups[members[0]]), self.partitions)
            out[members] = self._place(self.plan(q, e), positions[members])
        return out.reshape(shape)

    def _place(self, plan: _Plan, positions: np.ndarray) -> np.ndarray:
        """The keys at ``positions`` of one partition's epoch (rule 4)."""
        windows = np.searchsorted(plan.window_starts, positions, side="right") - 1
        places = np.empty_like(positions)
        first = int(windows[0])
        groups: list[tuple[int, Any]] = [(first, slice(None))]
        if not (windows == first).all():  # the block crosses a window's end
            groups = [(int(windows[members[0]]), members) for members in _runs(windows)]
        for window, mask in groups:
            start = int(plan.window_starts[window])
            size = int(plan.window_starts[window + 1]) - start
            offsets = positions[mask] - start
            if SMALL_WINDOW >= size > 1:
                offsets = small_window_order(size, plan.window_seeds[window])[offsets]
            elif size > 1:
                offsets = _shuffle_trusted(offsets, size - 1, plan.window_seeds[window])
            places[mask] = offsets + start
        slots = np.searchsorted(plan.slot_starts, places, side="right") - 1
        return plan.slot_keys[slots] + (places - plan.slot_starts[slots])

    def windows(self, partition: int, epoch: int) -> list[tuple[int, int]]:
        """The position ranges ``[b_k, b_{k+1})`` of the windows of one partition's epoch."""
        starts = self.plan(partition, epoch).window_starts.tolist()
        return list(itertools.pairwise(starts))
