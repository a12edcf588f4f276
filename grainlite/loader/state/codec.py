"""The iterator's checkpoint: small JSON, byte-compatible with Grain's DataLoader (version 2).

The path is ``parse`` (the only ``json.loads``, into a :class:`SavedState`) -> place (exact here,
:func:`worker_states`; elastic in :mod:`grainlite.loader.state.elastic`) -> :func:`dump`.

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

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grainlite.checks import state_int
from grainlite.engine.position import IteratorPosition, decode_interleave, encode_interleave
from grainlite.errors import SHOWN_CHARS, CheckpointMismatchError, StateNotJSONError, shown
from grainlite.loader.state import holes_field as pending_field
from grainlite.loader.state.holes_field import HolesField
from grainlite.loader.state.worker_state import WorkerState, bad, nest
from grainlite.loader.striding import WorkerSlice
from grainlite.sources.protocol import source_aliases, source_matches, source_repr

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
    # Other data_source texts that restore onto this source (sources.protocol.source_aliases).
    source_aliases: tuple[str, ...] = ()

    @staticmethod
    def of(
        worker_count: int,
        sampler: Any,
        data_source: Any,
        flat_map: bool,
        shard_index: int = 0,
        shard_count: int = 1,
    ) -> Layout:
        """The layout of a loader with these settings (the one place one is built from them)."""
        return Layout(
            worker_count=worker_count,
            shard_index=shard_index,
            shard_count=shard_count,
            sampler_repr=repr(sampler),
            source_repr=source_repr(data_source),
            flat_map=flat_map,
            sampler_length=len(sampler) if hasattr(sampler, "__len__") else None,
            source_aliases=source_aliases(data_source),
        )

    def saved_as(self, worker_count: int, shard_index: int, shard_count: int) -> Layout:
        """This loader's layout with the process layout a state was saved with."""
        return dataclasses.replace(
            self, worker_count=worker_count, shard_index=shard_index, shard_count=shard_count
        )

    @property
    def where(self) -> tuple[int, int, int]:
        """(shard_index, shard_count, worker_count): the layout holes are written for."""
        return self.shard_index, self.shard_count, self.worker_count

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

    Its workers' states are read against a layout by :func:`worker_states`: this loader's (an
    exact restore) or the one it was saved with (an elastic restore).
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
    if not source_matches(document["data_source"], layout.source_repr, layout.source_aliases):
        raise CheckpointMismatchError(
            "DataSource in checkpoint does not match datasource in dataloader.\n"
            f"data source in checkpoint: {_shown_text(document['data_source'])}\n"
            f"data source in dataloader: {layout.source_repr}\n"
            "The source is compared by `repr(data_source)`: use the same data, or give a custom "
            "source a stable `__repr__` (no memory addresses or random names)."
        )
