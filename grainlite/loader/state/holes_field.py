"""The ``grainlite_holes`` checkpoint field: the holes a worker has not read yet after a resize.

A state saved while some worker still has holes to read (see
:mod:`grainlite.loader.state.worker_state`) keeps Grain's fields as they would be without the holes
(each worker's ``last_seen_indices`` says where its native tail starts, so Grain, which ignores
unknown fields, resumes the tails) and adds one field::

    "grainlite_holes": {
        "shard_index": 0, "shard_count": 2, "worker_count": 3,
        "workers": {"1": {"holes": [14, [20, [2]], 26], "cursor": [0]}}
    }

Per worker with holes left: the hole indices in reading order (negative for a record of another
host layout, see :mod:`grainlite.sampling.foreign`; a hole written ``[index, skips]`` has outputs
to drop at each FlatMap level, innermost first), and ``cursor``, the FlatMap outputs already taken
from the first hole's record onwards (as in Grain's nested state; empty without a FlatMap). The
layout says which loader the holes belong to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grainlite.checks import state_int
from grainlite.errors import shown
from grainlite.loader.state.worker_state import Plan, WorkerState, bad

FIELD = "grainlite_holes"
# A hole list longer than this is not a state this library wrote (holes are at most a few per
# old worker per record of look-ahead); refusing it bounds the work a crafted file can cause.
MAX_HOLES = 10_000_000
# A negative hole names a record of another host layout (see grainlite.sampling.foreign); the
# sampler checks each one when the state is restored.
_LOWEST = -(2**63)


@dataclass(frozen=True)
class Pending:
    """One worker's unread holes, as the field holds them (see the module doc)."""

    holes: tuple[int, ...]
    skips: dict[int, tuple[int, ...]]  # index -> outputs to drop per FlatMap level
    cursor: tuple[int, ...]


def _int(value: Any, where: str, low: int = 0) -> int:
    return state_int(value, f"{FIELD}: {where}", bad, low=low, kind="an integer")


def _skips(value: Any, levels: int, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) != levels:
        raise bad(f"{FIELD}: {where} must be a list of {levels} counts, got {shown(value)}")
    return tuple(_int(v, where) for v in value)


def to_json(layout: tuple[int, int, int], workers: dict[int, Pending]) -> dict[str, Any]:
    """The field's value for ``(shard_index, shard_count, worker_count)`` and the workers' holes."""
    out = {}
    for w, pending in sorted(workers.items()):
        holes = [[i, list(pending.skips[i])] if i in pending.skips else i for i in pending.holes]
        out[str(w)] = {"holes": holes, "cursor": list(pending.cursor)}
    shard_index, shard_count, worker_count = layout
    return {
        "shard_index": shard_index,
        "shard_count": shard_count,
        "worker_count": worker_count,
        "workers": out,
    }


@dataclass(frozen=True)
class HolesField:
    """The field as read from a state: the layout it was written for, checked, and its workers
    (parsed by :meth:`workers`, once the loader's worker count is known)."""

    where: tuple[int, int, int]  # (shard_index, shard_count, worker_count)
    raw: dict[str, Any]

    @staticmethod
    def read(field: Any) -> HolesField:
        """Checks the layout the field names; raises the state error if it is malformed."""
        if not isinstance(field, dict):
            raise bad(f"{FIELD} must be a JSON object, got {shown(field)}")
        count = _int(field.get("shard_count"), "shard_count", 1)
        index = _int(field.get("shard_index"), "shard_index")
        if index >= count:
            raise bad(f"{FIELD}: shard_index {index} is not below shard_count {count}")
        return HolesField((index, count, _int(field.get("worker_count"), "worker_count")), field)

    def workers(self, streams: int, levels: int) -> dict[int, Pending]:
        """Each worker's holes, for a layout with ``streams`` workers and ``levels`` FlatMaps."""
        raw = self.raw.get("workers")
        if not isinstance(raw, dict):
            raise bad(f"{FIELD}: workers must be a JSON object, got {shown(raw)}")
        total = 0
        result = {}
        for key, value in raw.items():
            if not key.isdigit() or int(key) >= streams:
                raise bad(f"{FIELD}: worker {shown(key)} is not one of the {streams} workers")
            if not isinstance(value, dict) or set(value) != {"holes", "cursor"}:
                raise bad(
                    f"{FIELD}: worker {key} must have exactly holes and cursor, got {shown(value)}"
                )
            holes_raw = value["holes"]
            if not isinstance(holes_raw, list) or not holes_raw:
                raise bad(f"{FIELD}: worker {key}'s holes must be a non-empty list")
            total += len(holes_raw)
            if total > MAX_HOLES:
                raise bad(f"{FIELD} lists more than {MAX_HOLES} holes")
            holes, skips = [], {}
            for item in holes_raw:
                if isinstance(item, list):
                    if len(item) != 2:
                        raise bad(
                            f"{FIELD}: a hole with skips is [index, skips], got {shown(item)}"
                        )
                    index = _int(item[0], "a hole index", _LOWEST)
                    skips[index] = _skips(item[1], levels, f"hole {index}'s skips")
                else:
                    index = _int(item, "a hole index", _LOWEST)
                holes.append(index)
            if len(set(holes)) != len(holes):
                raise bad(f"{FIELD}: worker {key} lists a hole twice")
            cursor = _skips(value["cursor"], levels, f"worker {key}'s cursor")
            result[int(key)] = Pending(tuple(holes), skips, cursor)
        return result


def pending_of(state: WorkerState) -> Pending:
    """What a worker with holes left writes: the holes from its position on, and its cursor."""
    plan = state.plan
    assert plan is not None
    base = state.position
    skips = {plan.head[p - plan.head_start]: s for p, s in plan.skips if p >= base}
    return Pending(plan.head[base - plan.head_start :], skips, state.takens)


def resuming(native: WorkerState, pending: Pending) -> WorkerState:
    """The state of a worker with holes left, from its native state in Grain's fields (where its
    tail starts) and its entry in the field."""
    start = native.position - len(pending.holes)
    skips = tuple(
        (start + p, pending.skips[i]) for p, i in enumerate(pending.holes) if i in pending.skips
    )
    return WorkerState(start, pending.cursor, Plan(pending.holes, start, skips))
