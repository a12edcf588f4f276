"""grainlite: a fast, leak-free data loader for JAX with Google Grain's DataLoader and Dataset APIs.

``import grainlite as grain`` (or ``import grainlite.python as grain``) gives the names of Grain's
``grain`` and ``grain.python`` namespaces for the DataLoader path and the Dataset API
(``MapDataset``, ``IterDataset``, ``DatasetIterator``), with Grain's submodules
(``grain.samplers``, ``grain.sharding``, ``grain.sources``, ``grain.transforms``,
``grain.checkpoint``, ``grain.constants``, ``grain.config``, ``grain.experimental``,
``grain.multiprocessing``);
docs/grain_names.md lists every Grain name and its status here. Importing grainlite loads numpy
and cloudpickle only; Orbax, JAX, TFDS, array_record, OpenCV and matplotlib load where they are
used.
"""

from __future__ import annotations

from typing import Any

from grainlite import (
    checkpoint,
    config,
    constants,
    experimental,
    multiprocessing,
    samplers,
    sharding,
    sources,
    transforms,
)
from grainlite.constants import (
    DATASET_INDEX,
    EPOCH,
    INDEX,
    META_FEATURES,
    RECORD,
    RECORD_KEY,
    SEED,
)
from grainlite.dataset.base import DatasetIterator, IterDataset, MapDataset
from grainlite.errors import (
    CheckpointMismatchError,
    CorruptedDataError,
    GrainliteError,
    GrainliteRuntimeError,
    GrainliteTypeError,
    GrainliteValueError,
    LoaderClosedError,
    MissingExtraError,
    ResourceLimitError,
    SharedMemoryError,
    SharedMemoryFullError,
    StateNotJSONError,
    WorkerDiedError,
    WorkerTimeoutError,
)
from grainlite.loader.data_loader import DataLoader, DataLoaderIterator
from grainlite.loader.options import MultiprocessingOptions, ReadOptions
from grainlite.loading import load
from grainlite.sampling.records import Record, RecordMetadata
from grainlite.sampling.samplers import IndexSampler, Sampler, SequentialSampler
from grainlite.sampling.sharding import NoSharding, ShardByJaxProcess, ShardOptions
from grainlite.shm import remove_stale_segments
from grainlite.shm.array import SharedMemoryArray
from grainlite.sources.array_record import ArrayRecordDataSource
from grainlite.sources.in_memory import InMemoryDataSource, SharedMemoryDataSource
from grainlite.sources.protocol import RandomAccessDataSource
from grainlite.sources.range import RangeDataSource
from grainlite.transforms.base import (
    FilterTransform,
    FlatMapTransform,
    MapTransform,
    MapWithIndexTransform,
    RandomMapTransform,
    Transformation,
    Transformations,
)
from grainlite.transforms.batch import Batch
from grainlite.transforms.legacy import (
    BatchOperation,
    FilterOperation,
    MapOperation,
    Operation,
    RandomMapOperation,
)
from grainlite.transforms.selection import DatasetSelectionMap

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
    if name == "device_put":  # grainlite.device loads on first use (it imports JAX when called)
        from grainlite.device import device_put

        return device_put
    raise AttributeError(f"module 'grainlite' has no attribute {name!r}")


__all__ = [
    "DATASET_INDEX",
    "EPOCH",
    "INDEX",
    "META_FEATURES",
    "RECORD",
    "RECORD_KEY",
    "SEED",
    "ArrayRecordDataSource",
    "Batch",
    "BatchOperation",
    "CheckpointMismatchError",
    "CorruptedDataError",
    "DataLoader",
    "DataLoaderIterator",
    "DatasetIterator",
    "DatasetSelectionMap",
    "FilterOperation",
    "FilterTransform",
    "FlatMapTransform",
    "GrainCheckpointHandler",
    "GrainCheckpointRestore",
    "GrainCheckpointSave",
    "GrainliteError",
    "GrainliteRuntimeError",
    "GrainliteTypeError",
    "GrainliteValueError",
    "InMemoryDataSource",
    "IndexSampler",
    "IterDataset",
    "LoaderClosedError",
    "MapDataset",
    "MapOperation",
    "MapTransform",
    "MapWithIndexTransform",
    "MissingExtraError",
    "MultiprocessingOptions",
    "NoSharding",
    "Operation",
    "PyGrainCheckpointHandler",
    "PyGrainCheckpointRestore",
    "PyGrainCheckpointSave",
    "PyGrainDatasetIterator",
    "RandomAccessDataSource",
    "RandomMapOperation",
    "RandomMapTransform",
    "RangeDataSource",
    "ReadOptions",
    "Record",
    "RecordMetadata",
    "ResourceLimitError",
    "Sampler",
    "SequentialSampler",
    "ShardByJaxProcess",
    "ShardOptions",
    "SharedMemoryArray",
    "SharedMemoryDataSource",
    "SharedMemoryError",
    "SharedMemoryFullError",
    "StateNotJSONError",
    "Transformation",
    "Transformations",
    "WorkerDiedError",
    "WorkerTimeoutError",
    "checkpoint",
    "config",
    "constants",
    "device_put",
    "experimental",
    "load",
    "multiprocessing",
    "remove_stale_segments",
    "samplers",
    "sharding",
    "sources",
    "transforms",
]
