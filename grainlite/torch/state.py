"""The TorchDataLoader's ``state_dict``: a plain JSON-able dict, safe for ``weights_only`` loads.

Lightning saves a loader's ``state_dict()`` inside its checkpoint and reads checkpoints back with
``torch.load(weights_only=True)``, which accepts only plain containers, strings and numbers. The
dict is therefore made of ``int``, ``str`` and ``list`` only::

    {"format": "grainlite.torch/1",
     "epoch": 3, "batch": 17,            # the next batch is batch 17 of epoch 3
     "world_size": 2, "worker_count": 2,
     "ranks": ["{...Grain v2 JSON...}", "{...}"]}   # every rank's iterator state

Lightning writes rank 0's dict only, so it holds every rank's Grain state: computed from
``(epoch, batch)`` when batch counts do not depend on the data, gathered from the ranks when they
do (Filter, FlatMap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grainlite.checks import invalid_state, state_int
from grainlite.errors import GrainliteValueError, shown

FORMAT = "grainlite.torch/1"
_FIELDS = ("format", "epoch", "batch", "world_size", "worker_count", "ranks")


@dataclass(frozen=True)
class LoaderState:
    """Where a TorchDataLoader stands, as saved: see the module docstring for the fields."""

    epoch: int
    batch: int
    world_size: int
    worker_count: int
    ranks: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The plain dict ``state_dict()`` returns."""
        return {
            "format": FORMAT,
            "epoch": self.epoch,
            "batch": self.batch,
            "world_size": self.world_size,
            "worker_count": self.worker_count,
            "ranks": list(self.ranks),
        }


def _bad(what: str) -> GrainliteValueError:
    return invalid_state(
        what,
        "Pass the dict returned by state_dict() of a TorchDataLoader (as saved in a Lightning "
        "checkpoint under 'loops').",
        subject="TorchDataLoader.load_state_dict",
    )


def _non_negative(document: dict[str, Any], field: str) -> int:
    return state_int(document[field], repr(field), _bad, low=0)


def from_dict(document: Any) -> LoaderState:
    """Checks a saved dict field by field; raises GrainliteValueError naming what is wrong."""
    if not isinstance(document, dict):
        raise _bad(f"expected a dict, got {type(document).__name__}")
    missing = [field for field in _FIELDS if field not in document]
    if missing:
        raise _bad(f"the fields {missing} are missing")
    if document["format"] != FORMAT:
        raise _bad(f"format {shown(document['format'])} is not {FORMAT!r}")
    epoch, batch = _non_negative(document, "epoch"), _non_negative(document, "batch")
    world_size = _non_negative(document, "world_size")
    worker_count = _non_negative(document, "worker_count")
    ranks = document["ranks"]
    if (
        not isinstance(ranks, list)
        or len(ranks) != world_size
        or not all(isinstance(r, str) for r in ranks)
    ):
        raise _bad(f"'ranks' must be a list of {world_size} JSON strings, got {shown(ranks)}")
    return LoaderState(epoch, batch, world_size, worker_count, tuple(ranks))
