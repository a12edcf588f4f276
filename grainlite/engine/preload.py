"""Imports, in the training process, what a worker stream needs: done when a loader is built, so
that iterating it imports nothing.

Why: CPython ends each import by dropping the module's import lock, whose weakref callback is
Python code. A Ctrl-C that arrives just then is raised inside that callback, printed as
"Exception ignored in: <function _get_module_lock.<locals>.cb>" and dropped: the training loop
reads on. The engine is imported lazily (``import grainlite`` stays light), so without this its
first ``iter()`` imported about 25 modules, inside the window where a user presses Ctrl-C.
"""

from __future__ import annotations

import contextlib


def preload() -> None:
    """Imports the parent's side of the engine, what it pickles a pipeline with, and CPython's
    shared-memory module."""
    import uuid  # noqa: F401 (each import is for its effect)

    import grainlite.engine.code_source
    import grainlite.engine.parent
    import grainlite.engine.pickling  # noqa: F401

    with contextlib.suppress(ImportError):  # pickles the user's __main__ classes by value
        import cloudpickle  # noqa: F401
    with contextlib.suppress(ImportError):  # the platform's error is raised where segments are made
        import _posixshmem  # noqa: F401
