"""Names Grain keeps under ``grain.experimental``.

The DataLoader-path names (``FlatMapTransform``, ``MapWithIndexTransform``, ``index_shuffle``) are
imported with the module. The Dataset-API names (``FlatMapMapDataset``, ``FlatMapIterDataset``,
``apply_transformations``) load from their node modules on first use, so ``import grainlite``
imports no dataset node it does not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from grainlite.sampling.index_shuffle import index_shuffle
from grainlite.transforms.base import FlatMapTransform, MapWithIndexTransform

if TYPE_CHECKING:
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
    from grainlite.transforms.pack_and_batch import PackAndBatchOperation
    from grainlite.transforms.packing.layout import non_sequence_meta_features

# Name -> the module that defines it; resolved by __getattr__ on first use.
LAZY_NAMES = {
    "CacheIterDataset": "grainlite.dataset.experimental.cache",
    "DatasetOptions": "grainlite.dataset.options",
    "ExecutionTrackingMode": "grainlite.dataset.options",
    "WithOptionsIterDataset": "grainlite.dataset.options",
    "assert_equal_output_after_checkpoint": "grainlite.dataset.experimental.checkpoint_check",
    "get_next_index": "grainlite.dataset.next_index",
    "set_next_index": "grainlite.dataset.next_index",
    "multithread_prefetch": "grainlite.dataset.experimental.thread_prefetch",
    "get_element_spec": "grainlite.dataset.element_spec",
    "PerformanceConfig": "grainlite.dataset.performance_config",
    "pick_performance_config": "grainlite.dataset.performance_config",
    "RngPool": "grainlite.dataset.seed",
    "ShapeDtypeStruct": "grainlite.dataset.element_spec",
    "ShapeDtypeStructProtocol": "grainlite.dataset.element_spec",
    "BOSHandling": "grainlite.dataset.experimental.concat_then_split",
    "BestFitPackIterDataset": "grainlite.dataset.experimental.packing",
    "ConcatThenSplitIterDataset": "grainlite.dataset.experimental.concat_then_split",
    "FirstFitPackIterDataset": "grainlite.dataset.experimental.packing",
    "PackAndBatchOperation": "grainlite.transforms.pack_and_batch",
    "FlatMapIterDataset": "grainlite.dataset.flat_map",
    "FlatMapMapDataset": "grainlite.dataset.flat_map",
    "apply_transformations": "grainlite.dataset.apply",
    "device_put": "grainlite.device.dataset",
    "ElasticIterator": "grainlite.dataset.experimental.elastic_iterator",
    "InterleaveIterDataset": "grainlite.dataset.experimental.interleave",
    "LimitIterDataset": "grainlite.dataset.experimental.limit",
    "ParquetIterDataset": "grainlite.dataset.experimental.parquet",
    "RebatchIterDataset": "grainlite.dataset.experimental.rebatch",
    "RepeatIterDataset": "grainlite.dataset.repeat",
    "TFRecordIterDataset": "grainlite.dataset.experimental.tfrecord",
    "ThreadPrefetchDatasetIterator": "grainlite.dataset.experimental.thread_prefetch",
    "ThreadPrefetchIterDataset": "grainlite.dataset.experimental.thread_prefetch",
    "WindowShuffleIterDataset": "grainlite.dataset.experimental.window_shuffle",
    "WindowShuffleMapDataset": "grainlite.dataset.experimental.window_shuffle",
    "ZipIterDataset": "grainlite.dataset.experimental.zip",
    "ZipMapDataset": "grainlite.dataset.experimental.zip",
    "batch_and_pad": "grainlite.dataset.experimental.rebatch",
    "non_sequence_meta_features": "grainlite.transforms.packing.layout",
}

__all__ = [
    "BOSHandling",
    "BestFitPackIterDataset",
    "CacheIterDataset",
    "ConcatThenSplitIterDataset",
    "DatasetOptions",
    "ElasticIterator",
    "ExecutionTrackingMode",
    "FirstFitPackIterDataset",
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "FlatMapTransform",
    "InterleaveIterDataset",
    "LimitIterDataset",
    "MapWithIndexTransform",
    "PackAndBatchOperation",
    "ParquetIterDataset",
    "PerformanceConfig",
    "RebatchIterDataset",
    "RepeatIterDataset",
    "RngPool",
    "ShapeDtypeStruct",
    "ShapeDtypeStructProtocol",
    "TFRecordIterDataset",
    "ThreadPrefetchDatasetIterator",
    "ThreadPrefetchIterDataset",
    "WindowShuffleIterDataset",
    "WindowShuffleMapDataset",
    "WithOptionsIterDataset",
    "ZipIterDataset",
    "ZipMapDataset",
    "apply_transformations",
    "assert_equal_output_after_checkpoint",
    "batch_and_pad",
    "device_put",
    "get_element_spec",
    "get_next_index",
    "index_shuffle",
    "multithread_prefetch",
    "non_sequence_meta_features",
    "pick_performance_config",
    "set_next_index",
]


def __getattr__(name: str) -> Any:
    if name in LAZY_NAMES:
        value = getattr(importlib.import_module(LAZY_NAMES[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
