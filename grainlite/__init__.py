"""grainlite: a fast, leak-free data loader for JAX with Google Grain's DataLoader and Dataset APIs.

``import grainlite as grain`` (or ``import grainlite.python as grain``) gives the names of Grain's
``grain`` and ``grain.python`` namespaces for the DataLoader path and the Dataset API
(``MapDataset``, ``IterDataset``, ``DatasetIterator``), with Grain's submodules
(``grain.samplers``, ``grain.sharding``, ``grain.sources``, ``grain.transforms``,
``grain.checkpoint``, ``grain.constants``, ``grain.config``, ``grain.experimental``,
``grain.multiprocessing``);
docs/grain_names.md lists every Grain name and its status here. ``grainlite.install_as_grain()``
(or ``GRAINLITE_AS_GRAIN=1``, read below at import) makes ``import grain`` give grainlite, for
library code that imports ``grain`` itself (grainlite/as_grain.py).

Every name loads its module on first use, so ``import grainlite`` itself imports almost nothing:
a worker process (which imports the package too) starts faster and smaller, and a script pays
only for the parts it touches. Orbax, JAX, TFDS, array_record, OpenCV and matplotlib load where
they are used.
"""

# The TYPE_CHECKING imports below are for type checkers only; __all__ is built from _NAMES.
# ruff: noqa: F401

from __future__ import annotations

# Underscored, so that a star import (type checkers read no __all__ here) takes only the names.
import importlib as _importlib
import os as _os
import typing as _typing
from typing import Any as _Any

if _typing.TYPE_CHECKING:
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
    from grainlite.as_grain import install_as_grain
    from grainlite.checkpoint import CheckpointHandler as GrainCheckpointHandler
    from grainlite.checkpoint import CheckpointHandler as PyGrainCheckpointHandler
    from grainlite.checkpoint import CheckpointRestore as GrainCheckpointRestore
    from grainlite.checkpoint import CheckpointRestore as PyGrainCheckpointRestore
    from grainlite.checkpoint import CheckpointSave as GrainCheckpointSave
    from grainlite.checkpoint import CheckpointSave as PyGrainCheckpointSave
    from grainlite.constants import (
        DATASET_INDEX,
        EPOCH,
        INDEX,
        META_FEATURES,
        RECORD,
        RECORD_KEY,
        SEED,
    )
    from grainlite.dataset.dataset_iterator import DatasetIterator
    from grainlite.dataset.iter_dataset import IterDataset
    from grainlite.dataset.map_dataset import MapDataset
    from grainlite.device import device_put
    from grainlite.errors import (
        CheckpointMismatchError,
        ClusterConnectionError,
        CorruptedDataError,
        ElementSpecNotKnownError,
        GrainliteError,
        GrainliteRuntimeError,
        GrainliteTypeError,
        GrainliteValueError,
        InterleaveArgumentError,
        LoaderClosedError,
        MissingExtraError,
        MissingFanOutError,
        MissingOutputSpecError,
        NegativeRngIndexError,
        NoNextIndexError,
        NotSequentialSliceError,
        RangeArgumentError,
        RecordKeyOutOfRangeError,
        RemoteAccessDeniedError,
        RemoteObjectNotFoundError,
        RemoteReadError,
        ResourceLimitError,
        SelectionIndexError,
        SharedMemoryError,
        SharedMemoryFullError,
        StateNotJSONError,
        StateOutOfRangeError,
        UnknownLengthError,
        UnsupportedTransformationError,
        WorkerDiedError,
        WorkerTimeoutError,
    )
    from grainlite.loader.data_loader import DataLoader, DataLoaderIterator
    from grainlite.loader.data_loader import DataLoaderIterator as PyGrainDatasetIterator
    from grainlite.loading import load
    from grainlite.options import MultiprocessingOptions, ReadOptions
    from grainlite.sampling.index_sampler import IndexSampler
    from grainlite.sampling.records import Record, RecordMetadata
    from grainlite.sampling.samplers import Sampler
    from grainlite.sampling.sequential_sampler import SequentialSampler
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

