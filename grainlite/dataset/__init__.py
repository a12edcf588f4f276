"""Grain's Dataset API on grainlite's engine: :class:`MapDataset`, :class:`IterDataset`,
:class:`DatasetIterator` and their nodes (one module per family)."""

from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset

__all__ = ["DatasetIterator", "IterDataset", "MapDataset"]
