"""What the twin loaders of :mod:`grain_peer` compute, in a module that imports neither library.

Both libraries' worker processes import this module to run a pipeline (the transforms' methods
and the data source are found here by name). It imports only numpy: when these functions lived
beside the real ``grain`` import, each grainlite worker imported Grain, and JAX with it, for
2.5 s of CPU before its first record.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np


def times_ten_plus_one(self: Any, x: Any) -> Any:
    """A MapTransform's ``map``."""
    return x * 10 + 1


def with_noise(self: Any, x: Any, rng: np.random.Generator | None) -> Any:
    """A RandomMapTransform's ``random_map``: the record, then a number drawn from ``rng``."""
    noise = -1 if rng is None else int(rng.integers(0, 1000))
    return np.append(np.asarray(x, dtype=np.int64), noise)


def not_multiple_of_three(self: Any, x: Any) -> bool:
    """A FilterTransform's ``filter``: keeps elements whose first value is not a multiple of 3."""
    return int(np.asarray(x).ravel()[0]) % 3 != 0


def two_or_none(self: Any, x: Any) -> list[Any]:
    """A FlatMapTransform's ``flat_map``: two elements, or none where the first value is a
    multiple of four."""
    return [x, x + 1000] if int(np.asarray(x).ravel()[0]) % 4 else []


class EndlessWithoutOutputError(RuntimeError):
    """An endless stream read far more records than a test needs: its transforms drop them all."""


class BoundedRange:
    """``range(n)`` as a data source that gives up after ``limit`` reads.

    For endless streams only: with a filter or flat_map that drops every record of an epoch
    (e.g. a batch whose first value is always a multiple of three), grain and grainlite would both
    read forever without yielding. Both libraries see the same object, so states name the same
    source.
    """

    def __init__(self, n: int, limit: int = 3_000) -> None:
        self.n, self.limit, self.reads = n, limit, 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: int) -> int:
        with self._lock:
            self.reads += 1
            if self.reads > self.limit:
                raise EndlessWithoutOutputError(f"read {self.limit} records without finishing")
        return int(key)

    def __getstate__(self) -> dict[str, Any]:
        # Worker processes get a copy without the lock; each counts its own reads.
        return {"n": self.n, "limit": self.limit, "reads": 0}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BoundedRange(n={self.n})"
