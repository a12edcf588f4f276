"""The iterator's checkpoint: small JSON, byte-compatible with Grain's DataLoader (version 2).

Pipelines without a FlatMapTransform store, per worker, the global index of the last record behind
its last delivered element (``last_seen_indices``) and which worker is read next. Pipelines with a
FlatMapTransform store Grain's nested per-layer state instead (Grain does the same), so that a
restore can skip the outputs of a partly delivered input.

Decoding uses ``json.loads`` and checks every field by hand: nothing from a checkpoint is ever
unpickled or executed. A worker that still reads holes after an elastic restore adds the
``grainlite_holes`` field (see :mod:`grainlite.loader.state.holes_field`); a state from another
layout is turned into holes by :mod:`grainlite.loader.state.elastic`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grainlite.engine.position import IteratorPosition, decode_interleave, encode_interleave
from grainlite.errors import (
    SHOWN_CHARS,
    CheckpointMismatchError,
    GrainliteValueError,
    StateNotJSONError,
    shown,
)
from grainlite.loader.pipeline import Skipping
from grainlite.loader.state import holes_field as pending_field
from grainlite.loader.state.worker_state import Resuming, innermost, nest, takens_of
from grainlite.loader.striding import WorkerSlice

VERSION = 2
# grainlite's one addition to Grain's fields: the sampler indices of records whose element failed
# (its error was delivered in its place) while a Batch still held earlier elements, so the
# position alone cannot say "go on after it"; below a FlatMap each comes with the failed element's
# state. Present only then; Grain ignores it.
SKIPPED_FIELD = "grainlite_skipped_indices"


@dataclass(frozen=True)
class Layout:
    """What a state must agree with: this loader's process layout and identity strings."""

    worker_count: int
    shard_index: int
    shard_count: int
    sampler_repr: str
    source_repr: str
    flat_map: bool
    # The sampler's length (None: it has none). A saved position past it is refused: it would
    # silently end the epoch.
    sampler_length: int | None = None

    @property
    def workers(self) -> int:
        """Streams per host: the worker count, or 1 for the in-process loader."""
        return max(self.worker_count, 1)

    def worker_slice(self, worker: int) -> WorkerSlice:
        """The global indices that worker ``worker`` of this host reads."""
        return WorkerSlice.striding(self.shard_index, self.shard_count, worker, self.workers)


def _nested_to_json(state: Any) -> dict[str, Any]:
    if isinstance(state, tuple):
        before, taken = state
        return {"parent": _nested_to_json(before), "next_index_in_buffer": taken}
    return {"next_index": state}


def encode(position: IteratorPosition, layout: Layout) -> bytes:
    """The state as Grain writes it: ``json.dumps(..., indent=4)`` encoded as UTF-8."""
    pending: dict[int, pending_field.Pending] = {}
    states = []
    for w, s in enumerate(position.states):
        if s.__class__ is Resuming:
            # Grain's fields say where the native tail starts; the holes go in their own field.
            pending[w] = pending_field.pending_of(s)
            s = nest([0] * len(takens_of(s.state)), s.plan.tail_start)
        states.append(s.state if isinstance(s, Skipping) else s)
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
        document[pending_field.FIELD] = pending_field.to_json(_where(layout), pending)
    return json.dumps(document, indent=4).encode()


def _skipped_to_json(position: IteratorPosition, layout: Layout) -> list[Any]:
    """The failures to drop after a restore: sampler indices, with their states below a FlatMap."""
    entries: list[tuple[int, Any]] = []
    for w, state in enumerate(position.states):
        worker = layout.worker_slice(w)
        if state.__class__ is Resuming:
            worker, state = state.plan.slice(worker), state.state
        if isinstance(state, Skipping):
            entries += [(worker.index(p), key) for p, key in state.skipped]
    entries.sort(key=lambda entry: (entry[0], repr(entry[1])))
    if not layout.flat_map:  # the failed element's state is always its record's position + 1
        return [index for index, _ in entries]
    return [[index, _nested_to_json(key)] for index, key in entries]


