"""A run of a Grain-API DataLoader (grainlite's or grain's): the same code drives both."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from benchmarks.workloads import Config, Workload


class LibraryRun:
    """A DataLoader over ``source`` with the workload's operations and the config's options.

    Args:
      grain: the library module (``grainlite`` or ``grain.python``).
      transform: the per-record transform instance (a subclass of that library's base class).
    """

    def __init__(
        self,
        grain: ModuleType,
        workload: Workload,
        config: Config,
        source: Any,
        seed: int,
        transform: Any,
    ) -> None:
        self.grain = grain
        self.source = source
        self.sampler = grain.IndexSampler(
            len(source), grain.NoSharding(), shuffle=True, num_epochs=1, seed=seed
        )
        self.operations = [transform, grain.Batch(workload.batch_size)]
        self.config = config
        # Resolved here, before the clock, like every import: grainlite loads its loader modules
        # on first use of the name (grain at ``import``).
        self.loader_class = grain.DataLoader
        self._iterator: Any = None

    def iterate(self) -> Iterator[Any]:
        """Builds the DataLoader and its iterator (this is inside the timed region)."""
        kwargs: dict[str, Any] = {}
        if self.config.reader_threads is not None:
            kwargs["read_options"] = self.grain.ReadOptions(num_threads=self.config.reader_threads)
        loader = self.loader_class(
            data_source=self.source,
            sampler=self.sampler,
            operations=self.operations,
            worker_count=self.config.workers,
            **kwargs,
        )
        self._iterator = iter(loader)
        return self._iterator

    def close(self) -> None:
        """Stops reader threads and worker processes: ``close()`` where the iterator has one
        (grainlite), otherwise dropping the last reference (grain 0.2.18 stops its workers when
        its iterator is collected)."""
        iterator, self._iterator = self._iterator, None
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        del iterator, close
        gc.collect()

    def position_of(self) -> dict[int, int]:
        """Key -> sampler position (the generator of a record is Philox(seed + position))."""
        return {self.sampler[i].record_key: i for i in range(len(self.source))}
