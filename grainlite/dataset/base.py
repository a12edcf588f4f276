"""The old path of the Dataset API's base classes: ``grainlite.dataset.base`` still names them.

``MapDataset`` (with ``map_lineage`` and ``first_hole_maker``), ``IterDataset`` and
``DatasetIterator`` live in a module each (:mod:`grainlite.dataset.map_dataset`,
:mod:`~grainlite.dataset.iter_dataset`, :mod:`~grainlite.dataset.dataset_iterator`; what they share
in :mod:`~grainlite.dataset.node_base`). Code and pickles written before that split name them by
this module, so it re-exports them: the same objects. New code imports from their own modules.
"""

from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset, first_hole_maker, map_lineage

__all__ = ["DatasetIterator", "IterDataset", "MapDataset", "first_hole_maker", "map_lineage"]
