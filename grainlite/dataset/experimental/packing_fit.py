"""Shim for in-flight branches; remove after merge: see grainlite.transforms.packing.fit."""

from grainlite.transforms.packing.fit import Parent, fill_round

__all__ = ["Parent", "fill_round"]
