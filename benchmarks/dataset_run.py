"""A run of Grain's Dataset API (grainlite's or grain's): the same code drives both.

The pipeline is the one Grain's users write: ``MapDataset.source(source).shuffle(seed)``, the
workload's ``map`` (or ``random_map(seed=seed)``), ``batch(batch_size)``, ``to_iter_dataset()``
and, with workers, ``mp_prefetch(MultiprocessingOptions(num_workers=W))``.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks.workloads import Config, Workload, dataset_rng


class DatasetRun:
    """A Dataset-API pipeline over ``source`` with the workload's transform and batch size.

    Args:
      grain: the library module (``grainlite`` or ``grain``), which has ``MapDataset``.
      transform: the per-record transform instance; a ``RandomMapTransform`` goes through
        ``random_map(seed=seed)``, anything else through ``map``.
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
        self.seed = seed
        self.transform = transform
        self.batch_size = workload.batch_size
        self.config = config
        # Resolved before the clock, like every import (grainlite loads modules on first use).
        self.classes = (grain.MapDataset, grain.MultiprocessingOptions)
        self._iterator: Any = None

    def iterate(self) -> Iterator[Any]:
        """Builds the pipeline and its iterator (this is inside the timed region)."""
        grain, seed = self.grain, self.seed
        map_dataset, options_class = self.classes
        dataset = map_dataset.source(self.source).shuffle(seed=seed)
        if isinstance(self.transform, grain.RandomMapTransform):
            dataset = dataset.random_map(self.transform, seed=seed)
        else:
            dataset = dataset.map(self.transform)
        stream = dataset.batch(self.batch_size).to_iter_dataset()
        if self.config.workers:
            options = options_class(num_workers=self.config.workers)
            stream = stream.mp_prefetch(options)
        self._iterator = iter(stream)
        return self._iterator

    def close(self) -> None:
        """Stops the iterator's threads and processes: ``close()`` (both libraries have it)."""
        iterator, self._iterator = self._iterator, None
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        del iterator, close
        gc.collect()

    def position_of(self) -> dict[int, int]:
        """Key -> position in the shuffled order (the library's own shuffle of the keys)."""
        keys = self.grain.MapDataset.range(len(self.source)).shuffle(seed=self.seed)
        return {int(keys[i]): i for i in range(len(keys))}

    def rng_for_position(self, position: int) -> np.random.Generator:
        """The generator the element at ``position`` of the shuffled order must have used."""
        return dataset_rng(self.seed, position)
