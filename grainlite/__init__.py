"""grainlite: a fast, leak-free data loader for JAX with Google Grain's DataLoader API.

``import grainlite as grain`` (or ``import grainlite.python as grain``) gives the names of Grain's
``grain.python`` DataLoader path. Importing grainlite loads numpy and cloudpickle only; Orbax, JAX,
TFDS, array_record, OpenCV and matplotlib load where they are used.
"""

from __future__ import annotations

from typing import Any

from grainlite import experimental
from grainlite.loader.data_loader import DataLoader, DataLoaderIterator
from grainlite.loader.options import MultiprocessingOptions, ReadOptions
from grainlite.loader.shm import remove_stale_segments
from grainlite.loading import load
from grainlite.sampling.records import Record, RecordMetadata
from grainlite.sampling.samplers import IndexSampler, Sampler, SequentialSampler
from grainlite.sampling.sharding import NoSharding, ShardByJaxProcess, ShardOptions
from grainlite.sources.array_record import ArrayRecordDataSource
from grainlite.sources.in_memory import InMemoryDataSource, SharedMemoryDataSource
from grainlite.sources.protocol import RandomAccessDataSource
from grainlite.sources.range import RangeDataSource
from grainlite.transforms.base import (
    FilterTransform,
    FlatMapTransform,
    MapTransform,
    RandomMapTransform,
    Transformation,
    Transformations,
)
from grainlite.transforms.batch import Batch

PyGrainDatasetIterator = DataLoaderIterator

# Names that need Orbax: resolved on first use, so `import grainlite` never imports Orbax.
_CHECKPOINT_NAMES = {
    "GrainCheckpointHandler": "CheckpointHandler",
    "GrainCheckpointRestore": "CheckpointRestore",
    "GrainCheckpointSave": "CheckpointSave",
    "PyGrainCheckpointHandler": "CheckpointHandler",
    "PyGrainCheckpointRestore": "CheckpointRestore",
    "PyGrainCheckpointSave": "CheckpointSave",
}


def __getattr__(name: str) -> Any:
    if name in _CHECKPOINT_NAMES:
        from grainlite import checkpoint

        return getattr(checkpoint, _CHECKPOINT_NAMES[name])
    raise AttributeError(f"module 'grainlite' has no attribute {name!r}")


__all__ = [
    "ArrayRecordDataSource",
    "Batch",
    "DataLoader",
    "DataLoaderIterator",
    "FilterTransform",
    "FlatMapTransform",
    "GrainCheckpointHandler",
    "GrainCheckpointRestore",
    "GrainCheckpointSave",
    "InMemoryDataSource",
    "IndexSampler",
    "MapTransform",
    "MultiprocessingOptions",
    "NoSharding",
    "PyGrainCheckpointHandler",
    "PyGrainCheckpointRestore",
    "PyGrainCheckpointSave",
    "PyGrainDatasetIterator",
    "RandomAccessDataSource",
    "RandomMapTransform",
    "RangeDataSource",
    "ReadOptions",
    "Record",
    "RecordMetadata",
    "Sampler",
    "SequentialSampler",
    "ShardByJaxProcess",
    "ShardOptions",
    "SharedMemoryDataSource",
    "Transformation",
    "Transformations",
    "experimental",
    "load",
    "remove_stale_segments",
]
