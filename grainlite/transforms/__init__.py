"""Transforms and batching: the classes users subclass, and ``Batch``.

This is also Grain's ``grain.transforms``: ``Map``, ``RandomMap``, ``TfRandomMap``, ``Filter``,
``FlatMap``, ``MapWithIndex``, ``Batch``, ``DatasetSelectionMap``, ``Transformation`` and
``Transformations``, each the same object as its ``grain.python`` spelling (``Map is
MapTransform``). The machinery behind them (``transforms.base.classify``,
``transforms.batch.make_batch``) stays in its modules.
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
)
from grainlite.transforms.batch import Batch
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
]
