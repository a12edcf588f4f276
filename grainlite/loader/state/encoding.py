"""Writing the iterator's checkpoint: small JSON, byte-compatible with Grain's DataLoader (v2).

The path of a checkpoint is :func:`~grainlite.loader.state.saved_state.parse` -> place (exact:
:func:`~grainlite.loader.state.decoding.worker_states`; elastic:
:mod:`grainlite.loader.state.elastic`) -> :func:`dump`; this module is the last step, and names
the fields the reading side checks (:data:`VERSION`, :data:`SKIPPED_FIELD`).

Pipelines without a FlatMapTransform store, per worker, the global index of the last record behind
its last delivered element (``last_seen_indices``) and which worker is read next. Pipelines with a
FlatMapTransform store Grain's nested per-layer state instead (Grain does the same), so that a
restore can skip the outputs of a partly delivered input. A worker that still reads holes after an
elastic restore adds the ``grainlite_holes`` field (see :mod:`grainlite.loader.state.holes_field`).
"""

from __future__ import annotations

import json
from typing import Any

from grainlite.engine.position import IteratorPosition, encode_interleave
from grainlite.loader.state import holes_field as pending_field
from grainlite.loader.state.layout import Layout
from grainlite.loader.state.worker_state import WorkerState, nest

VERSION = 2
# grainlite's one addition to Grain's fields: the sampler indices of records whose element failed
# (its error was delivered in its place) while a Batch still held earlier elements, so the
# position alone cannot say "go on after it"; below a FlatMap each comes with the failed element's
# state. Present only then; Grain ignores it.
SKIPPED_FIELD = "grainlite_skipped_indices"


def _nested_to_json(state: Any) -> dict[str, Any]:
    if isinstance(state, tuple):
        before, taken = state
        return {"parent": _nested_to_json(before), "next_index_in_buffer": taken}
    return {"next_index": state}


def dump(position: IteratorPosition, layout: Layout) -> bytes:
    """The state as Grain writes it: ``json.dumps(..., indent=4)`` encoded as UTF-8."""
    pending: dict[int, pending_field.Pending] = {}
    states = []
    for w, s in enumerate(position.states):
        state = WorkerState.of(s)
        if state.plan is not None:
            # Grain's fields say where the native tail starts; the holes go in their own field.
            pending[w] = pending_field.pending_of(state)
            states.append(nest([0] * len(state.takens), state.plan.tail_start))
        else:
            states.append(state.nested)
    document: dict[str, Any]
    if layout.flat_map:
        nested = [_nested_to_json(s) for s in states]
        workers = layout.worker_count
        document = encode_interleave(position, nested) if workers else nested[0]
    else:
        # A worker that delivered nothing stores the index before its first (as Grain does).
        last_seen = {str(w): layout.worker_slice(w).index(s - 1) for w, s in enumerate(states)}
        document = {
            "version": VERSION,
            "last_seen_indices": last_seen,
            "last_worker_index": position.next_worker - 1 if layout.worker_count else -1,
            "worker_count": layout.worker_count,
            "sampler": layout.sampler_repr,
            "data_source": layout.source_repr,
        }
    skipped = _skipped_to_json(position, layout)
    if skipped:  # only after a failed element that overtook elements a Batch still held
        document[SKIPPED_FIELD] = skipped
    if pending:  # only while a worker has holes left after an elastic restore
        document[pending_field.FIELD] = pending_field.to_json(layout.where, pending)
    return json.dumps(document, indent=4).encode()


def _skipped_to_json(position: IteratorPosition, layout: Layout) -> list[Any]:
    """The failures to drop after a restore: sampler indices, with their states below a FlatMap."""
    entries: list[tuple[int, Any]] = []
    for w, s in enumerate(position.states):
        if s.__class__ is not WorkerState or not s.skipped:
            continue
        worker = s.slice(layout.worker_slice(w))
        entries += [(worker.index(p), key) for p, key in s.skipped]
    entries.sort(key=lambda entry: (entry[0], repr(entry[1])))
    if not layout.flat_map:  # the failed element's state is always its record's position + 1
        return [index for index, _ in entries]
    return [[index, _nested_to_json(key)] for index, key in entries]
