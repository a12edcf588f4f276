"""The transform chain of one process, as push stages: each record flows through in one call.

Pushing (instead of chaining generators) costs one method call per stage and record, and lets every
output carry the iterator state *after* it was produced, which is what a checkpoint stores.

Each ``push(data, rng, state)`` receives:
  * ``data``: the element, or a :class:`~grainlite.engine.failures.FailedElement` when an earlier
    stage raised for it; stages pass a failed element on untouched, in the element's place;
  * ``rng``: the record's random generator, or the int key it will be made from (made only when a
    RandomMapTransform asks, then passed on so later transforms see the same, advanced generator),
    or None when the sampler has no seed;
  * ``state``: the position after this record: an int (sampler positions consumed) or, below a
    FlatMapTransform, ``(state before the input was fetched, outputs taken from it)``. A failed
    element that passes a Batch holding earlier elements carries :class:`Held` around its state
    instead: those elements are not delivered yet, so no position after the failed one describes
    the stream (the pipeline then lists the failure as one to drop when it comes again, see
    :class:`~grainlite.loader.state.worker_state.WorkerState`).
``flush(state)`` ends the stream (a partial batch goes out) with the final state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from grainlite.engine.failures import FailedElement, describe_operation, fail
from grainlite.sampling.records import Record, RecordMetadata
from grainlite.sampling.rng import record_rng as make_rng
from grainlite.transforms.base import Kind
from grainlite.transforms.batch import make_batch
from grainlite.transforms.batch_rows import BatchRows
from grainlite.transforms.custom_operation import OperationRunner, custom_output
from grainlite.transforms.legacy import BatchOperation, stack_or_type_error

Allocator = Callable[[tuple[int, ...], np.dtype], np.ndarray]


class Held:
    """The state of a failed element that overtook elements a Batch still holds."""

    __slots__ = ("state",)

    def __init__(self, state: Any) -> None:
        self.state = state  # the failed element's own state: it names the failure


Steps = tuple[tuple[Kind, Any], ...]
"""The operations, each with its kind, classified once when the loader is built."""


class Sink:
    """Collects (element, state) pairs for the driver."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out: list[tuple[Any, Any]] = []

    def push(self, data: Any, rng: Any, state: Any) -> None:
        self.out.append((data, state))

    def flush(self, state: Any) -> None:
        pass


class _Stage:
    __slots__ = ("name", "next")
    next: Any
    name: str  # how errors name this stage, e.g. "the transform operations[1] (Decode)"

    def flush(self, state: Any) -> None:
        self.next.flush(state)


class MapStage(_Stage):
    __slots__ = ("fn",)
    fn: Callable[..., Any]

    def push(self, data: Any, rng: Any, state: Any) -> None:
        if data.__class__ is not FailedElement:
            try:
                data = self.fn(data)
            except Exception as error:
                data = fail(error, self.name)
        self.next.push(data, rng, state)


class RandomMapStage(_Stage):
    __slots__ = ("fn",)
    fn: Callable[..., Any]

    def push(self, data: Any, rng: Any, state: Any) -> None:
        if data.__class__ is not FailedElement:
            if rng.__class__ is int:
                rng = make_rng(rng)
            try:
                data = self.fn(data, rng)
            except Exception as error:
                data = fail(error, self.name)
        self.next.push(data, rng, state)


class FilterStage(_Stage):
    __slots__ = ("dropped", "fn")
    dropped: int  # elements the filter rejected (counted for stats, only on that path)
    fn: Callable[..., Any]

    def push(self, data: Any, rng: Any, state: Any) -> None:
        if data.__class__ is not FailedElement:
            try:
                if not self.fn(data):
                    self.dropped += 1
                    return
            except Exception as error:
                data = fail(error, self.name)
        self.next.push(data, rng, state)


