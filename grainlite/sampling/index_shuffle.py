"""Grain's random-access permutation of ``[0, max_index]``, bit-exact, vectorized with numpy.

``index_shuffle(j, max_index, seed)`` is where position ``j`` of a shuffled epoch points, without
materializing the permutation: ``j`` is encrypted with a small Feistel cipher (Simon's round
function) over a power-of-two block and re-encrypted until it lands in range (cycle walking).
Grain ships this as C++; grainlite reproduces it exactly, so shuffled samplers give Grain's order.
As observed from Grain's behaviour:

* block bits ``B = ceil(log2(max_index))`` in doubles, rounded up to even, clamped to [16, 64];
  each half has ``W = B / 2`` bits;
* the round keys are ``std::seed_seq{seed}.generate(rounds)``, truncated to W bits;
* a key pair ``(k0, k1)`` does ``left ^= f(right) ^ k0; right ^= f(left) ^ k1`` with
  ``f(x) = (rotl(x, 1) & rotl(x, 8)) ^ rotl(x, 2)`` inside W bits.

:func:`index_shuffle_array` encrypts a whole array per numpy pass and re-encrypts only the lanes
still out of range. Ranges so small that a walk averages more than four steps instead build, and
cache, the whole permutation once per ``(max_index, seed, rounds)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from grainlite.errors import GrainliteTypeError, GrainliteValueError

_MASK32 = 0xFFFFFFFF
_MAX_INDEX_LIMIT = 2**63 - 1  # Grain's extension takes max_index as a signed 64-bit int.
# Below this max_index (the 16-bit minimum block) a walk averages more than four encryptions.
_SMALL_DOMAIN_LIMIT = 2**14
# Round tables (one per key, 2**W entries each) are used while they hold at most this many entries;
# beyond it (W > 16, or many rounds) f is computed arithmetically.
_TABLE_BUDGET = 2**18
# When this few lanes are still out of range, walking them in plain Python beats a numpy pass.
_TAIL_LANES = 8


def _seed_seq_generate(seed: int, count: int) -> list[int]:
    """``std::seed_seq{seed}.generate(count)``: the C++ standard's algorithm, modulo 2**32."""
    out, entropy = [0x8B8B8B8B] * count, [seed & _MASK32]
    s, n = len(entropy), count
    t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
    p, q, m = (n - t) // 2, (n - t) // 2 + t, max(s + 1, n)
    for k in range(m):
        x = out[k % n] ^ out[(k + p) % n] ^ out[(k - 1) % n]
        r1 = (1664525 * (x ^ (x >> 27))) & _MASK32
        r2 = (r1 + (s if k == 0 else k % n + entropy[k - 1] if k <= s else k % n)) & _MASK32
        out[(k + p) % n] = (out[(k + p) % n] + r1) & _MASK32
        out[(k + q) % n] = (out[(k + q) % n] + r2) & _MASK32
        out[k % n] = r2
    for k in range(m, m + n):
        x = (out[k % n] + out[(k + p) % n] + out[(k - 1) % n]) & _MASK32
        r3 = (1566083941 * (x ^ (x >> 27))) & _MASK32
        r4 = (r3 - k % n) & _MASK32
        out[(k + p) % n] ^= r3
        out[(k + q) % n] ^= r4
        out[k % n] = r4
    return out


def _half_width(max_index: int) -> int:
    """W, the bits of one Feistel half, for ``max_index >= 1`` (Grain takes log2 in doubles)."""
    bits = math.ceil(math.log2(float(max_index)))
    return min(max(bits + bits % 2, 16), 64) // 2


@functools.lru_cache(maxsize=1024)
def _round_keys(seed: int, rounds: int, half_width: int) -> tuple[int, ...]:
    """The ``rounds`` round keys of one seed, truncated to ``half_width`` bits."""
    mask = (1 << half_width) - 1
    return tuple(key & mask for key in _seed_seq_generate(seed, rounds))


def _round_function(x: np.ndarray, half_width: int) -> np.ndarray:
    """Simon's ``f`` on uint64 lanes; with ``d = x | x << W``, ``rotl(x, r) = d >> (W - r)``."""
    w = np.uint64(half_width)
    d = x | (x << w)
    out = (d >> (w - np.uint64(1))) & (d >> (w - np.uint64(8)))
    out ^= d >> (w - np.uint64(2))
    out &= np.uint64((1 << half_width) - 1)
    return out


@functools.lru_cache(maxsize=16)
def _keyed_tables(seed: int, rounds: int, half_width: int) -> tuple[np.ndarray, ...]:
    """Per round key ``k``, ``f(x) ^ k`` for every ``x``: a half-round is one gather and one xor."""
    f = _round_function(np.arange(1 << half_width, dtype=np.uint64), half_width).astype(np.int64)
    return tuple(f ^ key for key in _round_keys(seed, rounds, half_width))


