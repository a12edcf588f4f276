"""The checkpoint of ``mp_prefetch``: Grain's interleave-shaped dict, written and checked.

Grain's ``mp_prefetch`` iterator interleaves one iterator per worker, so its state is an
interleave's: the worker read next, every worker's own iterator state, which workers are finished,
and two fields that never vary for it (all workers are in use; nothing is buffered ahead)::

    {"next_index_in_cycle": 1, "next_index_in_datasets": 2, "iterators_in_use_indices": [0, 1],
     "iterators_in_use_states": [{"next_index": 4}, {"next_index": 3}], "exhausted": [0, 0],
     "future_states": {}}

The shape is the engine's one interleave codec (:mod:`grainlite.engine.position`, shared with the
DataLoader's state). Each worker's entry is checked against the state that worker's iterator has
before its first element: the same kind of value (a dict with at least the same keys, a list, an
int, a string), recursively through dicts, so a damaged entry is a ValueError naming the field
here, not a KeyError or TypeError in a worker, and never a silent restart of that worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grainlite.checks import invalid_state
from grainlite.engine.position import IteratorPosition, decode_interleave, encode_interleave
from grainlite.errors import GrainliteValueError, shown


def encode_state(position: IteratorPosition) -> dict[str, Any]:
    """The state dict of ``position`` (worker states already filled in)."""
    return encode_interleave(position)


def _bad(what: str) -> GrainliteValueError:
    return invalid_state(
        what,
        "Pass a dict returned by get_state() of an mp_prefetch iterator (grainlite's or "
        "Grain's) over the same pipeline.",
        subject="Invalid mp_prefetch state",
    )


def _other_count(states: Any, workers: int) -> GrainliteValueError:
    if not isinstance(states, list):
        return _bad(f"iterators_in_use_states must be a list, got {shown(states)}")
    return GrainliteValueError(
        f"The mp_prefetch state holds {len(states)} worker states, this iterator has "
        f"{workers} workers; restore it with MultiprocessingOptions(num_workers="
        f"{len(states)}), the worker count it was saved with."
    )


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a dict"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int):
        return "an int"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def check_like(expected: Any, got: Any, where: str) -> None:
    """Raises the ``mp_prefetch`` state error if ``got`` is not the same kind of value as
    ``expected`` (an iterator's state before its first element), naming the field ``where``.

    Dicts must hold at least ``expected``'s keys (recursively checked); lists, ints, numbers,
    bools and strings must be of that kind; a ``None`` in ``expected`` accepts anything."""
    if expected is None:
        return
    kind = _kind(expected)
    if _kind(got) != kind and not (kind == "a number" and _kind(got) == "an int"):
        raise _bad(f"{where} must be {kind} like {shown(expected)}, got {shown(got)}")
    if isinstance(expected, dict):
        missing = [key for key in expected if key not in got]
        if missing:
            raise _bad(f"{where} lacks the keys {shown(missing)}; it is {shown(got)}")
        for key, value in expected.items():
            check_like(value, got[key], f"{where}[{key!r}]")


def decode_state(
    state: Any,
    workers: int,
    initial_state: Callable[[int], Any] | None = None,
    check_worker: Callable[[int, Any], None] | None = None,
) -> IteratorPosition:
    """The position ``state`` describes for an iterator with ``workers`` workers.

    ``initial_state(w)``: worker ``w``'s iterator state before its first element, which the
    worker's entry must resemble (see :func:`check_like`); ``check_worker(w, entry)``: raises a
    ValueError for an entry its nodes refuse (reported here with the field's name). None checks
    no entry."""

    def read_worker(w: int, entry: Any) -> Any:
        where = f"iterators_in_use_states[{w}]"
        if initial_state is not None:
            check_like(initial_state(w), entry, where)
        if check_worker is not None:
            try:
                check_worker(w, entry)
            except ValueError as error:
                raise _bad(f"{where} is refused by its worker's iterator ({error})") from error
        return entry

    return decode_interleave(
        state,
        workers,
        bad=_bad,
        other_count=lambda states: _other_count(states, workers),
        read_worker=read_worker,
    )
