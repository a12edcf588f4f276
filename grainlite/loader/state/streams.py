"""The saved layout's streams: where each stood, and which records it had not delivered.

Both elastic rules (:mod:`grainlite.loader.state.elastic`, one index space shared by every layout,
and :mod:`grainlite.loader.state.resharding`, a sampler that shards by itself) start from the same
facts: each saved worker is a stream of sampler indices (its unread holes from an earlier resize,
then its native indices), standing at a position, with the FlatMap outputs of a partly delivered
record to drop and the records whose failure was delivered. This module reads them from a saved
state (:func:`old_streams`) and walks them to list what is undelivered (:func:`undelivered`); the
rules only say where the remainder ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grainlite.engine.position import IteratorPosition
from grainlite.errors import GrainliteValueError
from grainlite.loader.record_reader import RecordReader
from grainlite.loader.stages import build_chain
from grainlite.loader.state import holes_field as pending_field
from grainlite.loader.state.decoding import worker_states
from grainlite.loader.state.layout import Layout
from grainlite.loader.state.saved_state import SavedState
from grainlite.loader.state.worker_state import bad, position_of, takens_of
from grainlite.loader.striding import WorkerSlice
from grainlite.options import ReadOptions
from grainlite.sampling.sharding import NoSharding


@dataclass
class OldStream:
    """One stream of the saved layout: what it still has to deliver."""

    slice: WorkerSlice  # its holes (if any) then its native indices
    start: Any  # its position in ``slice`` (a nested FlatMap state or an int)
    skips: dict[int, tuple[int, ...]] = field(default_factory=dict)  # index -> outputs to drop
    drops: set[int] = field(default_factory=set)  # indices whose failure was delivered

    @property
    def tail_index(self) -> int:
        """The first native index it had not read (its holes come before it)."""
        tail = self.slice.tail_start if self.slice.head else position_of(self.start)
        return self.slice.first + self.slice.stride * tail


def check_resizable(pipeline: Any) -> None:
    """Raises if this pipeline's remainder cannot be computed record by record."""
    kinds = [kind for kind, _ in pipeline.steps]
    for position, (kind, op) in enumerate(pipeline.steps):
        if kind == "operation":
            raise GrainliteValueError(
                f"This checkpoint was saved with another worker or host count, and operations"
                f"[{position}] ({type(op).__name__}) is a custom Operation, whose buffered records "
                f"the checkpoint does not hold. Restore with the layout it was saved with, or use "
                f"Map/Filter/FlatMap/Batch transforms."
            )
        if kind == "flat_map" and "batch" in kinds[:position]:
            raise GrainliteValueError(
                f"This checkpoint was saved with another worker or host count, and operations"
                f"[{position}] ({type(op).__name__}) is a FlatMapTransform after a Batch: its "
                f"inputs are batches, which another layout forms differently. Restore with the "
                f"layout it was saved with, or move the FlatMapTransform before the Batch."
            )


def check_holes(position: IteratorPosition, sampler: Any) -> None:
    """Refuses a restored position (its states typed, see
    :func:`~grainlite.loader.state.decoding.worker_states`) whose holes name records of another
    layout (negative indices) that ``sampler`` cannot read."""
    problem = getattr(sampler, "foreign_problem", None)
    options = getattr(sampler, "_shard_options", None)
    # Only a sampler that shards by itself writes foreign holes (see resharding).
    readable = problem is not None and not isinstance(options, NoSharding)
    for state in position.states:
        if state.plan is None:
            continue
        for code in state.plan.head:
            if code >= 0:
                continue
            if problem is None or not readable:
                raise bad(
                    f"{pending_field.FIELD}: a hole index must be an integer >= 0, got {code}"
                )
            why = problem(code)
            if why is not None:
                raise bad(f"{pending_field.FIELD} holds the hole {why}")


