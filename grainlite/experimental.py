"""Names Grain keeps under ``grain.experimental``.

The DataLoader-path names (``FlatMapTransform``, ``MapWithIndexTransform``, ``index_shuffle``) are
imported with the module. The Dataset-API names (``FlatMapMapDataset``, ``FlatMapIterDataset``,
``apply_transformations``) load from their node modules on first use, so ``import grainlite``
imports no dataset node it does not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from grainlite.sampling.index_shuffle import index_shuffle
from grainlite.transforms.base import FlatMapTransform, MapWithIndexTransform

if TYPE_CHECKING:
    from grainlite.dataset.apply import apply_transformations
    from grainlite.dataset.flat_map import FlatMapIterDataset, FlatMapMapDataset

# Name -> the module that defines it; resolved by __getattr__ on first use.
LAZY_NAMES = {
    "FlatMapIterDataset": "grainlite.dataset.flat_map",
    "FlatMapMapDataset": "grainlite.dataset.flat_map",
    "apply_transformations": "grainlite.dataset.apply",
}

__all__ = [
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "FlatMapTransform",
    "MapWithIndexTransform",
    "apply_transformations",
    "index_shuffle",
]


def __getattr__(name: str) -> Any:
    if name in LAZY_NAMES:
        value = getattr(importlib.import_module(LAZY_NAMES[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