@functools.lru_cache(maxsize=4)
def _keyed_lists(seed: int, rounds: int, half_width: int) -> tuple[list[int], ...]:
    """:func:`_keyed_tables` as Python lists, for walking the last few lanes one by one."""
    return tuple(table.tolist() for table in _keyed_tables(seed, rounds, half_width))


def _encrypt_tabled(values: np.ndarray, half_width: int, tables: tuple[np.ndarray, ...]):
    """One encryption of int64 lanes with the round tables."""
    mask = (1 << half_width) - 1
    left = values >> half_width
    left &= mask
    right = values & mask
    scratch = np.empty_like(left)
    for k in range(0, len(tables), 2):
        left ^= tables[k].take(right, mode="clip", out=scratch)
        right ^= tables[k + 1].take(left, mode="clip", out=scratch)
    left <<= half_width
    left |= right
    return left


def _encrypt_arithmetic(values: np.ndarray, half_width: int, keys: tuple[int, ...]):
    """One encryption of uint64 lanes, computing ``f`` (for wide halves or many rounds)."""
    width, mask = np.uint64(half_width), np.uint64((1 << half_width) - 1)
    left = (values >> width) & mask
    right = values & mask
    for k in range(0, len(keys), 2):
        left ^= _round_function(right, half_width)
        left ^= np.uint64(keys[k])
        right ^= _round_function(left, half_width)
        right ^= np.uint64(keys[k + 1])
    left <<= width
    left |= right
    return left


def _walk_one(value: int, max_index: int, half_width: int, lists: tuple[list[int], ...]) -> int:
    """Re-encrypts one out-of-range value until it is in range, in plain Python."""
    mask = (1 << half_width) - 1
    while value > max_index:
        left, right = value >> half_width, value & mask
        for k in range(0, len(lists), 2):
            left ^= lists[k][right]
            right ^= lists[k + 1][left]
        value = (left << half_width) | right
    return value


def _cycle_walk(flat: np.ndarray, max_index: int, seed: int, rounds: int) -> np.ndarray:
    """Encrypts int64 lanes until each is ``<= max_index``, re-encrypting only lanes still out."""
    half_width = _half_width(max_index)
    encrypt: Callable[[np.ndarray], np.ndarray]
    if rounds << half_width <= _TABLE_BUDGET:
        tables = _keyed_tables(seed, rounds, half_width)
        encrypt = functools.partial(_encrypt_tabled, half_width=half_width, tables=tables)
        tail = _TAIL_LANES if half_width <= 14 else 0  # wider tables make too big Python lists
    else:
        keys = _round_keys(seed, rounds, half_width)
        encrypt = functools.partial(_encrypt_arithmetic, half_width=half_width, keys=keys)
        flat, tail = flat.astype(np.uint64), 0
    out = values = encrypt(flat)
    out_of_range = values > max_index
    pending = out_of_range.nonzero()[0]
    while pending.size > tail:
        values = encrypt(out[pending] if values is out else values[out_of_range])
        out[pending] = values
        out_of_range = values > max_index
        pending = pending[out_of_range]
    if pending.size:
        lists = _keyed_lists(seed, rounds, half_width)
        for lane in pending.tolist():
            out[lane] = _walk_one(int(out[lane]), max_index, half_width, lists)
    return out.astype(np.int64, copy=False)


@functools.lru_cache(maxsize=128)
def _small_domain_table(max_index: int, seed: int, rounds: int) -> np.ndarray:
    """The whole permutation of ``[0, max_index]``, for ranges too small to walk lane by lane.

    Encrypts the whole 16-bit block once, then resolves all walks by pointer doubling: ``jump[y]``
    is ``y`` in range and the next value of the walk out of range; squaring ``jump`` until the walks
    from every in-range start end in range gives each start's first in-range value.
    """
    half_width = _half_width(max_index)  # 8 here, so even 1024 round tables fit the budget
    domain = np.arange(1 << (2 * half_width), dtype=np.int64)
    encrypted = _encrypt_tabled(domain, half_width, _keyed_tables(seed, rounds, half_width))
    jump = encrypted.copy()
    jump[: max_index + 1] = domain[: max_index + 1]
    starts = encrypted[: max_index + 1]
    result = jump[starts]
    while result.max() > max_index:
        jump = jump[jump]
        result = jump[starts]
    result.flags.writeable = False
    return result


