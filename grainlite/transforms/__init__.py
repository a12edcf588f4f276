"""Transforms and batching: the classes users subclass, ``Batch`` and ``make_batch``."""

from grainlite.transforms.base import (
    Filter,
    FilterTransform,
    FlatMap,
    FlatMapTransform,
    Map,
    MapTransform,
    RandomMap,
    RandomMapTransform,
    Transformation,
    Transformations,
    classify,
)
from grainlite.transforms.batch import Batch, make_batch

__all__ = [
    "Batch",
    "Filter",
    "FilterTransform",
    "FlatMap",
    "FlatMapTransform",
    "Map",
    "MapTransform",
    "RandomMap",
    "RandomMapTransform",
    "Transformation",
    "Transformations",
    "classify",
    "make_batch",
]
