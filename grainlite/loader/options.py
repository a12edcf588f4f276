"""Shim for in-flight branches; remove after merge: the options live in :mod:`grainlite.options`."""

from grainlite.options import MultiprocessingOptions, ReadOptions

__all__ = ["MultiprocessingOptions", "ReadOptions"]