def _check_arguments(max_index: int, seed: int, rounds: int) -> None:
    """Grain's checks: TypeError where its C++ binding cannot convert, ValueError for rounds."""
    for name, value in (("max_index", max_index), ("seed", seed), ("rounds", rounds)):
        if not isinstance(value, int | np.integer):
            raise GrainliteTypeError(
                f"index_shuffle(): {name} must be an int, got {type(value).__name__} {value!r}."
            )
    if not 0 <= seed <= _MASK32:
        raise GrainliteTypeError(
            f"index_shuffle(): seed must be an unsigned 32-bit int in [0, 2**32 - 1], got {seed}; "
            "reduce it with seed % 2**32."
        )
    if max_index > _MAX_INDEX_LIMIT:
        raise GrainliteTypeError(
            f"index_shuffle(): max_index must fit a signed 64-bit int, got {max_index}."
        )
    if rounds % 2 or not 4 <= rounds <= 1024:
        raise GrainliteValueError(
            f"rounds must be an even integer between 4 and 1024, but got rounds = {rounds}"
        )


def _index_error(index: int, max_index: int) -> GrainliteValueError:
    return GrainliteValueError(
        f"index must be in [0, max_index], but got index = {index} and max_index = {max_index}"
    )


def index_shuffle_array(
    indices: np.ndarray, max_index: int, seed: int, rounds: int = 4
) -> np.ndarray:
    """:func:`index_shuffle` of every element of ``indices``, in a few numpy passes.

    The sampler's hot path: a block of positions costs a few dozen numpy operations, not a Python
    call per record.

    Args:
      indices: an integer array of positions, each in ``[0, max_index]``.
      max_index: the largest position: the permutation is of ``[0, max_index]``.
      seed: an unsigned 32-bit seed; each seed gives an unrelated permutation.
      rounds: Feistel rounds, even and in [4, 1024]; Grain always uses 4.

    Returns:
      The shuffled positions: an int64 array shaped like ``indices``.

    Raises:
      ValueError: bad ``rounds`` or an index outside ``[0, max_index]`` (Grain's texts).
      TypeError: a non-integer argument, a seed outside uint32 or a max_index past int64.
    """
    _check_arguments(max_index, seed, rounds)
    indices = np.asarray(indices)
    if not indices.size:
        return np.zeros(indices.shape, dtype=np.int64)
    if indices.dtype.kind not in "iu":
        raise GrainliteTypeError(
            f"index_shuffle_array(): indices must be an integer array, got dtype {indices.dtype}."
        )
    low, high = int(indices.min()), int(indices.max())
    if low < 0 or high > max_index:
        raise _index_error(low if low < 0 else high, max_index)
    flat = indices.astype(np.int64, copy=False).ravel()
    return _shuffle_trusted(flat, int(max_index), int(seed), int(rounds)).reshape(indices.shape)


def _shuffle_trusted(flat: np.ndarray, max_index: int, seed: int, rounds: int = 4) -> np.ndarray:
    """:func:`index_shuffle_array` without the checks, for callers that guarantee them (samplers).

    ``flat`` is a 1-D int64 array of values in ``[0, max_index]``; ``seed`` and ``rounds`` are
    valid Python ints.
    """
    if max_index == 0:
        return np.zeros(flat.shape, dtype=np.int64)
    if max_index < _SMALL_DOMAIN_LIMIT:
        return _small_domain_table(max_index, seed, rounds)[flat]
    return _cycle_walk(flat, max_index, seed, rounds)


def index_shuffle(index: int, max_index: int, seed: int, rounds: int = 4) -> int:
    """Where ``index`` goes in the seeded pseudo-random permutation of ``[0, max_index]``.

    Bit-exact with Grain's ``grain.experimental.index_shuffle``, quirk included: the block is sized
    from ``log2(max_index)``, so for ``max_index = 2**16, 2**18, ...`` the value ``max_index`` does
    not fit the block and maps where ``0`` does.

    Args:
      index: the position to map, in ``[0, max_index]``.
      max_index: the largest position.
      seed: an unsigned 32-bit seed.
      rounds: Feistel rounds, even and in [4, 1024]; Grain always uses 4.

    Returns:
      The shuffled position, in ``[0, max_index]``.

    Raises:
      ValueError: bad ``rounds`` or ``index`` (Grain's texts).
      TypeError: a non-integer argument, a seed outside uint32 or a max_index past int64.
    """
    _check_arguments(max_index, seed, rounds)
    if not isinstance(index, int | np.integer):
        raise GrainliteTypeError(
            f"index_shuffle(): index must be an int, got {type(index).__name__} {index!r}."
        )
    if not 0 <= index <= max_index:
        raise _index_error(index, max_index)
    return int(index_shuffle_array(np.array([index], dtype=np.int64), max_index, seed, rounds)[0])