# The one table of the public names: name -> "module" (the same name there), "module:attribute",
# or _MODULE (Grain's submodule grainlite.<name>). __all__ and __getattr__ come from it; the
# TYPE_CHECKING imports above say the same for type checkers (test_public_api checks that they do).
# Every name loads on first use: the checkpoint names load Orbax then, device_put JAX when called.
_MODULE = ""
_NAMES = {
    "install_as_grain": "grainlite.as_grain",
    "GrainCheckpointHandler": "grainlite.checkpoint:CheckpointHandler",
    "GrainCheckpointRestore": "grainlite.checkpoint:CheckpointRestore",
    "GrainCheckpointSave": "grainlite.checkpoint:CheckpointSave",
    "PyGrainCheckpointHandler": "grainlite.checkpoint:CheckpointHandler",
    "PyGrainCheckpointRestore": "grainlite.checkpoint:CheckpointRestore",
    "PyGrainCheckpointSave": "grainlite.checkpoint:CheckpointSave",
    "DATASET_INDEX": "grainlite.constants",
    "EPOCH": "grainlite.constants",
    "INDEX": "grainlite.constants",
    "META_FEATURES": "grainlite.constants",
    "RECORD": "grainlite.constants",
    "RECORD_KEY": "grainlite.constants",
    "SEED": "grainlite.constants",
    "DatasetIterator": "grainlite.dataset.dataset_iterator",
    "IterDataset": "grainlite.dataset.iter_dataset",
    "MapDataset": "grainlite.dataset.map_dataset",
    "device_put": "grainlite.device",
    "CheckpointMismatchError": "grainlite.errors",
    "ClusterConnectionError": "grainlite.errors",
    "CorruptedDataError": "grainlite.errors",
    "ElementSpecNotKnownError": "grainlite.errors",
    "GrainliteError": "grainlite.errors",
    "GrainliteRuntimeError": "grainlite.errors",
    "GrainliteTypeError": "grainlite.errors",
    "GrainliteValueError": "grainlite.errors",
    "InterleaveArgumentError": "grainlite.errors",
    "LoaderClosedError": "grainlite.errors",
    "MissingExtraError": "grainlite.errors",
    "MissingFanOutError": "grainlite.errors",
    "MissingOutputSpecError": "grainlite.errors",
    "NegativeRngIndexError": "grainlite.errors",
    "NoNextIndexError": "grainlite.errors",
    "NotSequentialSliceError": "grainlite.errors",
    "RangeArgumentError": "grainlite.errors",
    "RecordKeyOutOfRangeError": "grainlite.errors",
    "RemoteAccessDeniedError": "grainlite.errors",
    "RemoteObjectNotFoundError": "grainlite.errors",
    "RemoteReadError": "grainlite.errors",
    "ResourceLimitError": "grainlite.errors",
    "SelectionIndexError": "grainlite.errors",
    "SharedMemoryError": "grainlite.errors",
    "SharedMemoryFullError": "grainlite.errors",
    "StateNotJSONError": "grainlite.errors",
    "StateOutOfRangeError": "grainlite.errors",
    "UnknownLengthError": "grainlite.errors",
    "UnsupportedTransformationError": "grainlite.errors",
    "WorkerDiedError": "grainlite.errors",
    "WorkerTimeoutError": "grainlite.errors",
    "DataLoader": "grainlite.loader.data_loader",
    "DataLoaderIterator": "grainlite.loader.data_loader",
    "PyGrainDatasetIterator": "grainlite.loader.data_loader:DataLoaderIterator",
    "load": "grainlite.loading",
    "MultiprocessingOptions": "grainlite.options",
    "ReadOptions": "grainlite.options",
    "Record": "grainlite.sampling.records",
    "RecordMetadata": "grainlite.sampling.records",
    "IndexSampler": "grainlite.sampling.index_sampler",
    "Sampler": "grainlite.sampling.samplers",
    "SequentialSampler": "grainlite.sampling.sequential_sampler",
    "NoSharding": "grainlite.sampling.sharding",
    "ShardByJaxProcess": "grainlite.sampling.sharding",
    "ShardOptions": "grainlite.sampling.sharding",
    "remove_stale_segments": "grainlite.shm",
    "SharedMemoryArray": "grainlite.shm.array",
    "ArrayRecordDataSource": "grainlite.sources.array_record",
    "InMemoryDataSource": "grainlite.sources.in_memory",
    "SharedMemoryDataSource": "grainlite.sources.in_memory",
    "RandomAccessDataSource": "grainlite.sources.protocol",
    "RangeDataSource": "grainlite.sources.range",
    "FilterTransform": "grainlite.transforms.base",
    "FlatMapTransform": "grainlite.transforms.base",
    "MapTransform": "grainlite.transforms.base",
    "MapWithIndexTransform": "grainlite.transforms.base",
    "RandomMapTransform": "grainlite.transforms.base",
    "Transformation": "grainlite.transforms.base",
    "Transformations": "grainlite.transforms.base",
    "Batch": "grainlite.transforms.batch",
    "BatchOperation": "grainlite.transforms.legacy",
    "FilterOperation": "grainlite.transforms.legacy",
    "MapOperation": "grainlite.transforms.legacy",
    "Operation": "grainlite.transforms.legacy",
    "RandomMapOperation": "grainlite.transforms.legacy",
    "DatasetSelectionMap": "grainlite.transforms.selection",
    # Grain's submodules, at the same names.
    "checkpoint": _MODULE,
    "config": _MODULE,
    "constants": _MODULE,
    "experimental": _MODULE,
    "multiprocessing": _MODULE,
    "samplers": _MODULE,
    "sharding": _MODULE,
    "sources": _MODULE,
    "transforms": _MODULE,
}


def __getattr__(name: str) -> _Any:
    where = _NAMES.get(name)
    if where is None:
        raise AttributeError(f"module 'grainlite' has no attribute {name!r}")
    module, _, attribute = where.partition(":")
    value: _Any = _importlib.import_module(f"grainlite.{name}" if where == _MODULE else module)
    if where != _MODULE:
        value = getattr(value, attribute or name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))


if not _typing.TYPE_CHECKING:  # type checkers take the names the TYPE_CHECKING imports give
    # CONSTANTS, then Classes, then the rest, each alphabetical (ruff's RUF022 order).
    __all__ = sorted(_NAMES, key=lambda name: (not name.isupper(), not name[:1].isupper(), name))

# GRAINLITE_AS_GRAIN=1: `import grain` gives grainlite in this process (grainlite/as_grain.py).
# install_as_grain() sets it too, so grainlite's worker processes do the same when they start.
if _os.environ.get("GRAINLITE_AS_GRAIN", "") not in ("", "0"):
    _importlib.import_module("grainlite.as_grain").install_from_environment()
