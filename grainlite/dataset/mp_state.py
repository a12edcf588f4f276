"""The checkpoint of ``mp_prefetch``: Grain's interleave-shaped dict, written and checked.

Grain's ``mp_prefetch`` iterator interleaves one iterator per worker, so its state is an
interleave's: the worker read next, every worker's own iterator state, which workers are finished,
and two fields that never vary for it (all workers are in use; nothing is buffered ahead)::

    {"next_index_in_cycle": 1, "next_index_in_datasets": 2, "iterators_in_use_indices": [0, 1],
     "iterators_in_use_states": [{"next_index": 4}, {"next_index": 3}], "exhausted": [0, 0],
     "future_states": {}}

Decoding checks every field by hand (a state may come from a file) and names what is wrong.
"""

from __future__ import annotations

from typing import Any

from grainlite.errors import GrainliteValueError
from grainlite.loader.state import IteratorPosition


def encode_state(position: IteratorPosition) -> dict[str, Any]:
    """The state dict of ``position`` (worker states already filled in)."""
    workers = len(position.states)
    return {
        "next_index_in_cycle": position.next_worker,
        "next_index_in_datasets": workers,
        "iterators_in_use_indices": list(range(workers)),
        "iterators_in_use_states": list(position.states),
        "exhausted": [int(flag) for flag in position.exhausted],
        "future_states": {},
    }


def _bad(what: str) -> GrainliteValueError:
    return GrainliteValueError(
        f"Invalid mp_prefetch state: {what}. Pass a dict returned by get_state() of an "
        "mp_prefetch iterator (grainlite's or Grain's) over the same pipeline."
    )


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"{where} must be an int, got {value!r}")
    return value


def decode_state(state: Any, workers: int) -> IteratorPosition:
    """The position ``state`` describes for an iterator with ``workers`` workers."""
    if not isinstance(state, dict) or "iterators_in_use_states" not in state:
        raise _bad(f"expected a dict with 'iterators_in_use_states', got {state!r}")
    states = state["iterators_in_use_states"]
    if not isinstance(states, list):
        raise _bad(f"iterators_in_use_states must be a list, got {states!r}")
    if len(states) != workers:
        raise GrainliteValueError(
            f"The mp_prefetch state holds {len(states)} worker states, this iterator has "
            f"{workers} workers; restore it with MultiprocessingOptions(num_workers="
            f"{len(states)}), the worker count it was saved with."
        )
    flags = state.get("exhausted", [0] * workers)
    if not isinstance(flags, list) or len(flags) != workers:
        raise _bad(f"exhausted must be a list of {workers} flags, got {flags!r}")
    exhausted = [bool(_int(flag, "exhausted")) for flag in flags]
    next_worker = _int(state.get("next_index_in_cycle", 0), "next_index_in_cycle")
    if not 0 <= next_worker < workers:
        raise _bad(f"next_index_in_cycle must be in [0, {workers - 1}], got {next_worker}")
    return IteratorPosition(list(states), next_worker, exhausted)
