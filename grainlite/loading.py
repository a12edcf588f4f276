"""``load()``: a DataLoader from a source and a few common options, as in Grain."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grainlite.loader.data_loader import DataLoader
from grainlite.loader.options import ReadOptions
from grainlite.sampling.samplers import IndexSampler
from grainlite.sampling.sharding import NoSharding, ShardOptions
from grainlite.transforms.batch import Batch


def load(
    source: Any,
    *,
    num_epochs: int | None = None,
    shuffle: bool = False,
    seed: int | None = None,
    shard_options: ShardOptions | None = None,
    transformations: Sequence[Any] = (),
    batch_size: int | None = None,
    drop_remainder: bool = False,
    worker_count: int | None = 0,
    read_options: ReadOptions | None = None,
) -> DataLoader:
    """A DataLoader over ``source`` with an IndexSampler, the transformations and optional batching.

    Equivalent to building ``IndexSampler(len(source), shard_options, shuffle, num_epochs, seed)``
    and a DataLoader with ``transformations`` followed by ``Batch(batch_size, drop_remainder)``
    when ``batch_size`` is given.
    """
    sampler = IndexSampler(
        num_records=len(source),
        shard_options=shard_options if shard_options is not None else NoSharding(),
        shuffle=shuffle,
        num_epochs=num_epochs,
        seed=seed,
    )
    operations = list(transformations)
    if batch_size is not None:
        operations.append(Batch(batch_size=batch_size, drop_remainder=drop_remainder))
    return DataLoader(
        data_source=source,
        sampler=sampler,
        operations=operations,
        worker_count=worker_count,
        read_options=read_options,
    )
