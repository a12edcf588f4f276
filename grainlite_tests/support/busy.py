"""A transform that keeps a worker busy far longer than any test, for tests of close() and Ctrl-C.
It lives here, not in a test module, because child interpreters import it by name."""

from __future__ import annotations

import os
import time
from pathlib import Path

import grainlite as grain


class BusyFor(grain.MapTransform):
    """Marks that it started (a file per worker), then stays busy far longer than any test."""

    def __init__(self, marks: str) -> None:
        self.marks = marks

    def map(self, x):
        Path(self.marks, str(os.getpid())).touch()
        time.sleep(60)
        return x
