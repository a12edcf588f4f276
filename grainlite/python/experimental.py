"""``grainlite.python.experimental``: the names of :mod:`grainlite.experimental`, for Grain's legacy
path (``grain.python.experimental``)."""

from grainlite.experimental import *  # noqa: F403  (this module *is* the re-export)
from grainlite.experimental import __all__ as __all__
