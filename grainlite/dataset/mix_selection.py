"""Where each position of a weighted mix reads from: weights to integer proportions to positions.

This is Grain's proportional interleave written as index math, apart from any dataset: both
``MapDataset.mix`` and ``IterDataset.mix`` (:mod:`grainlite.dataset.mixed_datasets`) lay their
inputs out in the one fixed, endless order computed here. The rules, learned by running Grain
0.2.18 and checked against it by the tests:

* The weights become integer proportions: with ``scale = 100 / min(weights)`` (computed first,
  then multiplied, which decides the float rounding), dataset ``k`` gets
  ``n_k = int(weights[k] * scale)``; so ``[0.3, 0.7]`` gives ``[100, 233]`` and equal weights
  give ``[100, 100, ...]``. The order repeats with period ``P = sum(n_k)``.
* Inside a period, dataset 0 takes the offsets ``floor(j * P / n_0)`` for ``j < n_0``. The
  offsets it leaves, numbered again from 0, are shared the same way by datasets 1, 2, ... over
  ``P - n_0`` offsets, and so on; the last dataset takes whatever is left.
* Position ``i`` lies in period ``i // P`` at offset ``i % P`` (floor division, so negative
  positions continue the pattern backwards). If dataset ``k`` owns that offset and ``c``
  offsets of ``k`` come before it in the period, the element is ``datasets[k][period * n_k + c]``.
* A mixed ``MapDataset`` has ``int(min_k(len_k / (n_k / P)))`` elements, in float arithmetic
  (which sometimes lands one below the exact quotient, as Grain's does): it ends about when the
  first input would be read past its end at its own rate. It is at most ``sys.maxsize``
  (Grain's "endless"), so a mix of endless inputs is endless.

One period is tabulated once (up to :data:`_MAX_TABLE` offsets), after which a position costs a
divmod and two table reads; a whole index array is resolved with numpy in one go.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from grainlite.errors import GrainliteTypeError, GrainliteValueError

_MAX_TABLE = 1 << 16  # offsets tabulated per period; beyond that, each offset is computed


def integer_proportions(weights: Sequence[Any] | None, count: int) -> tuple[int, ...]:
    """The integer share of each of ``count`` datasets per period (see the module docstring).

    Raises:
      GrainliteValueError: not one weight per dataset, or a weight that is not positive.
      GrainliteTypeError: a weight that is not a real number.
    """
    if weights is None:
        weights = [1.0] * count
    weights = list(weights)
    if len(weights) != count:
        raise GrainliteValueError(
            f"mix got {len(weights)} weights for {count} datasets (weights={weights!r}); pass "
            "one weight per dataset, or weights=None to mix them equally."
        )
    values = []
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            raise GrainliteTypeError(
                f"mix weights must be real numbers (got {weight!r} of type "
                f"{type(weight).__name__} in {weights!r}); pass numbers such as [0.3, 0.7]."
            )
        values.append(float(weight))
    if not all(value > 0 for value in values):
        # Grain's sentence only where it is true: a weight is 0 (Grain refuses only that here).
        grains = "Must specify all non-zero proportions for mixing: " if 0.0 in values else ""
        raise GrainliteValueError(
            f"{grains}every mix weight must be above 0, got {weights!r}; drop the datasets you "
            "do not want to read, or give each a weight above 0."
        )
    scale = 100 / min(values)
    return tuple(int(value * scale) for value in values)


def mixed_length(lengths: Sequence[int], proportions: Sequence[int]) -> int:
    """The length of a mixed ``MapDataset``: ``int(min_k(len_k / (n_k / P)))`` in floats, at most
    ``sys.maxsize``."""
    period = sum(proportions)
    quotient = min(length / (share / period) for length, share in zip(lengths, proportions))
    return sys.maxsize if quotient >= sys.maxsize else int(quotient)


def _locate_offsets(offsets: np.ndarray, proportions: Sequence[int]) -> tuple[Any, Any]:
    """For offsets within one period: the dataset owning each, and how many of its offsets
    precede it in the period (numpy arrays; object arrays of Python ints for huge periods)."""
    period = sum(proportions)
    dtype: Any = np.int64 if period < (1 << 31) else object
    remaining_offset = np.asarray(offsets).astype(dtype)
    which = np.full(remaining_offset.shape, len(proportions) - 1, dtype=np.int64)
    before = remaining_offset.copy()  # the last dataset owns every offset left to it
    undecided = np.ones(remaining_offset.shape, dtype=bool)
    remaining = period
    for k, share in enumerate(proportions[:-1]):
        off = remaining_offset[undecided]
        # Offsets of k below ``off``: ceil(off * share / remaining); k owns ``off`` when the
        # count below ``off + 1`` is larger.
        count_before = -((-off * share) // remaining)
        count_upto = -((-(off + 1) * share) // remaining)
        owned = count_upto > count_before
        positions = np.flatnonzero(undecided)
        which[positions[owned]] = k
        before[positions[owned]] = count_before[owned]
        remaining_offset[positions[~owned]] = (off - count_before)[~owned]
        before[positions[~owned]] = remaining_offset[positions[~owned]]
        undecided[positions[owned]] = False
        remaining -= share
    return which, before


class _Table(NamedTuple):
    """One period tabulated: the owner of each offset and the count before it, as lists (for
    single lookups) and arrays (for blocks)."""

    which: list[int]
    before: list[int]
    which_array: np.ndarray
    before_array: np.ndarray


class MixSelection:
    """Maps positions of a weighted mix to ``(dataset, index in that dataset)``.

    The period table is built on first use and published with one attribute assignment, so
    reader threads that race to build it each see either nothing or a complete table.

    Args:
      proportions: the integer proportions from :func:`integer_proportions`.
    """

    def __init__(self, proportions: Sequence[int]) -> None:
        self.proportions = tuple(int(share) for share in proportions)
        self.period = sum(self.proportions)
        self._shares = np.asarray(self.proportions, dtype=np.int64)
        self._tabulated: _Table | None = None

    def _table(self) -> _Table | None:
        table = self._tabulated
        if table is None and self.period <= _MAX_TABLE:
            which, before = _locate_offsets(np.arange(self.period), self.proportions)
            before = before.astype(np.int64)
            table = self._tabulated = _Table(which.tolist(), before.tolist(), which, before)
        return table

    def owner_table(self) -> list[int] | None:
        """The dataset of each offset of one period, or None when the period is too long to
        tabulate (then :meth:`dataset_of` computes each)."""
        table = self._table()
        return None if table is None else table.which

    def dataset_of(self, position: int) -> int:
        """The dataset that position ``position`` reads from."""
        offset = position % self.period
        table = self._table()
        if table is not None:
            return table.which[offset]
        return int(_locate_offsets(np.asarray([offset]), self.proportions)[0][0])

    def locate(self, position: int) -> tuple[int, int]:
        """``(dataset, index in that dataset)`` of position ``position`` (any int)."""
        cycle, offset = divmod(position, self.period)
        table = self._table()
        if table is not None:
            k = table.which[offset]
            return k, cycle * self.proportions[k] + table.before[offset]
        which, before = _locate_offsets(np.asarray([offset]), self.proportions)
        k = int(which[0])
        return k, cycle * self.proportions[k] + int(before[0])

    def locate_many(self, positions: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The dataset of each position and the index in it (int arrays; object arrays of
        Python ints for huge periods)."""
        keys = np.asarray(positions, dtype=object if self.period >= (1 << 31) else np.int64)
        cycles, offsets = keys // self.period, keys % self.period
        table = self._table()
        if table is not None:
            which = table.which_array[offsets]
            before = table.before_array[offsets]
        else:
            which, before = _locate_offsets(offsets, self.proportions)
        return which, cycles * self._shares.astype(keys.dtype)[which] + before
