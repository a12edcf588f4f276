"""Imports of optional dependencies, with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from grainlite.errors import MissingExtraError


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Imports ``module`` or raises MissingExtraError naming the pip extra that provides it.

    Args:
      module: the dotted module name, e.g. ``"orbax.checkpoint"``.
      extra: the grainlite extra that installs it, e.g. ``"orbax"``.
      purpose: what needs it, for the message, e.g. ``"checkpointing with Orbax"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(
            f"{purpose} needs the module {module!r}, which is not installed ({error}); "
            f"install it with: pip install 'grainlite[{extra}]'"
        ) from error
