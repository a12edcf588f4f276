"""Names Grain keeps under ``grain.experimental``, and grainlite's own experimental names (the
streaming order: ``StreamingSampler``, ``StreamingShuffleMapDataset``).

Every name loads its module on first use (``_NAMES``, the one table of this namespace), so
``import grainlite`` imports no dataset node it does not need.
"""

# The TYPE_CHECKING imports below are for type checkers only; __all__ is built from _NAMES.
# ruff: noqa: F401

from __future__ import annotations

# Underscored, so that a star import (type checkers read no __all__ here) takes only the names.
import importlib as _importlib
import typing as _typing
from typing import Any as _Any

if _typing.TYPE_CHECKING:
    from grainlite.dataset.apply import apply_transformations
    from grainlite.dataset.element_spec import (
        ShapeDtypeStruct,
        ShapeDtypeStructProtocol,
        get_element_spec,
    )
    from grainlite.dataset.experimental.cache import CacheIterDataset
    from grainlite.dataset.experimental.checkpoint_check import assert_equal_output_after_checkpoint
    from grainlite.dataset.experimental.concat_then_split import (
        BOSHandling,
        ConcatThenSplitIterDataset,
    )
    from grainlite.dataset.experimental.elastic_iterator import ElasticIterator
    from grainlite.dataset.experimental.interleave import InterleaveIterDataset
    from grainlite.dataset.experimental.limit import LimitIterDataset
    from grainlite.dataset.experimental.packing import (
        BestFitPackIterDataset,
        FirstFitPackIterDataset,
    )
    from grainlite.dataset.experimental.parquet import ParquetIterDataset
    from grainlite.dataset.experimental.rebatch import RebatchIterDataset, batch_and_pad
    from grainlite.dataset.experimental.streaming_shuffle import StreamingShuffleMapDataset
    from grainlite.dataset.experimental.tfrecord import TFRecordIterDataset
    from grainlite.dataset.experimental.thread_prefetch import (
        ThreadPrefetchDatasetIterator,
        ThreadPrefetchIterDataset,
        multithread_prefetch,
    )
    from grainlite.dataset.experimental.window_shuffle import (
        WindowShuffleIterDataset,
        WindowShuffleMapDataset,
    )
    from grainlite.dataset.experimental.zip import ZipIterDataset, ZipMapDataset
    from grainlite.dataset.flat_map import FlatMapIterDataset, FlatMapMapDataset
    from grainlite.dataset.next_index import get_next_index, set_next_index
    from grainlite.dataset.options import (
        DatasetOptions,
        ExecutionTrackingMode,
        WithOptionsIterDataset,
    )
    from grainlite.dataset.performance_config import PerformanceConfig, pick_performance_config
    from grainlite.dataset.repeat import RepeatIterDataset
    from grainlite.dataset.seed import RngPool
    from grainlite.device.dataset import device_put
    from grainlite.sampling.index_shuffle import index_shuffle
    from grainlite.sampling.streaming_sampler import StreamingSampler
    from grainlite.transforms.base import FlatMapTransform, MapWithIndexTransform
    from grainlite.transforms.pack_and_batch import PackAndBatchOperation
    from grainlite.transforms.packing.layout import non_sequence_meta_features

# The one table of this namespace: name -> the module that defines it. __all__ and __getattr__
# come from it; the TYPE_CHECKING imports above say the same for type checkers (test_public_api
# checks that they do).
_NAMES = {
    "apply_transformations": "grainlite.dataset.apply",
    "ShapeDtypeStruct": "grainlite.dataset.element_spec",
    "ShapeDtypeStructProtocol": "grainlite.dataset.element_spec",
    "get_element_spec": "grainlite.dataset.element_spec",
    "CacheIterDataset": "grainlite.dataset.experimental.cache",
    "assert_equal_output_after_checkpoint": "grainlite.dataset.experimental.checkpoint_check",
    "BOSHandling": "grainlite.dataset.experimental.concat_then_split",
    "ConcatThenSplitIterDataset": "grainlite.dataset.experimental.concat_then_split",
    "ElasticIterator": "grainlite.dataset.experimental.elastic_iterator",
    "InterleaveIterDataset": "grainlite.dataset.experimental.interleave",
    "BestFitPackIterDataset": "grainlite.dataset.experimental.packing",
    "FirstFitPackIterDataset": "grainlite.dataset.experimental.packing",
    "ParquetIterDataset": "grainlite.dataset.experimental.parquet",
    "RebatchIterDataset": "grainlite.dataset.experimental.rebatch",
    "batch_and_pad": "grainlite.dataset.experimental.rebatch",
    "LimitIterDataset": "grainlite.dataset.experimental.limit",
    "RepeatIterDataset": "grainlite.dataset.repeat",
    "StreamingShuffleMapDataset": "grainlite.dataset.experimental.streaming_shuffle",
    "TFRecordIterDataset": "grainlite.dataset.experimental.tfrecord",
    "ThreadPrefetchDatasetIterator": "grainlite.dataset.experimental.thread_prefetch",
    "ThreadPrefetchIterDataset": "grainlite.dataset.experimental.thread_prefetch",
    "multithread_prefetch": "grainlite.dataset.experimental.thread_prefetch",
    "WindowShuffleIterDataset": "grainlite.dataset.experimental.window_shuffle",
    "WindowShuffleMapDataset": "grainlite.dataset.experimental.window_shuffle",
    "ZipIterDataset": "grainlite.dataset.experimental.zip",
    "ZipMapDataset": "grainlite.dataset.experimental.zip",
    "FlatMapIterDataset": "grainlite.dataset.flat_map",
    "FlatMapMapDataset": "grainlite.dataset.flat_map",
    "get_next_index": "grainlite.dataset.next_index",
    "set_next_index": "grainlite.dataset.next_index",
    "DatasetOptions": "grainlite.dataset.options",
    "ExecutionTrackingMode": "grainlite.dataset.options",
    "WithOptionsIterDataset": "grainlite.dataset.options",
    "PerformanceConfig": "grainlite.dataset.performance_config",
    "pick_performance_config": "grainlite.dataset.performance_config",
    "RngPool": "grainlite.dataset.seed",
    "device_put": "grainlite.device.dataset",
    "index_shuffle": "grainlite.sampling.index_shuffle",
    "StreamingSampler": "grainlite.sampling.streaming_sampler",
    "FlatMapTransform": "grainlite.transforms.base",
    "MapWithIndexTransform": "grainlite.transforms.base",
    "PackAndBatchOperation": "grainlite.transforms.pack_and_batch",
    "non_sequence_meta_features": "grainlite.transforms.packing.layout",
}


def __getattr__(name: str) -> _Any:
    if name in _NAMES:
        value = getattr(_importlib.import_module(_NAMES[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))


if not _typing.TYPE_CHECKING:  # type checkers take the names the TYPE_CHECKING imports give
    # CONSTANTS, then Classes, then the rest, each alphabetical (ruff's RUF022 order).
    __all__ = sorted(_NAMES, key=lambda name: (not name.isupper(), not name[:1].isupper(), name))
