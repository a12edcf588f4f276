"""A transform that sleeps a fixed time per record, for the span and timeline tests. It lives
here, not in a test module, because worker interpreters import it by name (and a test module
that imports JAX would import JAX in every worker)."""

from __future__ import annotations

import time
from typing import Any

import grainlite as grain


class Sleep(grain.MapTransform):
    """Sleeps ``seconds`` (20 ms by default) per record, then returns it unchanged."""

    def __init__(self, seconds: float = 0.02) -> None:
        self.seconds = seconds

    def map(self, record: Any) -> Any:
        time.sleep(self.seconds)
        return record