def old_streams(
    saved: SavedState, host: int, hosts: int, layout: Layout, pipeline: Any
) -> list[OldStream]:
    """The streams host ``host`` of ``hosts`` ran, from its saved state, with the records their
    FlatMap levels had partly delivered resolved (see :func:`_resolve_cursor`).

    ``layout`` and ``pipeline`` read the state as its host did: their sampler is the one it saved
    with (the worker count comes from the state).
    """
    levels = pipeline.flat_maps
    count = saved.worker_count
    if count is None or count < 0:
        raise bad(
            "it is not a DataLoader state of this pipeline "
            + ("(with a FlatMapTransform)" if layout.flat_map else "(without a FlatMapTransform)")
        )
    old = layout.saved_as(count, host, hosts)
    if saved.holes is not None and saved.holes.where != old.where:
        raise bad(
            f"{pending_field.FIELD} was written for (shard_index, shard_count, worker_count) "
            f"{saved.holes.where}, the file is host {host} of {hosts} with {count} workers"
        )
    # Validates every field, and refuses another sampler or data source (not the worker count:
    # ``old`` has the saved one).
    position = worker_states(saved, old, levels, getattr(pipeline, "fan_outs", ()))
    check_holes(position, pipeline.sampler)
    end = len(pipeline.sampler) if hasattr(pipeline.sampler, "__len__") else None
    streams = []
    for w, state in enumerate(position.states):
        native = WorkerSlice.striding(host, hosts, w, old.workers, end)
        stream = OldStream(state.slice(native), state.nested)
        if state.plan is not None:
            stream.skips = {stream.slice.index(p): s for p, s in state.plan.skips}
        if state.skipped:
            if levels:
                raise GrainliteValueError(
                    "This checkpoint was saved with another worker or host count right after a "
                    "failed element overtook elements a Batch held, in a pipeline with a "
                    "FlatMapTransform; its remainder cannot be split. Restore with the layout "
                    "it was saved with and save again after the next batch."
                )
            stream.drops = {stream.slice.index(p) for p, _ in state.skipped}
        # Where a saved skip and the resolved one name the same record, the larger count stands.
        for index, skips in _resolve_cursor(stream, pipeline).items():
            old_skips = stream.skips.get(index, (0,) * len(skips))
            stream.skips[index] = tuple(max(a, b) for a, b in zip(old_skips, skips))
        streams.append(stream)
    return streams


def _resolve_cursor(stream: OldStream, pipeline: Any) -> dict[int, tuple[int, ...]]:
    """Which record each FlatMap level's "outputs already taken" belong to, and how many.

    A nested state says "from this position, the first input to reach FlatMap level L had its
    first t outputs delivered"; a Filter before the FlatMap may drop records in between. Running
    the old stream's own chain from its position (outputs discarded) shows which record each
    level's first input comes from.
    """
    takens = takens_of(stream.start)
    if not any(takens):
        return {}
    chain, sink, base = build_chain(pipeline.steps, stream.start)
    stages = []
    stage = chain
    while hasattr(stage, "next"):
        if hasattr(stage, "skip"):
            stages.append(stage)
        stage = stage.next
    waiting = {level: t for level, t in enumerate(takens) if t}
    found: dict[int, list[int]] = {}
    options = ReadOptions(num_threads=0, prefetch_buffer_size=0)
    reader = RecordReader(pipeline.sampler, pipeline.source, stream.slice, base, options)
    count = base
    try:
        for rngs, data in reader:
            for value, rng in zip(data, rngs if rngs is not None else [None] * len(data)):
                index = stream.slice.index(count)
                for level, skip in enumerate(stream.skips.get(index, ())):
                    stages[level].skip = max(stages[level].skip, skip)
                count += 1
                chain.push(value, rng, count)
                sink.out.clear()
                for level in [level for level in waiting if stages[level].skip == 0]:
                    found.setdefault(index, [0] * len(takens))[level] = waiting.pop(level)
                if not waiting:
                    return {i: tuple(s) for i, s in found.items()}
    finally:
        reader.close()
    return {i: tuple(s) for i, s in found.items()}


def undelivered(
    streams: list[OldStream],
    past: Callable[[int], bool],
    *,
    code: Callable[[int], int] | None = None,
    end: int | None = None,
    furthest: str = "",
) -> dict[int, tuple[int, ...] | None]:
    """What the old streams had not delivered, with each record's FlatMap skips.

    Each stream is walked from where it stands: its unread holes, then its native indices until
    the first one for which ``past(index)`` is true (the remainder ends before it). Records whose
    failure was delivered are no holes, nor are indices ``>= end`` (when given).

    Args:
      streams: the old streams (from :func:`old_streams`).
      past: true for a native index at or after the end of the remainder.
      code: the key a hole gets in the result (the index itself when None).
      end: the sampler's length, or None.
      furthest: said after "records apart" when there are too many holes.

    Returns:
      ``{hole key: its skips (outputs to drop per FlatMap level) or None}``.
    """
    holes: dict[int, tuple[int, ...] | None] = {}
    for stream in streams:
        position = position_of(stream.start)
        stop = stream.slice.positions()
        while stop is None or position < stop:
            index = stream.slice.index(position)
            if position >= stream.slice.tail_start and past(index):
                break
            if (end is None or index < end) and index not in stream.drops:
                holes[index if code is None else code(index)] = stream.skips.get(index)
                if len(holes) > pending_field.MAX_HOLES:
                    raise bad(
                        f"its workers stand more than {pending_field.MAX_HOLES} records "
                        f"apart{furthest}, which no DataLoader run leaves"
                    )
            position += 1
    return holes
