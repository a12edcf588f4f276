"""What a checkpoint must agree with: a loader's process layout and its identity strings.

A :class:`Layout` is built once per loader (:meth:`Layout.of`) and passed to everything that
writes or reads a state: :func:`~grainlite.loader.state.encoding.dump` turns positions into global
indices with it, :func:`~grainlite.loader.state.decoding.worker_states` checks a state's worker
count, sampler and data source against it, and the elastic restore compares it with the layout a
state was saved with (:meth:`Layout.saved_as`). It has its own module because every part of the
checkpoint needs it and none of them owns it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from grainlite.loader.striding import WorkerSlice
from grainlite.sources.protocol import source_aliases, source_repr


@dataclass(frozen=True)
class Layout:
    """What a state must agree with: this loader's process layout and identity strings."""

    worker_count: int
    shard_index: int
    shard_count: int
    sampler_repr: str
    source_repr: str
    flat_map: bool
    # The sampler's length (None: it has none). A saved position past it is refused: it would
    # silently end the epoch.
    sampler_length: int | None = None
    # Other data_source texts that restore onto this source (sources.protocol.source_aliases).
    source_aliases: tuple[str, ...] = ()

    @staticmethod
    def of(
        worker_count: int,
        sampler: Any,
        data_source: Any,
        flat_map: bool,
        shard_index: int = 0,
        shard_count: int = 1,
    ) -> Layout:
        """The layout of a loader with these settings (the one place one is built from them)."""
        return Layout(
            worker_count=worker_count,
            shard_index=shard_index,
            shard_count=shard_count,
            sampler_repr=repr(sampler),
            source_repr=source_repr(data_source),
            flat_map=flat_map,
            sampler_length=len(sampler) if hasattr(sampler, "__len__") else None,
            source_aliases=source_aliases(data_source),
        )

    def saved_as(self, worker_count: int, shard_index: int, shard_count: int) -> Layout:
        """This loader's layout with the process layout a state was saved with."""
        return dataclasses.replace(
            self, worker_count=worker_count, shard_index=shard_index, shard_count=shard_count
        )

    @property
    def where(self) -> tuple[int, int, int]:
        """(shard_index, shard_count, worker_count): the layout holes are written for."""
        return self.shard_index, self.shard_count, self.worker_count

    @property
    def workers(self) -> int:
        """Streams per host: the worker count, or 1 for the in-process loader."""
        return max(self.worker_count, 1)

    def worker_slice(self, worker: int) -> WorkerSlice:
        """The global indices that worker ``worker`` of this host reads."""
        return WorkerSlice.striding(self.shard_index, self.shard_count, worker, self.workers)
