"""Names Grain keeps under ``grain.experimental``."""

from grainlite.transforms.base import FlatMapTransform

__all__ = ["FlatMapTransform"]