def _where(layout: Layout) -> tuple[int, int, int]:
    """(shard_index, shard_count, worker_count): the layout holes are written for."""
    return layout.shard_index, layout.shard_count, layout.worker_count


# A state is a few hundred bytes (a few MB with many pending holes); anything far larger is not
# one, and is refused before it is parsed. The Orbax handler reads files with the same bound.
MAX_STATE_BYTES = 64 * 1024 * 1024


def _bad(what: str) -> GrainliteValueError:
    return GrainliteValueError(
        f"Invalid iterator state: {what}. Pass the bytes returned by get_state() of a loader "
        f"with the same settings."
    )


def _load(state: bytes | str) -> Any:
    if isinstance(state, bytes | bytearray | str) and len(state) > MAX_STATE_BYTES:
        raise _bad(
            f"it is {len(state)} bytes long, more than the {MAX_STATE_BYTES} a state can be "
            f"(they are a few hundred bytes)"
        )
    if isinstance(state, bytes | bytearray):
        try:
            state = bytes(state).decode()
        except UnicodeDecodeError as error:
            raise _bad(f"it is not UTF-8 text ({error})") from None
    if not isinstance(state, str):
        raise _bad(f"expected bytes, got {type(state).__name__}")
    try:
        return json.loads(state)
    except RecursionError:
        raise _bad("it nests JSON arrays or objects thousands of levels deep") from None
    except json.JSONDecodeError as error:
        message = str(_bad(f"it is not valid JSON ({error})"))
        raise StateNotJSONError(message, error) from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise _bad(f"it holds a value that cannot be read ({error})") from None


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"{where} must be an integer, got {shown(value)}")
    return value


def _nested_from_json(node: Any, where: str) -> Any:
    if not isinstance(node, dict):
        raise _bad(f"{where} must be a JSON object, got {shown(node)}")
    if set(node) == {"next_index"}:
        count = _int(node["next_index"], f"{where}.next_index")
        if count < 0:
            raise _bad(f"{where}.next_index must be >= 0, got {count}")
        return count
    if set(node) == {"parent", "next_index_in_buffer"}:
        taken = _int(node["next_index_in_buffer"], f"{where}.next_index_in_buffer")
        if taken < 0:
            raise _bad(f"{where}.next_index_in_buffer must be >= 0, got {taken}")
        return (_nested_from_json(node["parent"], f"{where}.parent"), taken)
    raise _bad(f"{where} has keys {sorted(node)}, expected a FlatMapTransform pipeline's state")


def _check_within_sampler(state: Any, worker: int, layout: Layout) -> None:
    """Refuses a nested position past the end of what worker ``worker`` reads."""
    if layout.sampler_length is None:
        return
    base = state
    while isinstance(base, tuple):
        base = base[0]
    reads = WorkerSlice.striding(
        layout.shard_index, layout.shard_count, worker, layout.workers, layout.sampler_length
    ).positions()
    if reads is not None and base > reads:
        raise _bad(
            f"worker {worker}'s next_index {shown(base)} is past the end of this loader's sampler "
            f"(that worker reads {reads} records): it would end the stream at once"
        )


def _other_worker_count(raw: Any, layout: Layout) -> CheckpointMismatchError:
    return CheckpointMismatchError(
        "Worker count in checkpoint does not match dataloader worker count.\n"
        f"worker count in checkpoint: {len(raw) if isinstance(raw, list) else shown(raw)}\n"
        f"worker count in dataloader: {layout.worker_count}\n"
        "Restore with the worker_count the checkpoint was saved with."
    )


def _depth(state: Any) -> int:
    return 1 + _depth(state[0]) if isinstance(state, tuple) else 0


