"""Inputs of the interleave tests that worker processes make: kept out of the test module, so a
worker that unpickles them imports only this small module (not the test file and the real
``grain`` it compares with)."""

from __future__ import annotations

import os
from typing import Any


def repeated(library: str, i: int) -> Any:
    """The dataset ``[i] * i`` (the inputs of Grain's own interleave test), built with
    ``library`` ("grain" for the installed Grain, else grainlite)."""
    if library == "grain":
        import grain as lib
    else:
        import grainlite as lib
    return lib.MapDataset.source([i]).repeat(i).to_iter_dataset()


def dataset_of_pid(i: int) -> Any:
    """A one-element dataset holding the id of the process that made it."""
    import grainlite

    return grainlite.MapDataset.source([os.getpid()]).to_iter_dataset()
