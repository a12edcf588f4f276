"""Shim for in-flight branches; remove after merge: see grainlite.transforms.packing.layout."""

from grainlite.transforms.packing.layout import PackSpec, Round, assemble_columns, assemble_rows

__all__ = ["PackSpec", "Round", "assemble_columns", "assemble_rows"]