def _check_fan_outs(state: Any, worker: int, fan_outs: Sequence[int | None]) -> None:
    """Refuses a ``next_index_in_buffer`` beyond its FlatMapTransform's ``max_fan_out`` (the
    outermost level of a nested state is the last FlatMapTransform): it would skip pieces."""
    for level, fan_out in enumerate(reversed(fan_outs)):
        if not isinstance(state, tuple):
            return
        state, taken = state
        if fan_out is not None and taken > fan_out:
            where = f"worker {worker}'s" + " parent" * level
            raise _bad(
                f"{where} next_index_in_buffer {taken} is beyond the max_fan_out {fan_out} of "
                "its FlatMapTransform: restoring it would skip that element's other outputs"
            )


def _decode_nested(
    document: Any, layout: Layout, flat_maps: int, fan_outs: Sequence[int | None] = ()
) -> IteratorPosition:
    if layout.worker_count == 0:
        states = [_nested_from_json(document, "state")]
        exhausted = [False]
        next_worker = 0
    else:
        position = decode_interleave(
            document,
            layout.worker_count,
            bad=_bad,
            other_count=lambda raw: _other_worker_count(raw, layout),
            read_worker=lambda w, entry: _nested_from_json(entry, f"worker {w}"),
        )
        states, next_worker, exhausted = position.states, position.next_worker, position.exhausted
    for w, state in enumerate(states):
        _check_within_sampler(state, w, layout)
        if _depth(state) != flat_maps:
            raise _bad(
                f"worker {w}'s state nests {_depth(state)} FlatMapTransform levels, this loader "
                f"has {flat_maps}"
            )
        _check_fan_outs(state, w, fan_outs)
    return IteratorPosition(states, next_worker, exhausted)


def load(state: bytes | str) -> Any:
    """The JSON document of a state (``json.loads`` only); raises if it is not JSON text."""
    return _load(state)


def decode(
    state: bytes | str,
    layout: Layout,
    flat_maps: int = 0,
    fan_outs: Sequence[int | None] = (),
) -> IteratorPosition:
    """Parses and validates a state for this loader; raises with what differs and how to fix it.
    ``fan_outs``: each FlatMapTransform's ``max_fan_out`` in order (None: not checked)."""
    return decode_document(_load(state), layout, flat_maps, fan_outs)


