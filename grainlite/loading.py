"""``load()``: a DataLoader from a source and a few common options, as Grain's ``grain.load``."""

from __future__ import annotations

from collections.abc import Sequence

from grainlite.loader.data_loader import DataLoader
from grainlite.options import ReadOptions
from grainlite.sampling.index_sampler import IndexSampler
from grainlite.sampling.sharding import NoSharding, ShardOptions
from grainlite.sources.protocol import RandomAccessDataSource
from grainlite.transforms.base import Transformation
from grainlite.transforms.batch import Batch

_NO_SHARDING = NoSharding()  # frozen: safe to share as the default, as Grain's signature shows


def load(
    source: RandomAccessDataSource,
    *,
    num_epochs: int | None = None,
    shuffle: bool = False,
    seed: int | None = None,
    shard_options: ShardOptions = _NO_SHARDING,
    transformations: Sequence[Transformation] = (),
    batch_size: int | None = None,
    drop_remainder: bool = False,
    worker_count: int | None = 0,
    read_options: ReadOptions | None = None,
) -> DataLoader:
    """A DataLoader over ``source`` with an IndexSampler, the transformations and optional batching.

    The same signature, defaults and result as Grain 0.2.18's ``grain.load``: it builds
    ``IndexSampler(len(source), shard_options, shuffle, num_epochs, seed)`` and a DataLoader
    running ``transformations`` followed by ``Batch(batch_size, drop_remainder)`` when
    ``batch_size`` is given, in ``worker_count`` worker processes.

    Args:
      source: the data source (any object with ``__len__`` and ``__getitem__``).
      num_epochs: passes over the data; None repeats forever (see IndexSampler).
      shuffle: shuffle the records of each epoch (needs ``seed``).
      seed: the seed of the shuffle and of the random transforms' generators.
      shard_options: which part of the data this process reads; NoSharding() by default.
      transformations: the transforms applied to each record, in order.
      batch_size: if given, batch that many elements (after the transformations).
      drop_remainder: whether to drop the last, smaller batch.
      worker_count: worker processes running the transformations; 0 runs them in this process.
      read_options: how the source is read (threads, buffer); ReadOptions() by default.

    Returns:
      The DataLoader; iterate it (or ``iter()`` it) for the elements.
    """
    sampler = IndexSampler(
        num_records=len(source),
        shard_options=shard_options,
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
