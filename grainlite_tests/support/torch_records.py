"""Small records and a filter for the grainlite.torch tests, in a module that imports no torch.

Worker processes unpickle the tests' transforms by importing the module that defines them; kept
here, that import costs milliseconds instead of the seconds torch (and the Grain reference) take.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import grainlite as grain


def records(n: int) -> list[dict[str, Any]]:
    """``n`` records ``{"id": int64 i, "x": float32[2] filled with i}``."""
    return [{"id": np.int64(i), "x": np.full(2, i, np.float32)} for i in range(n)]


class KeepEven(grain.FilterTransform):
    """Keeps the records with an even id."""

    def filter(self, element: dict[str, Any]) -> bool:
        return int(element["id"]) % 2 == 0