def decode_document(
    document: Any, layout: Layout, flat_maps: int = 0, fan_outs: Sequence[int | None] = ()
) -> IteratorPosition:
    """:func:`decode` for a state already parsed by :func:`load`."""
    if layout.flat_map:
        extra = {}
        if isinstance(document, dict) and (
            SKIPPED_FIELD in document or pending_field.FIELD in document
        ):
            document = dict(document)
            for key in (SKIPPED_FIELD, pending_field.FIELD):
                if key in document:
                    extra[key] = document.pop(key)
        position = _decode_nested(document, layout, flat_maps, fan_outs)
        pending_field.add_pending(extra, position.states, _where(layout), flat_maps)
        _add_skipped(extra, position.states, layout)
        return position
    if not isinstance(document, dict):
        raise _bad(f"expected a JSON object, got {type(document).__name__}")
    if "iterators_in_use_states" in document or "parent" in document:
        raise _bad(
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
        raise _bad(f"the fields {missing} are missing")
    if document["version"] != VERSION:
        raise _bad(f"version {shown(document['version'])} is not supported, only version {VERSION}")
    _check_identity(document, layout)
    seen = document["last_seen_indices"]
    expected_keys = [str(w) for w in range(layout.workers)]
    if not isinstance(seen, dict) or sorted(seen) != sorted(expected_keys):
        raise _bad(f"last_seen_indices must have the keys {expected_keys}, got {shown(seen)}")
    states = []
    for w in range(layout.workers):
        worker = layout.worker_slice(w)
        index = _int(seen[str(w)], f"last_seen_indices[{w!r}]")
        end = layout.sampler_length
        if end is not None and index >= end:
            raise _bad(
                f"last_seen_indices[{str(w)!r}]={shown(index)} is past the end of this loader's "
                f"sampler, which has {end} indices: it would end the stream at once"
            )
        last_read = worker.position(index)
        if last_read is None or last_read < -1:
            raise _bad(
                f"last_seen_indices[{str(w)!r}]={shown(index)} is not an index worker {w} reads "
                f"(those are {worker.first} + {worker.stride}*k on this shard)"
            )
        states.append(last_read + 1)
    pending_field.add_pending(document, states, _where(layout), flat_maps)
    _add_skipped(document, states, layout)
    last = _int(document["last_worker_index"], "last_worker_index")
    if not -1 <= last < layout.workers:
        raise _bad(f"last_worker_index must be in [-1, {layout.workers - 1}], got {last}")
    next_worker = (last + 1) % layout.workers if layout.worker_count else 0
    return IteratorPosition(states, next_worker, [False] * layout.workers)


def _add_skipped(document: dict[str, Any], states: list[Any], layout: Layout) -> None:
    """Turns the states of the workers with failures to drop into Skipping states."""
    raw = document.get(SKIPPED_FIELD, [])
    if not isinstance(raw, list):
        raise _bad(f"{SKIPPED_FIELD} must be a list, got {shown(raw)}")
    per_worker: dict[int, list[tuple[int, Any]]] = {}
    for item in raw:
        if layout.flat_map:
            if not isinstance(item, list) or len(item) != 2:
                raise _bad(f"{SKIPPED_FIELD} entries must be [index, state], got {shown(item)}")
            index, key = _int(item[0], SKIPPED_FIELD), _nested_from_json(item[1], SKIPPED_FIELD)
        else:
            index, key = _int(item, SKIPPED_FIELD), None
        for w in range(layout.workers):
            worker, state = layout.worker_slice(w), states[w]
            if state.__class__ is Resuming:
                worker = state.plan.slice(worker)
            p = worker.position(index)
            if p is not None and p >= innermost(
                state.state if state.__class__ is Resuming else state
            ):
                per_worker.setdefault(w, []).append((p, p + 1 if key is None else key))
                break
        else:
            raise _bad(f"{SKIPPED_FIELD} holds {index}, which no worker reads after its position")
    for w, entries in per_worker.items():
        state = states[w]
        if state.__class__ is Resuming:
            states[w] = Resuming(state.plan, Skipping(state.state, tuple(entries)))
        else:
            states[w] = Skipping(state, tuple(entries))


def _shown_text(value: Any) -> str:
    """A checkpoint's identity string as written, cut to a readable length."""
    return value if isinstance(value, str) and len(value) <= SHOWN_CHARS else shown(value)


def _check_identity(document: dict[str, Any], layout: Layout) -> None:
    if document["worker_count"] != layout.worker_count:
        raise CheckpointMismatchError(
            "Worker count in checkpoint does not match dataloader worker count.\n"
            f"worker count in checkpoint: {_shown_text(document['worker_count'])}\n"
            f"worker count in dataloader: {layout.worker_count}\n"
            "Restore with the worker_count the checkpoint was saved with."
        )
    if document["sampler"] != layout.sampler_repr:
        raise CheckpointMismatchError(
            "Sampler in checkpoint does not match dataloader sampler.\n"
            f"sampler in checkpoint: {_shown_text(document['sampler'])}\n"
            f"sampler in dataloader: {layout.sampler_repr}\n"
            "The sampler is compared by `repr(sampler)`: build the loader with the same sampler "
            "arguments, or give a custom sampler a stable `__repr__`."
        )
    if document["data_source"] != layout.source_repr:
        raise CheckpointMismatchError(
            "DataSource in checkpoint does not match datasource in dataloader.\n"
            f"data source in checkpoint: {_shown_text(document['data_source'])}\n"
            f"data source in dataloader: {layout.source_repr}\n"
            "The source is compared by `repr(data_source)`: use the same data, or give a custom "
            "source a stable `__repr__` (no memory addresses or random names)."
        )
