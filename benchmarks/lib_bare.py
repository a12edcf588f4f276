"""The bare loop: the same reads and per-record work in one plain Python loop, one process.

It is the one-core limit a loader is compared with: no threads, no processes, no framework.
Records are read in a shuffled order (a numpy permutation of the keys) with the source's
``__getitem__``; an image record ``i``-th in that order gets
``Generator(Philox(key=seed + i))``, the generator Grain gives the ``i``-th record.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.workloads import Config, Workload, augment_image, parse_small


class BareArrayRecord:
    """An ArrayRecord file read one record at a time with the reader's range read."""

    def __init__(self, path: Path) -> None:
        from array_record.python.array_record_module import ArrayRecordReader

        self._reader = ArrayRecordReader(str(path), "readahead_buffer_size:0")
        self._len = self._reader.num_records()

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, key: int) -> bytes:
        return self._reader.read(key, key + 1)[0]

    def close(self) -> None:
        """Closes the reader."""
        self._reader.close()


class BareRun:
    """A bare-loop run over one source."""

    def __init__(self, workload: Workload, config: Config, source: Any, seed: int) -> None:
        self.workload = workload
        self.source = source
        self.seed = seed
        self._order = np.random.default_rng(seed).permutation(len(source))

    def iterate(self) -> Iterator[Any]:
        """The batches, built with np.stack like Batch does."""
        source, seed, size = self.source, self.seed, self.workload.batch_size
        order = self._order.tolist()
        images = self.workload.name == "images"
        for start in range(0, len(order), size):
            keys = order[start : start + size]
            if images:
                items = [
                    augment_image(source[key], np.random.Generator(np.random.Philox(key=seed + i)))
                    for i, key in enumerate(keys, start)
                ]
                yield {name: np.stack([item[name] for item in items]) for name in items[0]}
            else:
                yield np.stack([parse_small(source[key]) for key in keys])

    def close(self) -> None:
        """Nothing runs in the background."""

    def position_of(self) -> dict[int, int]:
        """Key -> position in the shuffled order (to recompute a record's generator)."""
        return {int(key): i for i, key in enumerate(self._order)}
