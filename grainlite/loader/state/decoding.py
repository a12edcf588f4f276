"""Checking a saved state's fields against a layout, into the workers' positions.

:func:`worker_states` reads the document of a
:class:`~grainlite.loader.state.saved_state.SavedState` against a
:class:`~grainlite.loader.state.layout.Layout` (this loader's for an exact restore, or the one it
was saved with for an elastic one) and checks every field by hand: Grain's flat
``last_seen_indices`` fields or its nested FlatMapTransform state, the identity strings, the
``grainlite_holes`` field and :data:`~grainlite.loader.state.encoding.SKIPPED_FIELD`. A state that
does not fit raises with what differs and how to fix it. :func:`decode` is an exact restore from
bytes to an :class:`~grainlite.engine.position.IteratorPosition`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from grainlite.checks import state_int
from grainlite.engine.position import IteratorPosition, decode_interleave
from grainlite.errors import CheckpointMismatchError, shown, shown_text
from grainlite.loader.state import holes_field as pending_field
from grainlite.loader.state.encoding import SKIPPED_FIELD, VERSION
from grainlite.loader.state.holes_field import HolesField
from grainlite.loader.state.layout import Layout
from grainlite.loader.state.saved_state import SavedState, parse
from grainlite.loader.state.worker_state import WorkerState, bad
from grainlite.loader.striding import WorkerSlice
from grainlite.sources.protocol import source_matches


def _int(value: Any, where: str, low: int | None = None) -> int:
    return state_int(value, where, bad, low=low, kind="an integer")


def _nested_from_json(node: Any, where: str) -> Any:
    if not isinstance(node, dict):
        raise bad(f"{where} must be a JSON object, got {shown(node)}")
    if set(node) == {"next_index"}:
        return _int(node["next_index"], f"{where}.next_index", low=0)
    if set(node) == {"parent", "next_index_in_buffer"}:
        taken = _int(node["next_index_in_buffer"], f"{where}.next_index_in_buffer", low=0)
        return (_nested_from_json(node["parent"], f"{where}.parent"), taken)
    raise bad(f"{where} has keys {sorted(node)}, expected a FlatMapTransform pipeline's state")


def _check_within_sampler(state: WorkerState, worker: int, layout: Layout) -> None:
    """Refuses a nested position past the end of what worker ``worker`` reads."""
    if layout.sampler_length is None:
        return
    reads = WorkerSlice.striding(
        layout.shard_index, layout.shard_count, worker, layout.workers, layout.sampler_length
    ).positions()
    if reads is not None and state.position > reads:
        raise bad(
            f"worker {worker}'s next_index {shown(state.position)} is past the end of this "
            f"loader's sampler (that worker reads {reads} records): it would end the stream at once"
        )


def _other_worker_count(raw: Any, layout: Layout) -> CheckpointMismatchError:
    return CheckpointMismatchError(
        "Worker count in checkpoint does not match dataloader worker count.\n"
        f"worker count in checkpoint: {len(raw) if isinstance(raw, list) else shown(raw)}\n"
        f"worker count in dataloader: {layout.worker_count}\n"
        "Restore with the worker_count the checkpoint was saved with."
    )


def _check_fan_outs(state: WorkerState, worker: int, fan_outs: Sequence[int | None]) -> None:
    """Refuses a ``next_index_in_buffer`` beyond its FlatMapTransform's ``max_fan_out`` (the
    outermost level of a nested state is the last FlatMapTransform): it would skip pieces."""
    outermost_first = zip(reversed(state.takens), reversed(fan_outs))
    for level, (taken, fan_out) in enumerate(outermost_first):
        if fan_out is not None and taken > fan_out:
            where = f"worker {worker}'s" + " parent" * level
            raise bad(
                f"{where} next_index_in_buffer {taken} is beyond the max_fan_out {fan_out} of "
                "its FlatMapTransform: restoring it would skip that element's other outputs"
            )


def _nested_states(
    document: Any, layout: Layout, flat_maps: int, fan_outs: Sequence[int | None]
) -> IteratorPosition:
    """The workers' states from Grain's nested FlatMap fields (an interleave's with workers)."""
    if layout.worker_count == 0:
        states = [_nested_from_json(document, "state")]
        exhausted = [False]
        next_worker = 0
    else:
        position = decode_interleave(
            document,
            layout.worker_count,
            bad=bad,
            other_count=lambda raw: _other_worker_count(raw, layout),
            read_worker=lambda w, entry: _nested_from_json(entry, f"worker {w}"),
        )
        states, next_worker, exhausted = position.states, position.next_worker, position.exhausted
    typed = [WorkerState.of(state) for state in states]
    for w, state in enumerate(typed):
        _check_within_sampler(state, w, layout)
        if len(state.takens) != flat_maps:
            raise bad(
                f"worker {w}'s state nests {len(state.takens)} FlatMapTransform levels, this "
                f"loader has {flat_maps}"
            )
        _check_fan_outs(state, w, fan_outs)
    return IteratorPosition(typed, next_worker, exhausted)


def decode(
    state: bytes | str,
    layout: Layout,
    flat_maps: int = 0,
    fan_outs: Sequence[int | None] = (),
) -> IteratorPosition:
    """Parses and validates a state for this loader's layout, as an exact restore places it;
    raises with what differs and how to fix it. ``fan_outs``: each FlatMapTransform's
    ``max_fan_out`` in order (None: not checked)."""
    return compacted(worker_states(parse(state, layout.flat_map), layout, flat_maps, fan_outs))


def compacted(position: IteratorPosition) -> IteratorPosition:
    """``position`` with each worker's state as the worker carries it (see
    :meth:`WorkerState.compact`)."""
    states = [s.compact() for s in position.states]
    return IteratorPosition(states, position.next_worker, position.exhausted)


def worker_states(
    saved: SavedState, layout: Layout, flat_maps: int = 0, fan_outs: Sequence[int | None] = ()
) -> IteratorPosition:
    """The position ``saved`` describes in ``layout``, each worker's state a
    :class:`WorkerState`; validates every field, and refuses another sampler, data source or
    worker count than ``layout``'s."""
    document = saved.document
    if layout.flat_map:
        extra = {}
        if isinstance(document, dict) and (
            SKIPPED_FIELD in document or pending_field.FIELD in document
        ):
            document = dict(document)
            for key in (SKIPPED_FIELD, pending_field.FIELD):
                if key in document:
                    extra[key] = document.pop(key)
        position = _nested_states(document, layout, flat_maps, fan_outs)
        _add_holes(saved, extra, position.states, layout, flat_maps)
        _add_skipped(extra, position.states, layout)
        return position
    if not isinstance(document, dict):
        raise bad(f"expected a JSON object, got {type(document).__name__}")
    if "iterators_in_use_states" in document or "parent" in document:
        raise bad(
            "it was saved by a pipeline with a FlatMapTransform, this loader has none; restore it "
            "into a loader with the same operations"
        )
    missing = [
        k
        for k in (
            "version",
            "last_seen_indices",
            "last_worker_index",
            "worker_count",
            "sampler",
            "data_source",
        )
        if k not in document
    ]
    if missing:
        raise bad(f"the fields {missing} are missing")
    if document["version"] != VERSION:
        raise bad(f"version {shown(document['version'])} is not supported, only version {VERSION}")
    _check_identity(document, layout)
    seen = document["last_seen_indices"]
    expected_keys = [str(w) for w in range(layout.workers)]
    if not isinstance(seen, dict) or sorted(seen) != sorted(expected_keys):
        raise bad(f"last_seen_indices must have the keys {expected_keys}, got {shown(seen)}")
    states = []
    for w in range(layout.workers):
        worker = layout.worker_slice(w)
        index = _int(seen[str(w)], f"last_seen_indices[{w!r}]")
        end = layout.sampler_length
        if end is not None and index >= end:
            raise bad(
                f"last_seen_indices[{str(w)!r}]={shown(index)} is past the end of this loader's "
                f"sampler, which has {end} indices: it would end the stream at once"
            )
        last_read = worker.position(index)
        if last_read is None or last_read < -1:
            raise bad(
                f"last_seen_indices[{str(w)!r}]={shown(index)} is not an index worker {w} reads "
                f"(those are {worker.first} + {worker.stride}*k on this shard)"
            )
        states.append(WorkerState(last_read + 1))
    _add_holes(saved, document, states, layout, flat_maps)
    _add_skipped(document, states, layout)
    last = _int(document["last_worker_index"], "last_worker_index")
    if not -1 <= last < layout.workers:
        raise bad(f"last_worker_index must be in [-1, {layout.workers - 1}], got {last}")
    next_worker = (last + 1) % layout.workers if layout.worker_count else 0
    return IteratorPosition(states, next_worker, [False] * layout.workers)


def _add_holes(
    saved: SavedState,
    fields: dict[str, Any],
    states: list[WorkerState],
    layout: Layout,
    levels: int,
) -> None:
    """Gives the workers with holes left their plans (``states`` are the native states from
    Grain's fields: where each tail starts)."""
    if pending_field.FIELD not in fields:
        return
    holes = saved.holes or HolesField.read(fields[pending_field.FIELD])  # a null field raises
    if holes.where != layout.where:
        raise bad(
            f"{pending_field.FIELD} was written for (shard_index, shard_count, worker_count) "
            f"{holes.where}, this loader is {layout.where}"
        )
    for w, pending in holes.workers(len(states), levels).items():
        states[w] = pending_field.resuming(states[w], pending)


def _add_skipped(document: dict[str, Any], states: list[WorkerState], layout: Layout) -> None:
    """Gives the workers with failures to drop their ``skipped`` entries."""
    raw = document.get(SKIPPED_FIELD, [])
    if not isinstance(raw, list):
        raise bad(f"{SKIPPED_FIELD} must be a list, got {shown(raw)}")
    per_worker: dict[int, list[tuple[int, Any]]] = {}
    for item in raw:
        if layout.flat_map:
            if not isinstance(item, list) or len(item) != 2:
                raise bad(f"{SKIPPED_FIELD} entries must be [index, state], got {shown(item)}")
            index, key = _int(item[0], SKIPPED_FIELD), _nested_from_json(item[1], SKIPPED_FIELD)
        else:
            index, key = _int(item, SKIPPED_FIELD), None
        for w in range(layout.workers):
            state = states[w]
            p = state.slice(layout.worker_slice(w)).position(index)
            if p is not None and p >= state.position:
                per_worker.setdefault(w, []).append((p, p + 1 if key is None else key))
                break
        else:
            raise bad(f"{SKIPPED_FIELD} holds {index}, which no worker reads after its position")
    for w, entries in per_worker.items():
        states[w] = dataclasses.replace(states[w], skipped=tuple(entries))


def _check_identity(document: dict[str, Any], layout: Layout) -> None:
    if document["worker_count"] != layout.worker_count:
        raise CheckpointMismatchError(
            "Worker count in checkpoint does not match dataloader worker count.\n"
            f"worker count in checkpoint: {shown_text(document['worker_count'])}\n"
            f"worker count in dataloader: {layout.worker_count}\n"
            "Restore with the worker_count the checkpoint was saved with."
        )
    if document["sampler"] != layout.sampler_repr:
        raise CheckpointMismatchError(
            "Sampler in checkpoint does not match dataloader sampler.\n"
            f"sampler in checkpoint: {shown_text(document['sampler'])}\n"
            f"sampler in dataloader: {layout.sampler_repr}\n"
            "The sampler is compared by `repr(sampler)`: build the loader with the same sampler "
            "arguments, or give a custom sampler a stable `__repr__`."
        )
    if not source_matches(document["data_source"], layout.source_repr, layout.source_aliases):
        raise CheckpointMismatchError(
            "DataSource in checkpoint does not match datasource in dataloader.\n"
            f"data source in checkpoint: {shown_text(document['data_source'])}\n"
            f"data source in dataloader: {layout.source_repr}\n"
            "The source is compared by `repr(data_source)`: use the same data, or give a custom "
            "source a stable `__repr__` (no memory addresses or random names)."
        )
