"""Transforms and batching: the classes users subclass, ``Batch`` and ``make_batch``.

This is also Grain's ``grain.transforms``: ``Map``, ``RandomMap``, ``TfRandomMap``, ``Filter``,
``FlatMap``, ``MapWithIndex``, ``Batch``, ``DatasetSelectionMap``, ``Transformation`` and
``Transformations``, each the same object as its ``grain.python`` spelling (``Map is
MapTransform``).
"""

from grainlite.transforms.base import (
    Filter,
    FilterTransform,
    FlatMap,
    FlatMapTransform,
    Map,
    MapTransform,
    MapWithIndex,
    MapWithIndexTransform,
    RandomMap,
    RandomMapTransform,
    TfRandomMap,
    Transformation,
    Transformations,
    classify,
)
from grainlite.transforms.batch import Batch, make_batch
from grainlite.transforms.selection import DatasetSelectionMap

__all__ = [
    "Batch",
    "DatasetSelectionMap",
    "Filter",
    "FilterTransform",
    "FlatMap",
    "FlatMapTransform",
    "Map",
    "MapTransform",
    "MapWithIndex",
    "MapWithIndexTransform",
    "RandomMap",
    "RandomMapTransform",
    "TfRandomMap",
    "Transformation",
    "Transformations",
    "classify",
    "make_batch",
]