class BatchStage(_Stage):
    __slots__ = (
        "allocate", "batches", "buffer", "drop_remainder", "fn", "last_rng", "rows", "size",
    )  # fmt: skip
    allocate: Allocator | None
    batches: int  # batches made (counted for stats)
    buffer: list[Any]
    drop_remainder: bool
    fn: Callable[[list[Any]], Any] | None
    last_rng: Any
    rows: BatchRows | None  # the batch being filled row by row (large elements), or None
    size: int

    def push(self, data: Any, rng: Any, state: Any) -> None:
        if data.__class__ is FailedElement:  # goes on alone; the batch keeps filling after it
            if self.rows is not None:
                # A worker gives back the memory of what it allocated when a failure passes.
                self._stack_later(copy=True)
            if self.buffer and state.__class__ is not Held:
                state = Held(state)
            self.next.push(data, rng, state)
            return
        rows = self.rows
        if rows is not None:
            if rows.add(data):
                if rows.count == self.size:
                    self.rows = None
                    self.batches += 1
                    self.next.push(rows.batch(), rng, state)
                else:
                    self.last_rng = rng
                return
            self._stack_later(copy=False)
        buffer = self.buffer
        if not buffer and self.fn is None and self.size > 1:
            self.rows = BatchRows.start(data, self.size, self.allocate)
            if self.rows is not None:
                self.last_rng = rng
                return
        buffer.append(data)
        if len(buffer) == self.size:
            self.buffer = []
            self.next.push(self.stack(buffer), rng, state)
        else:
            self.last_rng = rng

    def _stack_later(self, copy: bool) -> None:
        """Hands the rows filled so far back as elements, to be stacked the usual way."""
        assert self.rows is not None
        self.buffer, self.rows = self.rows.elements(copy), None

    def stack(self, values: list[Any]) -> Any:
        self.batches += 1
        try:
            if self.fn is not None:
                return self.fn(values)
            return make_batch(values, self.allocate)
        except Exception as error:  # the whole batch failed: the error takes its place
            return fail(error, self.name)

    def flush(self, state: Any) -> None:
        rows, self.rows = self.rows, None
        if rows is not None and not self.drop_remainder:
            self.batches += 1
            self.next.push(rows.batch(), self.last_rng, state)
        elif self.buffer and not self.drop_remainder:
            values, self.buffer = self.buffer, []
            self.next.push(self.stack(values), self.last_rng, state)
        self.buffer = []
        self.next.flush(state)


class FlatMapStage(_Stage):
    """Emits each output with state ``(upstream state before this input, outputs taken so far)``.

    That is Grain's own FlatMap checkpoint, so a restore re-reads the input and skips the outputs
    already delivered (``skip``).
    """

    __slots__ = ("fn", "last_count", "outer", "previous", "produced", "skip")
    fn: Callable[[Any], Any]
    outer: FlatMapStage | None  # the next FlatMap downstream, if any
    last_count: int
    previous: Any
    produced: int  # outputs delivered (counted for stats)
    skip: int

    def push(self, data: Any, rng: Any, state: Any) -> None:
        if data.__class__ is not FailedElement:
            try:
                outputs = list(self.fn(data))
            except Exception as error:
                data = fail(error, self.name)
        if data.__class__ is FailedElement:  # the input is consumed: go on after it
            if state.__class__ is Held:  # a Batch upstream holds elements: pass it on as it is
                self.next.push(data, None, state)
                return
            self.previous, self.skip, self.last_count = state, 0, 0
            self.next.push(data, None, (state, 0))
            return
        before, self.previous = self.previous, state
        start, self.skip = self.skip, 0
        if start and self.outer is not None:
            # The outputs skipped were taken before: for the next FlatMap, the state before its
            # first input from this one is "this input, `start` outputs taken" (as if it had
            # seen them), so a state saved after it resumes there and not before them.
            self.outer.previous = (before, start)
        self.last_count = len(outputs)
        self.produced += len(outputs) - start
        push = self.next.push
        for taken in range(start, len(outputs)):
            push(outputs[taken], None, (before, taken + 1))

    def flush(self, state: Any) -> None:
        # Like Grain, the final state keeps the output count of the last input (or the restored
        # one if no input came since): the bytes of get_state() match at the end of the stream.
        self.next.flush((self.previous, self.last_count))


