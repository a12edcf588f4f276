"""Names Grain keeps under ``grain.experimental``."""

from grainlite.sampling.index_shuffle import index_shuffle
from grainlite.transforms.base import FlatMapTransform, MapWithIndexTransform

__all__ = ["FlatMapTransform", "MapWithIndexTransform", "index_shuffle"]
