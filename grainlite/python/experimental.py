"""``grainlite.python.experimental``: the names of :mod:`grainlite.experimental`, for Grain's legacy
path (``grain.python.experimental``). Each name is the same object as in
:mod:`grainlite.experimental`, and loads on first use there and here alike; ``__all__`` is
:mod:`grainlite.experimental`'s own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grainlite import experimental as _experimental

if TYPE_CHECKING:
    from grainlite.experimental import *  # noqa: F403  (this module *is* the re-export)
else:
    __all__ = _experimental.__all__


def __getattr__(name: str) -> Any:
    if name in _experimental.__all__:
        return getattr(_experimental, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_experimental.__all__))
