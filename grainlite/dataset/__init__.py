"""Grain's Dataset API on grainlite's engine: :class:`MapDataset`, :class:`IterDataset`,
:class:`DatasetIterator` and their nodes (one module per family)."""

from grainlite.dataset.base import DatasetIterator, IterDataset, MapDataset

__all__ = ["DatasetIterator", "IterDataset", "MapDataset"]