class OperationStage(_Stage):
    """A custom legacy Operation (records in, records out), run by an
    :class:`~grainlite.transforms.custom_operation.OperationRunner`.

    Each output carries the state after the last record the operation took, as Grain's do; an
    exception ends the operation's iterator, takes the place of an element, and the next record
    starts the operation afresh. Records carry the rng; index and record_key are None.
    """

    __slots__ = ("op", "produced", "runner")
    op: Any
    produced: int  # outputs delivered (counted for stats)
    runner: OperationRunner | None

    def push(self, data: Any, rng: Any, state: Any) -> None:
        if data.__class__ is FailedElement:
            self.next.push(data, rng, state)
            return
        if rng.__class__ is int:
            rng = make_rng(rng)
        if self.runner is None:
            self.runner = OperationRunner(self.op)
            self._emit(self.runner.pending, self.runner.error, state)
        metadata = RecordMetadata(None, None, rng)  # type: ignore[arg-type]  # index unknown here
        self._emit(*self.runner.feed(Record(metadata, data)), state)

    def _emit(self, outputs: list[Any], error: BaseException | None, state: Any) -> None:
        push = self.next.push
        self.produced += len(outputs)
        for output in outputs:
            try:
                data, rng = custom_output(output, self.op)
            except Exception as failure:
                data, rng = fail(failure, self.name), None
            push(data, rng, state)
        if error is not None:
            self.runner = None  # the operation's iterator is over: the next record restarts it
            push(fail(error, self.name), None, state)

    def flush(self, state: Any) -> None:
        if self.runner is not None:
            runner, self.runner = self.runner, None
            self._emit(*runner.finish(), state)
        self.next.flush(state)


def initial_state(steps: Steps, base: int = 0) -> Any:
    """The state before anything was read: ``base`` wrapped once per FlatMapTransform."""
    state: Any = base
    for kind, _ in steps:
        if kind == "flat_map":
            state = (state, 0)
    return state


def build_chain(
    steps: Steps, start: Any, allocate: Allocator | None = None
) -> tuple[Any, Sink, int]:
    """Builds the push chain for the classified operations ``steps`` resuming at ``start``.

    Returns the head stage, the sink that collects outputs, and the base position (sampler
    positions already consumed) where reading resumes. ``allocate``, if given, is used by a Batch
    that is the last operation to write the batch straight into (shared) memory.
    """
    # Unwrap the nested FlatMap states from the outside in: the outermost FlatMap is the last one.
    resume: dict[int, tuple[Any, int]] = {}
    state = start
    for position in range(len(steps) - 1, -1, -1):
        if steps[position][0] == "flat_map":
            state, taken = state
            resume[position] = (state, taken)
    base = state
    sink = Sink()
    downstream: Any = sink
    outer: FlatMapStage | None = None  # the FlatMap after the stages built so far
    for position in range(len(steps) - 1, -1, -1):
        kind, op = steps[position]
        stage: Any
        if kind == "map":
            stage = MapStage()
            stage.fn = op.map
        elif kind == "random_map":
            stage = RandomMapStage()
            # Grain's own TfRandomMap classes name the method np_random_map.
            stage.fn = op.random_map if hasattr(op, "random_map") else op.np_random_map
        elif kind == "filter":
            stage = FilterStage()
            stage.fn, stage.dropped = op.filter, 0
        elif kind == "operation":
            stage = OperationStage()
            stage.op, stage.runner, stage.produced = op, None, 0
        elif kind == "flat_map":
            stage = FlatMapStage()
            stage.fn = op.flat_map
            stage.previous, stage.skip = resume[position]
            stage.last_count, stage.produced = stage.skip, 0
            stage.outer, outer = outer, stage
        else:
            stage = BatchStage()  # ours or any object with Batch's three fields
            stage.size, stage.drop_remainder, stage.fn = (
                op.batch_size,
                op.drop_remainder,
                op.batch_fn,
            )
            stage.buffer, stage.last_rng, stage.batches, stage.rows = [], None, 0, None
            last = position == len(steps) - 1
            stage.allocate = allocate if last else None
            if stage.fn is None and isinstance(op, BatchOperation):  # TypeError on a mismatch
                stage.fn = functools.partial(stack_or_type_error, allocate=stage.allocate)
        stage.name, stage.next = describe_operation(position, op), downstream
        downstream = stage
    return downstream, sink, base
