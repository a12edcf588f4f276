"""``grainlite.python.experimental``: the names of :mod:`grainlite.experimental`, for Grain's legacy
path (``grain.python.experimental``). Each name is the same object as in
:mod:`grainlite.experimental`; the Dataset-API names load on first use there and here alike."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grainlite import experimental as _experimental
from grainlite.experimental import FlatMapTransform, MapWithIndexTransform, index_shuffle

if TYPE_CHECKING:
    from grainlite.experimental import (
        BestFitPackIterDataset,
        BOSHandling,
        CacheIterDataset,
        ConcatThenSplitIterDataset,
        DatasetOptions,
        ElasticIterator,
        ExecutionTrackingMode,
        FirstFitPackIterDataset,
        FlatMapIterDataset,
        FlatMapMapDataset,
        InterleaveIterDataset,
        LimitIterDataset,
        PackAndBatchOperation,
        ParquetIterDataset,
        PerformanceConfig,
        RebatchIterDataset,
        RepeatIterDataset,
        RngPool,
        ShapeDtypeStruct,
        ShapeDtypeStructProtocol,
        TFRecordIterDataset,
        ThreadPrefetchDatasetIterator,
        ThreadPrefetchIterDataset,
        WindowShuffleIterDataset,
        WindowShuffleMapDataset,
        WithOptionsIterDataset,
        ZipIterDataset,
        ZipMapDataset,
        apply_transformations,
        assert_equal_output_after_checkpoint,
        batch_and_pad,
        device_put,
        get_element_spec,
        get_next_index,
        multithread_prefetch,
        non_sequence_meta_features,
        pick_performance_config,
        set_next_index,
    )

# The same list as grainlite.experimental.__all__ (test_public_api checks it).
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
    if name in _experimental.LAZY_NAMES:
        return getattr(_experimental, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
