"""``RangeDataSource``: the integers ``start, start + step, ...`` short of ``stop``, as a source.

It needs no storage, pickles as three ints, and has a stable repr, which makes it the source of
choice for tests, benchmarks and examples. Construction rules, length and errors follow Grain's
``RangeDataSource`` (not Python's ``range``: a range that runs backwards is an error, not empty).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, SupportsIndex

import numpy as np

from grainlite.errors import GrainliteTypeError, RangeArgumentError
from grainlite.sources.protocol import key_out_of_range

_INT64_MAX = np.iinfo(np.int64).max


def _as_int(name: str, value: Any) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise GrainliteTypeError(
            f"RangeDataSource {name} must be an int (got {type(value).__name__} {value!r}); "
            f"pass a whole number, e.g. {name}=int(x)."
        ) from None


class RangeDataSource:
    """The records ``start + k * step`` for ``0 <= k < ceil((stop - start) / step)``.

    Args:
      start: the first record.
      stop: the bound the records stay short of (excluded, as in ``range``).
      step: the distance between records; negative counts down. Must not be 0.

    Raises:
      RangeArgumentError: ``step`` is 0, or ``stop`` lies behind ``start`` in the direction of
        ``step`` (Grain's AssertionErrors, "step can't be zero." and "length can't be negative.").
      GrainliteTypeError: an argument is not an integer.
    """

    def __init__(self, start: int, stop: int, step: int) -> None:
        self._start = _as_int("start", start)
        self._stop = _as_int("stop", stop)
        self._step = _as_int("step", step)
        if self._step == 0:
            raise RangeArgumentError(
                "step can't be zero. RangeDataSource step must be non-zero (got step=0); pass "
                "step=1 to count up or step=-1 to count down."
            )
        length = -((self._start - self._stop) // self._step)  # ceil((stop - start) / step)
        if length < 0:
            direction = "up" if self._step > 0 else "down"
            raise RangeArgumentError(
                f"length can't be negative. RangeDataSource(start={self._start}, "
                f"stop={self._stop}, step={self._step}) counts {direction} from start but stop "
                f"lies the other way, giving length {length}; swap start and stop or flip the "
                f"sign of step."
            )
        self._len = length
        last = self._start + (length - 1) * self._step if length else self._start
        # numpy computes a batch of records only while every record and offset fits in int64.
        self._vectorizable = max(abs(self._start), abs(last), abs(last - self._start)) <= _INT64_MAX

    @property
    def start(self) -> int:
        """The first record."""
        return self._start

    @property
    def stop(self) -> int:
        """The excluded bound."""
        return self._stop

    @property
    def step(self) -> int:
        """The distance between consecutive records."""
        return self._step

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, key: SupportsIndex) -> int:
        """The record ``start + key * step``; any ``__index__`` key in ``[0, len)`` works."""
        try:
            k = operator.index(key)
        except TypeError:
            raise GrainliteTypeError(
                f"RangeDataSource keys must be ints (got {type(key).__name__} {key!r}); pass "
                f"an int or a numpy integer."
            ) from None
        if not 0 <= k < self._len:
            raise key_out_of_range("RangeDataSource", k, self._len)
        return self._start + k * self._step

    def __getitems__(self, keys: Sequence[SupportsIndex]) -> list[int]:
        """The records of all ``keys`` at once (one numpy expression instead of a Python loop)."""
        if not self._vectorizable:
            return [self[key] for key in keys]
        array = np.asarray(keys).reshape(-1)
        if array.size == 0:
            return []
        if array.dtype.kind not in "biu" or (array.dtype.kind == "u" and array.max() > _INT64_MAX):
            return [self[key] for key in keys]  # Not int64 keys: reports the first bad one exactly.
        array = array.astype(np.int64, copy=False)
        if array.min() < 0 or array.max() >= self._len:
            bad = int(array[np.flatnonzero((array < 0) | (array >= self._len))[0]])
            raise key_out_of_range("RangeDataSource", bad, self._len)
        return (array * self._step + self._start).tolist()

    def __repr__(self) -> str:
        return f"RangeDataSource(start={self._start}, stop={self._stop}, step={self._step})"
