"""Which global sampler indices each worker reads: the one striding rule of the DataLoader.

Host ``s`` of ``S`` (``shard_index``, ``shard_count``) reads the indices ``i ≡ s (mod S)``; worker
``w`` of ``W`` on it reads every W-th of those, so worker ``w`` reads ``s + S*w + S*W*k`` for
``k = 0, 1, 2, ...``. Grain strides the same way, which is what makes the order of elements and
the ``last_seen_indices`` of a checkpoint equal to Grain's. The reader uses it to know what to
read, the checkpoint codec to turn positions into indices and back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class WorkerSlice:
    """The global sampler indices one worker reads: ``first + stride * m`` while below ``end``.

    ``end`` is the sampler's length, or None when it is unknown (a sampler without ``__len__``:
    the stream then ends at the first index for which the sampler raises IndexError).
    """

    first: int
    stride: int
    end: int | None = None

    @classmethod
    def striding(
        cls, shard_index: int, shard_count: int, worker: int, workers: int, end: int | None = None
    ) -> WorkerSlice:
        """The slice of worker ``worker`` of ``workers`` on host ``shard_index`` of ``shard_count``.

        ``workers`` counts the streams of one host: the worker count, or 1 without workers.
        """
        return cls(shard_index + shard_count * worker, shard_count * workers, end)

    @classmethod
    def of(
        cls, sampler: Any, shard_index: int, shard_count: int, worker: int, workers: int
    ) -> WorkerSlice:
        """:meth:`striding`, ending at ``len(sampler)`` where the sampler has a length."""
        end = len(sampler) if hasattr(sampler, "__len__") else None
        return cls.striding(shard_index, shard_count, worker, workers, end)

    def index(self, position: int) -> int:
        """The global sampler index of this worker's ``position``-th read (0-based)."""
        return self.first + self.stride * position

    def indices(self, start: int, stop: int) -> np.ndarray:
        """The global sampler indices of positions ``start`` to ``stop - 1``, as int64."""
        return self.first + self.stride * np.arange(start, stop, dtype=np.int64)

    def position(self, index: int) -> int | None:
        """The position that reads ``index`` (negative below ``first``), or None if none does."""
        steps, rest = divmod(index - self.first, self.stride)
        return None if rest else steps

    def positions(self) -> int | None:
        """How many positions this worker reads, or None if unknown (no sampler length)."""
        if self.end is None:
            return None
        return max(0, -(-(self.end - self.first) // self.stride))
