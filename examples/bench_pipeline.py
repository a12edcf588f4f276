"""A loader factory for ``python -m grainlite bench``: the shape your own factory takes.

    python -m grainlite bench examples/bench_pipeline.py:make_loader --seconds 5

The command calls ``make_loader(worker_count=N)`` for several N (and ``worker_buffer_size=`` /
``read_options=`` because this factory accepts them), runs each loader for a few seconds, and
prints records/s, the stats table and the recommended settings. ``make_dataset`` is the same
pipeline in the Dataset API (``worker_count`` becomes ``mp_prefetch``'s ``num_workers``).
Run directly, this file benchmarks itself briefly.
"""

from __future__ import annotations

import sys

import numpy as np

import grainlite as grain


class Square(grain.MapTransform):
    """A little CPU work per record, so worker processes have something to share."""

    def map(self, element: int) -> np.ndarray:
        values = np.arange(64, dtype=np.float64) + element
        return np.sqrt(values * values)


def make_loader(
    worker_count: int, worker_buffer_size: int = 1, read_options: grain.ReadOptions | None = None
) -> grain.DataLoader:
    """A DataLoader over 20,000 records, endlessly (bench stops it): Square, then batches of 32."""
    source = grain.RangeDataSource(0, 20_000, 1)
    return grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(len(source), grain.NoSharding(), shuffle=True, seed=0),
        operations=[Square(), grain.Batch(32)],
        worker_count=worker_count,
        worker_buffer_size=worker_buffer_size,
        read_options=read_options,
    )


def make_dataset(worker_count: int) -> grain.IterDataset:
    """The same pipeline with the Dataset API."""
    dataset = grain.MapDataset.range(20_000).shuffle(seed=0).repeat().to_iter_dataset()
    dataset = dataset.map(Square()).batch(32)
    if worker_count:
        dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=worker_count))
    return dataset


if __name__ == "__main__":
    from grainlite.__main__ import main

    sys.exit(main(["bench", f"{__file__}:make_loader", "--seconds", "0.2", "--workers", "0,1"]))
