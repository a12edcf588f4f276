"""``import grainlite.python as grain``: every name of ``grainlite``, for Grain's legacy path.

Grain's ``grain.python`` holds the DataLoader names (with the legacy ``*Transform`` spellings and
the constants); grainlite's top level already has all of them, so this module re-exports it whole:
each name is the same object as ``grainlite.<name>``. ``grainlite.python.experimental`` mirrors
``grain.python.experimental``.
"""

import importlib
from typing import Any

import grainlite as _grainlite
from grainlite import *  # noqa: F403  (this module *is* the re-export)
from grainlite import __all__ as __all__

# Always the submodule grainlite.python.experimental (which re-exports grainlite.experimental's
# names), whatever was imported first: a plain ``from grainlite.python import experimental``
# would find grainlite.experimental, bound by the line above, and stop there.
experimental = importlib.import_module("grainlite.python.experimental")


def __getattr__(name: str) -> Any:
    return getattr(_grainlite, name)
