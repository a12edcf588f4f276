"""Elastic restore: resume a state saved with one layout (hosts, workers) in another.

The rule, written once here and in ``docs/how-to/checkpointing.md``:

1. **The old streams.** Host ``s`` of ``S`` with ``W`` workers runs ``max(W, 1)`` streams; stream
   ``(s, w)`` reads the sampler indices ``s + S*w + S*max(W,1)*k``. Each stream's state says
   where it stands: the next index of its native tail, plus (after an earlier resize) the holes
   it had not read yet, plus (with a FlatMapTransform) how many outputs of the record it was
   reading were delivered already.
2. **The remainder.** ``M`` is the largest next index of any old stream, raised past every record
   that needs special care (a partly delivered FlatMap input, a failure already delivered), so
   every index ``>= M`` is undelivered. Below ``M``, the undelivered indices are finitely many
   "holes": each stream's unread holes and its native indices from its next index up to ``M``.
   A partly delivered record stays a hole with "drop the first k outputs" per FlatMap level; a
   record whose failure was delivered is no hole at all.
3. **The deal.** The ``H`` holes, sorted by index, are dealt round robin to the ``n`` new streams,
   numbered ``g = s' + S'*w'`` (Grain's native order): hole ``j`` goes to stream
   ``(g0 - H + j) mod n``, ``g0`` being the stream whose tail starts with the smallest index (so
   g0 comes right after the last hole's stream), and each host's round robin starts at its worker
   with the smallest first index: a one-to-one pipeline on one host delivers the remainder in
   index order. With the same host count each host deals only its own holes among its own
   ``n = max(W', 1)`` workers; with a different host count the holes of all hosts are dealt
   among all ``n = S' * max(W', 1)`` streams (each process reads every process's file).
4. **The order.** Each new stream reads its holes in index order, then its native tail: its
   native indices ``>= M``. Batches are made per stream as always, so a batch at the seam can mix
   holes and tail; with ``drop_remainder=True`` each stream drops only its last short batch.

The same saved state and the same new layout always give the same streams. Once a stream has read
its holes its state is an ordinary Grain v2 position again.

A loader whose ``IndexSampler`` shards by itself numbers its indices per host, so its restore onto
another host count follows the rule of :mod:`grainlite.loader.state.resharding` (built on this one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grainlite.errors import CheckpointMismatchError, GrainliteValueError
from grainlite.loader.reader import RecordReader
from grainlite.loader.stages import build_chain, initial_state
from grainlite.loader.state import codec, resharding
from grainlite.loader.state import holes_field as pending_field
from grainlite.loader.state.codec import SavedState
from grainlite.loader.state.worker_state import Plan, WorkerState, bad, position_of, takens_of
from grainlite.loader.striding import WorkerSlice
from grainlite.options import ReadOptions


@dataclass
class _OldStream:
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


def _old_streams(
    entry: SavedState | Any, host: int, hosts: int, layout: codec.Layout, pipeline: Any
) -> list[_OldStream]:
    """The streams host ``host`` of ``hosts`` ran, from its saved state (read here if ``entry``
    is still the parsed JSON of another host's file)."""
    levels = pipeline.flat_maps
    saved = entry if isinstance(entry, SavedState) else codec.read(entry, layout.flat_map)
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
    position = codec.worker_states(saved, old, levels, getattr(pipeline, "fan_outs", ()))
    resharding.check_holes(position, pipeline.sampler)
    end = len(pipeline.sampler) if hasattr(pipeline.sampler, "__len__") else None
    streams = []
    for w, state in enumerate(position.states):
        native = WorkerSlice.striding(host, hosts, w, old.workers, end)
        stream = _OldStream(state.slice(native), state.nested)
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
        streams.append(stream)
    return streams


def _resolve_cursor(stream: _OldStream, pipeline: Any) -> dict[int, tuple[int, ...]]:
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


def remainder(
    documents: dict[int, SavedState | Any], hosts: int, layout: codec.Layout, pipeline: Any
) -> codec.IteratorPosition:
    """This host's new position: its part of what the saved layout had not delivered.

    Args:
      documents: the saved state of each old host, by host index (a :class:`SavedState`, or the
        parsed JSON of its file, read when its turn comes); with the same host count, only this
        host's.
      hosts: the old host count.
      layout: this loader's layout.
      pipeline: this loader's pipeline (its sampler, source and operations).
    """
    check_resizable(pipeline)
    if hosts == layout.shard_count:  # each host redistributes its own remainder (rule 3)
        documents = {layout.shard_index: documents[layout.shard_index]}
    elif sorted(documents) != list(range(hosts)):
        raise GrainliteValueError(
            f"Restoring onto another host count needs the states of all {hosts} saving hosts, "
            f"got those of hosts {sorted(documents)}; restore from a folder that holds every "
            f"process_<i>-of-{hosts}.json."
        )
    if hosts != layout.shard_count and resharding.applies(pipeline, layout):
        return resharding.remainder(documents, hosts, layout, pipeline)
    streams = []
    for host, document in sorted(documents.items()):
        streams += _old_streams(document, host, hosts, layout, pipeline)
    resolve_cursors(streams, pipeline)
    special: set[int] = set()
    for stream in streams:
        special |= set(stream.skips) | stream.drops
    bound = max([s.tail_index for s in streams] + [i + 1 for i in special])
    holes = undelivered(
        streams,
        lambda index: index >= bound,
        end=streams[0].slice.end,
        furthest=f" (the furthest is at sampler index {bound})",
    )
    return _deal(sorted(holes.items()), bound, hosts, layout, pipeline)


def resolve_cursors(streams: list[_OldStream], pipeline: Any) -> None:
    """Adds to each stream's skips the records its FlatMap levels had partly delivered (rule 2):
    where a saved skip and the resolved one name the same record, the larger count stands."""
    for stream in streams:
        for index, skips in _resolve_cursor(stream, pipeline).items():
            old = stream.skips.get(index, (0,) * len(skips))
            stream.skips[index] = tuple(max(a, b) for a, b in zip(old, skips))


def undelivered(
    streams: list[_OldStream],
    past: Callable[[int], bool],
    *,
    code: Callable[[int], int] | None = None,
    end: int | None = None,
    furthest: str = "",
) -> dict[int, tuple[int, ...] | None]:
    """The holes of rule 2: what the old streams had not delivered, with each one's FlatMap skips.

    Each stream is walked from where it stands: its unread holes, then its native indices until
    the first one for which ``past(index)`` is true (the remainder ends before it). Records whose
    failure was delivered are no holes, nor are indices ``>= end`` (when given).

    Args:
      streams: the old streams, their cursors resolved (:func:`resolve_cursors`).
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


def _deal(
    holes: list[tuple[int, tuple[int, ...] | None]],
    bound: int,
    hosts: int,
    layout: codec.Layout,
    pipeline: Any,
    key: Callable[[int], Any] = int,
) -> codec.IteratorPosition:
    """Deals the holes to the new streams (rule 3) and builds this host's worker states.

    ``key`` orders hole indices as ``holes`` is sorted (for the first worker to read).
    """
    s, hosts_now, workers = layout.shard_index, layout.shard_count, layout.workers
    if hosts == hosts_now:  # this host's own holes, among its own workers w'
        streams, mine = workers, list(range(workers))
        first_tail = bound + (s - bound) % hosts_now  # the host's first index >= bound
        g0 = (first_tail - s) // hosts_now % workers
    else:  # every host's holes, among all streams g = s' + S'*w'
        streams, mine = hosts_now * workers, [s + hosts_now * w for w in range(workers)]
        g0 = bound % streams
    offset = (g0 - len(holes)) % streams  # so the last hole's stream is followed by g0's
    states: list[Any] = []
    firsts = []
    for w, g in enumerate(mine):
        native = pipeline.worker_slice(w, workers)
        tail_start = max(0, -(-(bound - native.first) // native.stride))
        own = holes[(g - offset) % streams :: streams]
        start = tail_start - len(own)
        firsts.append((0, key(own[0][0])) if own else (1, native.index(tail_start)))
        if not own:
            states.append(initial_state(pipeline.steps, tail_start))
            continue
        skips = tuple((start + p, skip) for p, (_, skip) in enumerate(own) if skip is not None)
        plan = Plan(tuple(i for i, _ in own), start, skips)
        states.append(WorkerState(start, takens_of(initial_state(pipeline.steps, start)), plan))
    # Reading starts at the worker with the smallest first index: a 1:1 pipeline on one host then
    # delivers the remainder in index order, as Grain delivers a fresh run.
    first_worker = firsts.index(min(firsts)) if layout.worker_count else 0
    return codec.IteratorPosition(states, first_worker, [False] * workers)


def place(saved: SavedState, layout: codec.Layout, pipeline: Any) -> codec.IteratorPosition:
    """The position a saved state gives this loader: exact with the same layout, elastic
    otherwise (this host's part of what the saved layout had not delivered)."""
    if saved.matches(layout):
        fan_outs = getattr(pipeline, "fan_outs", ())
        position = codec.worker_states(saved, layout, pipeline.flat_maps, fan_outs)
        resharding.check_holes(position, pipeline.sampler)
        return codec.compacted(position)
    if saved.holes is not None and saved.holes.where[1] != layout.shard_count:
        host, hosts, _ = saved.holes.where
        raise CheckpointMismatchError(
            f"This state holds the holes of host {host} of {hosts}, this loader is host "
            f"{layout.shard_index} of {layout.shard_count}. Restore a checkpoint saved with "
            f"another host count through grain.checkpoint.CheckpointRestore, which reads every "
            f"host's file."
        )
    return remainder({layout.shard_index: saved}, layout.shard_count, layout, pipeline)


def restore(state: bytes | str, layout: codec.Layout, pipeline: Any) -> codec.IteratorPosition:
    """The position for ``set_state(state)``: the state parsed once, then placed."""
    return place(codec.parse(state, layout.flat_map), layout, pipeline)


def restore_hosts(
    documents: dict[int, Any], hosts: int, layout: codec.Layout, pipeline: Any
) -> codec.IteratorPosition:
    """The position for a restore from the files of ``hosts`` saving hosts (their parsed JSON,
    by host index): this host's part of what they had not delivered."""
    return remainder(documents, hosts, layout, pipeline)
