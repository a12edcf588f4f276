"""Where a multi-worker iterator stands, and its checkpoint in Grain's interleave shape.

:class:`IteratorPosition` is what the engine keeps: every worker's state, the worker read next
and which workers are finished. Grain writes such a position as the state of an interleave over
the workers' iterators (its ``mp_prefetch`` always; its DataLoader when a FlatMapTransform makes
the state nested)::

    {"next_index_in_cycle": 1, "next_index_in_datasets": 2, "iterators_in_use_indices": [0, 1],
     "iterators_in_use_states": [<worker 0>, <worker 1>], "exhausted": [0, 0],
     "future_states": {}}

:func:`encode_interleave` and :func:`decode_interleave` are the one codec of that shape, used by
the DataLoader's state (:mod:`grainlite.loader.state.encoding`) and ``mp_prefetch``'s
(:mod:`grainlite.dataset.mp.state`). Decoding checks every field by hand (a state may come from
a file) and raises the caller's own errors: each caller passes how a damaged field, a worker
count that differs and one worker's entry are reported and read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grainlite.checks import state_int
from grainlite.errors import shown


@dataclass
class IteratorPosition:
    """Where an iterator stands: per-worker states, the next worker to read, finished workers."""

    states: list[Any]
    next_worker: int
    exhausted: list[bool]


def encode_interleave(
    position: IteratorPosition, states: list[Any] | None = None
) -> dict[str, Any]:
    """The interleave dict of ``position``; ``states``: the per-worker entries as written (by
    default ``position.states`` as they are)."""
    entries = list(position.states if states is None else states)
    workers = len(entries)
    return {
        "next_index_in_cycle": position.next_worker,
        "next_index_in_datasets": workers,
        "iterators_in_use_indices": list(range(workers)),
        "iterators_in_use_states": entries,
        "exhausted": [int(flag) for flag in position.exhausted],
        "future_states": {},
    }


def decode_interleave(
    document: Any,
    workers: int,
    *,
    bad: Callable[[str], Exception],
    other_count: Callable[[Any], Exception],
    read_worker: Callable[[int, Any], Any],
) -> IteratorPosition:
    """The position an interleave dict describes for ``workers`` workers.

    Args:
      document: the parsed state (anything: it is checked).
      workers: the worker count of the iterator restoring it.
      bad: makes the caller's error for a damaged field from what is wrong (quoting at most
        ``errors.SHOWN_CHARS`` characters of a bad value).
      other_count: makes the caller's error for ``iterators_in_use_states`` of another length
        (or not a list), given that value.
      read_worker: ``read_worker(w, entry)`` checks worker ``w``'s entry and returns its state,
        raising the caller's error if it is damaged.
    """
    if not isinstance(document, dict) or "iterators_in_use_states" not in document:
        raise bad(f"expected a dict with 'iterators_in_use_states', got {shown(document)}")
    raw = document["iterators_in_use_states"]
    if not isinstance(raw, list) or len(raw) != workers:
        raise other_count(raw)
    states = [read_worker(w, entry) for w, entry in enumerate(raw)]
    flags = document.get("exhausted", [0] * workers)
    if not isinstance(flags, list) or len(flags) != workers:
        raise bad(f"exhausted must be a list of {workers} flags, got {shown(flags)}")
    exhausted = [bool(state_int(flag, "exhausted", bad)) for flag in flags]
    next_worker = state_int(document.get("next_index_in_cycle"), "next_index_in_cycle", bad)
    if not 0 <= next_worker < workers:
        raise bad(f"next_index_in_cycle must be in [0, {workers - 1}], got {next_worker}")
    return IteratorPosition(states, next_worker, exhausted)
