"""One process's pipeline: read, transform, batch. The same code runs in the calling process
(``worker_count=0``) and in each worker process; only the driver around it differs.

A failed element (a transform raised) takes its element's place and the stream goes on. Its state
says "go on after it". When the failure overtook elements a Batch still holds, positions alone
cannot say that (restarting after the failed record would lose the held elements, restarting
before it would raise again), so the state becomes a
:class:`~grainlite.loader.state.worker_state.WorkerState` with the position of the last delivered
element plus the failures to drop when they come again. Reading from there makes the
held elements again and drops those failures, so the stream is the same as if it had not stopped.
Once an element from a later record is delivered, the state is a plain position again.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from grainlite.engine.failures import FailedElement
from grainlite.engine.packed_records import PicklesRecordsPacked
from grainlite.engine.pipeline import PipelineBase
from grainlite.loader.record_reader import RecordReader
from grainlite.loader.runs import MappedRuns
from grainlite.loader.stages import Allocator, Held, Steps, build_chain, initial_state
from grainlite.loader.state.worker_state import (
    Plan,
    WorkerState,
    armed_push,
    position_of,
    with_skipped,
    wrap,
)
from grainlite.loader.striding import WorkerSlice
from grainlite.options import ReadOptions
from grainlite.stats.chain import ChainTimer, operation_names
from grainlite.stats.counters import ENABLED as STATS_ENABLED

_NO_RNGS = itertools.repeat(None)


def _with_skipped(state: Any, skipped: set[tuple[int, Any]]) -> Any:
    """``state`` with the failures of records not yet behind it (``skipped`` is pruned in place)."""
    base = position_of(state)
    for entry in [entry for entry in skipped if entry[0] < base]:
        skipped.discard(entry)
    if not skipped:
        return state
    return with_skipped(state, tuple(sorted(skipped, key=lambda entry: (entry[0], repr(entry[1])))))


@dataclass(frozen=True)
class Pipeline(PicklesRecordsPacked, PipelineBase):
    """Everything a process needs to produce its share of the elements; pickled to workers.

    Attributes:
      source: the random-access data source.
      sampler: maps a global index to a record key (and rng).
      steps: the transforms in order, each with its kind (see
        :func:`~grainlite.transforms.base.classify`).
      shard_index: this host's shard.
      shard_count: how many hosts share the stream.
      read_options: reader threads and read-ahead per process.
    """

    _packed_attribute = "source"  # a large list of bytes records travels as one buffer

    source: Any
    sampler: Any
    steps: Steps
    shard_index: int
    shard_count: int
    read_options: ReadOptions

    def release_readers(self) -> None:
        """Closes the files this process opened for reading, where the source can reopen them
        on its next read (grainlite's ArrayRecordDataSource): the parent keeps no reader (and its
        index in memory) that only the workers use."""
        # Not imported here: an iterating loader imports nothing (a source of that class has
        # loaded its module already).
        array_record = sys.modules.get("grainlite.sources.array_record")
        if array_record is not None and type(self.source) is array_record.ArrayRecordDataSource:
            self.source.close()

    def pickled(self) -> bytes:
        """Pickles the pipeline for the workers; if it cannot, re-raises pickle's error as it was.

        As in Grain, the error keeps its original type (a ValueError raised by a ``__reduce__``
        stays a ValueError, a lock gives pickle's TypeError), with a note naming the part of the
        pipeline that cannot travel (``data_source``, ``sampler`` or ``operations[i]``) and the fix.
        """
        from grainlite.engine import pickling  # cloudpickle: the parent's only

        try:
            return pickling.dumps(self)
        except Exception as error:
            parts = [("data_source", self.source), ("sampler", self.sampler)]
            parts += [(f"operations[{i}]", op) for i, op in enumerate(self.operations)]
            for name, part in parts:
                try:
                    pickling.dumps(part)
                except Exception as part_error:
                    part_error.add_note(
                        f"grainlite: the DataLoader's {name} ({type(part).__name__}) cannot be "
                        f"pickled for the worker processes. Make it picklable with cloudpickle "
                        f"(e.g. open files and locks lazily, not in __init__), or use "
                        f"worker_count=0."
                    )
                    raise part_error from None
            error.add_note(
                "grainlite: the DataLoader's pipeline cannot be pickled for the worker processes; "
                "make its parts picklable with cloudpickle, or use worker_count=0."
            )
            raise

    @property
    def uses_rngs(self) -> bool:
        """True when a transform takes the records' generators (a RandomMapTransform, or a custom
        operation, whose records carry one); the others only pass them on, unused."""
        return any(kind in ("random_map", "operation") for kind, _ in self.steps)

    @property
    def operations(self) -> tuple[Any, ...]:
        """The transforms, in order."""
        return tuple(op for _, op in self.steps)

    @property
    def first_batch_records(self) -> int | None:
        """The records of a worker's first batch: the first Batch's size where only maps come
        before it; None where there is no Batch, or a filter, flat map or custom operation
        before it makes the count depend on the data."""
        for kind, op in self.steps:
            if kind == "batch":
                return int(op.batch_size)
            if kind not in ("map", "random_map"):
                return None
        return None

    @property
    def flat_maps(self) -> int:
        """How many FlatMapTransforms there are: each nests the state once, as Grain does."""
        return sum(kind == "flat_map" for kind, _ in self.steps)

    @property
    def fan_outs(self) -> tuple[int | None, ...]:
        """Each FlatMapTransform's ``max_fan_out``, in order (None where it declares no
        positive int): a restored ``next_index_in_buffer`` beyond it is refused."""
        fan_outs: list[int | None] = []
        for kind, op in self.steps:
            if kind == "flat_map":
                value = getattr(op, "max_fan_out", None)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    fan_outs.append(value)
                else:
                    fan_outs.append(None)
        return tuple(fan_outs)

    @property
    def has_flat_map(self) -> bool:
        """True when a FlatMapTransform is present: then states use Grain's nested format."""
        return self.flat_maps > 0

    @property
    def batches_last(self) -> bool:
        """True when the last operation is a Batch with the default batch function."""
        return (
            bool(self.steps) and self.steps[-1][0] == "batch" and self.steps[-1][1].batch_fn is None
        )

    def initial_state(self) -> Any:
        """One worker's state before it has read anything."""
        return initial_state(self.steps)

    def worker_slice(self, worker: int, workers: int) -> WorkerSlice:
        """The global indices worker ``worker`` of ``workers`` (>= 1) reads on this host."""
        return WorkerSlice.of(self.sampler, self.shard_index, self.shard_count, worker, workers)

    def describe_position(self, worker: int, workers: int, state: Any) -> str:
        """The element a worker at ``state`` makes next, in words (for stall reports)."""
        if state.__class__ is WorkerState and state.plan is not None:
            return "the element after its last delivered one"  # holes still pending: say less
        try:
            position = position_of(state)
            index = self.worker_slice(worker, workers).index(position)
            key = self.sampler[index].record_key
        except Exception:  # a state of another shape (holes still pending): say less
            return "the element after its last delivered one"
        return f"the element that starts at sampler index {index} (record key {key})"

    def make_stats(self) -> ChainTimer:
        """The counters :meth:`iterate` fills (pass the same one again after a restart)."""
        names = operation_names(self.operations)
        return ChainTimer([kind for kind, _ in self.steps], names, type(self.source).__name__)

    def iterate(
        self,
        worker: int,
        workers: int,
        start: Any,
        allocate: Allocator | None = None,
        stats: ChainTimer | None = None,
    ) -> Generator[tuple[Any, Any], None, None]:
        """Yields ``(element, state after it)`` for worker ``worker`` of ``workers`` from ``start``.

        ``start`` is a state as yielded before (or :meth:`initial_state`); iteration resumes right
        after the element that state was yielded with. An element may be a
        :class:`~grainlite.engine.failures.FailedElement`; the stream goes on after it. ``stats``
        (from :meth:`make_stats`) receives the read and per-operation counters. A
        :class:`~grainlite.loader.state.worker_state.WorkerState` start with a plan reads its
        holes before the native tail.
        """
        plan: Plan | None = None
        worker_slice = self.worker_slice(worker, workers)
        skipped: set[tuple[int, Any]] = set()
        if start.__class__ is WorkerState:
            plan, skipped, worker_slice = start.plan, set(start.skipped), start.slice(worker_slice)
            start = start.nested
        head, sink, base = build_chain(self.steps, start, allocate)
        timer = stats if stats is not None else self.make_stats()
        timer.attach(head, base)
        reader = RecordReader(
            self.sampler,
            self.source,
            worker_slice,
            base,
            self.read_options,
            timer.read if STATS_ENABLED else None,
            rngs=self.uses_rngs,
            processes=workers,
        )
        out = sink.out
        push = head.push
        timed_push = timer.timed_push
        count = base
        sample_at: int | None = timer.first_sample(count)
        if plan is not None and plan.skips:  # holes with FlatMap skips: every push arms them
            push, sample_at = armed_push(push, head, plan), None  # (so none is timed)
        delivered: Any = start  # the state of the last element given out
        runs = MappedRuns.of(head) if plan is None and not skipped else None

        def deliver(count: int) -> Generator[tuple[Any, Any], None, None]:
            """Gives out what reached the sink by position ``count``, with the states the module
            doc describes."""
            nonlocal delivered
            timer.position = count
            for element, state in out:
                if element.__class__ is FailedElement:
                    self._name_record(element.error, worker_slice, count - 1)
                if state.__class__ is Held or skipped:
                    entry = (count - 1, state.state) if state.__class__ is Held else None
                    if entry in skipped:
                        continue  # delivered before the state this run started from
                    state = _final_state(state, entry, skipped, delivered)
                delivered = state.nested if state.__class__ is WorkerState else state
                if plan is not None:
                    state = wrap(plan, state)
                yield element, state
            out.clear()

        try:
            # Elements leave as soon as they are made: the first one is not held back by the
            # rest of its chunk, and an error raised by a record arrives after every element
            # made before it.
            for rngs, data in reader:
                if runs is not None:  # Map -> Batch: the records of a batch in one run
                    i, n = 0, len(data)
                    while i < n:
                        take = runs.room(n - i, (sample_at or 0) - count - 1)
                        if take:
                            used = runs.run(data, rngs, i, take, count)
                            count += used
                            i += used
                        else:
                            value, rng = data[i], None if rngs is None else rngs[i]
                            i += 1
                            count += 1
                            if count == sample_at:
                                sample_at = timed_push(value, rng, count)
                            else:
                                push(value, rng, count)
                        if out:
                            yield from deliver(count)
                    continue
                for value, rng in zip(data, _NO_RNGS if rngs is None else rngs):
                    count += 1
                    if count == sample_at:  # a sample is timed (grainlite.stats.chain)
                        sample_at = timed_push(value, rng, count)
                    else:
                        push(value, rng, count)
                    if out:
                        yield from deliver(count)
            head.flush(count)
            timer.position = count
            for element, state in out:
                if skipped:
                    state = _with_skipped(state, skipped)
                yield element, wrap(plan, state)
            out.clear()
        finally:
            reader.close()

    def _name_record(self, error: BaseException, worker_slice: WorkerSlice, position: int) -> None:
        """Adds a note naming the record a failed element came from."""
        index = worker_slice.index(position)
        try:
            key = f", record key {self.sampler[index].record_key}"
        except Exception:  # a custom sampler that cannot say: the index alone
            key = ""
        error.add_note(f"grainlite: the record being processed was sampler index {index}{key}.")


def _final_state(
    state: Any, entry: tuple[int, Any] | None, skipped: set[tuple[int, Any]], delivered: Any
) -> Any:
    """The state an output leaves the pipeline with when failures are about (see the module doc).

    ``entry`` names a failure that overtook held elements (None for any other output);
    ``delivered`` is the position of the last element given out before.
    """
    if entry is None:
        return _with_skipped(state, skipped)
    skipped.add(entry)
    return _with_skipped(delivered, skipped)
