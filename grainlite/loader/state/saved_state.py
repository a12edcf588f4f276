"""Reading a checkpoint's bytes, once and safely, into a :class:`SavedState`.

A state may come from a file anyone wrote, so its bytes are bounded (:data:`MAX_STATE_BYTES`) and
read with ``json.loads`` only (:func:`parse` holds the one call of a restore): nothing from a
checkpoint is ever unpickled or executed. What is read here is only what every restore needs
first: the document, the worker count it was saved with and its ``grainlite_holes`` field (see
:mod:`grainlite.loader.state.holes_field`). Its workers' states are checked and placed afterwards:
exactly by :func:`~grainlite.loader.state.decoding.worker_states`, or, for a state from another
layout, by :mod:`grainlite.loader.state.elastic`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grainlite.errors import StateNotJSONError, shown
from grainlite.loader.state import holes_field as pending_field
from grainlite.loader.state.holes_field import HolesField
from grainlite.loader.state.layout import Layout
from grainlite.loader.state.worker_state import bad

# A state is a few hundred bytes (a few MB with many pending holes); anything far larger is not
# one, and is refused before it is parsed. The Orbax handler reads files with the same bound.
MAX_STATE_BYTES = 64 * 1024 * 1024


def _load(state: bytes | str) -> Any:
    if isinstance(state, bytes | bytearray | str) and len(state) > MAX_STATE_BYTES:
        raise bad(
            f"it is {len(state)} bytes long, more than the {MAX_STATE_BYTES} a state can be "
            f"(they are a few hundred bytes)"
        )
    if isinstance(state, bytes | bytearray):
        try:
            state = bytes(state).decode()
        except UnicodeDecodeError as error:
            raise bad(f"it is not UTF-8 text ({error})") from None
    if not isinstance(state, str):
        raise bad(f"expected bytes, got {type(state).__name__}")
    try:
        return json.loads(state)
    except RecursionError:
        raise bad("it nests JSON arrays or objects thousands of levels deep") from None
    except json.JSONDecodeError as error:
        message = str(bad(f"it is not valid JSON ({error})"))
        raise StateNotJSONError(message, error) from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise bad(f"it holds a value that cannot be read ({error})") from None


def _worker_count_of(document: Any, flat_map: bool) -> int | None:
    """The worker count a state was saved with, or None if the document does not say."""
    if not isinstance(document, dict):
        return None
    if not flat_map:
        count = document.get("worker_count")
        if not isinstance(count, int) or isinstance(count, bool):
            return None
        seen = document.get("last_seen_indices")
        if isinstance(seen, dict) and len(seen) != max(count, 1):
            # The state lists one position per worker; a count that disagrees is damage, and
            # believing it would size the restore by an arbitrary number.
            raise bad(
                f"worker_count is {shown(count)} but last_seen_indices has {len(seen)} "
                f"entries; they must agree"
            )
        return count
    if "iterators_in_use_states" in document:
        states = document["iterators_in_use_states"]
        return len(states) if isinstance(states, list) else None
    return 0 if "parent" in document or "next_index" in document else None


@dataclass(frozen=True)
class SavedState:
    """A state as read from its bytes, once: the JSON document, the worker count it was saved
    with (None where it does not say) and its ``grainlite_holes`` field, its layout checked.

    Its workers' states are read against a layout by
    :func:`~grainlite.loader.state.decoding.worker_states`: this loader's (an exact restore) or
    the one it was saved with (an elastic restore).
    """

    document: Any
    worker_count: int | None
    holes: HolesField | None

    def matches(self, layout: Layout) -> bool:
        """True when the state belongs to this host's layout (then the restore is exact)."""
        count = self.worker_count
        if count is None or count == layout.worker_count:
            return self.holes is None or self.holes.where == layout.where
        return False


def load(state: bytes | str) -> Any:
    """The JSON document of a state (``json.loads`` only); raises if it is not JSON text."""
    return _load(state)


def read(document: Any, flat_map: bool) -> SavedState:
    """The :class:`SavedState` of a parsed document, for a loader with (or without) a
    FlatMapTransform; raises if the worker count or the holes' layout is malformed."""
    count = _worker_count_of(document, flat_map)
    field = document.get(pending_field.FIELD) if isinstance(document, dict) else None
    return SavedState(document, count, None if field is None else HolesField.read(field))


def parse(state: bytes | str, flat_map: bool) -> SavedState:
    """Reads a state's bytes (the one ``json.loads`` of a restore) into a :class:`SavedState`."""
    return read(_load(state), flat_map)
