"""Which global sampler indices each worker reads: the one striding rule of the DataLoader.

Host ``s`` of ``S`` (``shard_index``, ``shard_count``) reads the indices ``i ≡ s (mod S)``; worker
``w`` of ``W`` on it reads every W-th of those, so worker ``w`` reads ``s + S*w + S*W*k`` for
``k = 0, 1, 2, ...``. Grain strides the same way, which is what makes the order of elements and
the ``last_seen_indices`` of a checkpoint equal to Grain's. The reader uses it to know what to
read, the checkpoint codec to turn positions into indices and back.

After an elastic restore (see :mod:`grainlite.loader.state.elastic`) a worker first reads an
explicit list of "holes" (indices the old layout had not delivered), then its native indices: the
holes take the positions just before the first native position it reads, so once they are read the
worker's position is an ordinary native position again.
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

    ``head`` (empty unless restored elastically) holds explicit indices read at positions
    ``head_start`` to ``head_start + len(head) - 1``; the native indices are read from position
    ``head_start + len(head)`` on. Positions may then be negative.
    """

    first: int
    stride: int
    end: int | None = None
    head: tuple[int, ...] = ()
    head_start: int = 0

    @property
    def tail_start(self) -> int:
        """The first position that reads a native index (after the head)."""
        return self.head_start + len(self.head)

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
        if self.head and self.head_start <= position < self.head_start + len(self.head):
            return self.head[position - self.head_start]
        return self.first + self.stride * position

    def indices(self, start: int, stop: int) -> np.ndarray:
        """The global sampler indices of positions ``start`` to ``stop - 1``, as int64."""
        native = self.first + self.stride * np.arange(start, stop, dtype=np.int64)
        if self.head and start < self.tail_start and stop > self.head_start:
            lo, hi = max(start, self.head_start), min(stop, self.tail_start)
            head = self.head[lo - self.head_start : hi - self.head_start]
            native[lo - start : hi - start] = head
        return native

    def position(self, index: int) -> int | None:
        """The position that reads ``index`` (negative below ``first``), or None if none does."""
        if self.head:
            if index in self.head:
                return self.head_start + self.head.index(index)
            steps, rest = divmod(index - self.first, self.stride)
            return None if rest or steps < self.tail_start else steps
        steps, rest = divmod(index - self.first, self.stride)
        return None if rest else steps

    def positions(self) -> int | None:
        """How many positions this worker reads, or None if unknown (no sampler length).

        With a head, this is the position after the last one read (the head's or the tail's).
        """
        if self.end is None:
            return None
        native = max(0, -(-(self.end - self.first) // self.stride))
        return max(native, self.tail_start) if self.head else native
