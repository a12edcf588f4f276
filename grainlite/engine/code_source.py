"""Source lines that travel with code: a notebook cell's transform, shown in a worker's traceback.

Python reads a traceback's source lines from the file a code object names. Code typed in a
notebook (or built with ``exec``) names a file that does not exist; the interpreter that ran
it keeps the lines in :mod:`linecache`, as IPython does for every cell. The parent sends those
lines with such code (:mod:`grainlite.engine.pickling`), and :func:`code_with_source` puts them in
the worker's ``linecache`` before building the code, so the worker's traceback shows them too.
Kept apart from :mod:`~grainlite.engine.pickling` so that loading it imports nothing heavy.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any


def code_with_source(
    constructor: Callable[..., Any], args: tuple[Any, ...], file_name: str, lines: list[str]
) -> Any:
    """Registers ``lines`` as the source of ``file_name`` (unless known), then builds the code."""
    if file_name not in linecache.cache:
        # No modification time: linecache.checkcache() keeps the entry, as for IPython's cells.
        linecache.cache[file_name] = (sum(map(len, lines)), None, lines, file_name)
    return constructor(*args)
