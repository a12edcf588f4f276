"""``import grainlite.python as grain``: the names of ``grainlite``, for Grain's legacy path."""

from typing import Any

import grainlite as _grainlite
from grainlite import *  # noqa: F403  (this module *is* the re-export)
from grainlite import __all__ as __all__
from grainlite import experimental as experimental


def __getattr__(name: str) -> Any:
    return getattr(_grainlite, name)
