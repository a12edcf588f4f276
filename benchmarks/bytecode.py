"""Byte-compiles the code a measurement imports, as installing a package does.

``pip install`` writes each module's ``.pyc``; an editable install leaves that to the first
import, and a machine with ``PYTHONDONTWRITEBYTECODE`` set never writes them. Every measured
process (and every worker it starts) would then compile grainlite from source on import, about
45 ms more per process on the reference machine, a cost no installed copy pays and the peer
(``grain``, compiled at install) does not pay either. The runners call :func:`compile_tree` once
before measuring.
"""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGES = ("grainlite", "benchmarks")


def compile_tree(root: Path) -> None:
    """Writes the ``.pyc`` files of the packages under ``root`` (up-to-date ones are kept)."""
    for package in PACKAGES:
        folder = root / package
        if folder.is_dir() and not compileall.compile_dir(folder, quiet=1):
            raise RuntimeError(
                f"byte-compiling {folder} failed; run `python -m compileall {folder}` to see why"
            )
