"""Saving a grainlite iterator with Orbax, beside the model (Grain's ``grain.checkpoint``).

``mngr.save(step, args=grain.checkpoint.CheckpointSave(iterator))`` writes the iterator's state to
``<step>/<item>/process_<i>-of-<n>.json`` (one file per JAX process); ``mngr.restore(step,
args=grain.checkpoint.CheckpointRestore(iterator))`` moves ``iterator`` there and returns it. The
file holds exactly ``iterator.get_state()``; restoring reads it as JSON, never unpickles it.

This package is importable without Orbax: Orbax is imported on first use of ``CheckpointHandler``,
``CheckpointSave`` or ``CheckpointRestore`` (without it, MissingExtraError names the ``orbax``
extra), so ``import grainlite`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grainlite.checkpoint.orbax import CheckpointHandler, CheckpointRestore, CheckpointSave

__all__ = ["CheckpointHandler", "CheckpointRestore", "CheckpointSave"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("grainlite.checkpoint.orbax"), name)
    raise AttributeError(f"module 'grainlite.checkpoint' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
