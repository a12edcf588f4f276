"""The transform chain of one process, as push stages: each record flows through in one call.

Pushing (instead of chaining generators) costs one method call per stage and record, and lets every
output carry the iterator state *after* it was produced, which is what a checkpoint stores.

Each ``push(data, rng, state)`` receives:
  * ``rng``: the record's random generator, or the int key it will be made from (made only when a
    RandomMapTransform asks, then passed on so later transforms see the same, advanced generator),
    or None when the sampler has no seed;
  * ``state``: the position after this record: an int (sampler positions consumed) or, below a
    FlatMapTransform, ``(state before the input was fetched, outputs taken from it)``.
``flush(state)`` ends the stream (a partial batch goes out) with the final state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from grainlite.transforms.base import classify
from grainlite.transforms.batch import make_batch

Allocator = Callable[[tuple[int, ...], np.dtype], np.ndarray]


def make_rng(key: int) -> np.random.Generator:
    """The per-record generator Grain gives record ``i``: ``Philox(key=seed + i)``."""
    return np.random.Generator(np.random.Philox(key=key))


def _annotate(error: BaseException, op: Any) -> None:
    error.add_note(f"grainlite: raised by the transform {op!r}.")


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
    __slots__ = ("next", "op")
    next: Any
    op: Any

    def flush(self, state: Any) -> None:
        self.next.flush(state)


class MapStage(_Stage):
    __slots__ = ("fn",)
    fn: Callable[..., Any]

    def push(self, data: Any, rng: Any, state: Any) -> None:
        try:
            data = self.fn(data)
        except Exception as error:
            _annotate(error, self.op)
            raise
        self.next.push(data, rng, state)


class RandomMapStage(_Stage):
    __slots__ = ("fn",)
    fn: Callable[..., Any]

    def push(self, data: Any, rng: Any, state: Any) -> None:
        if rng.__class__ is int:
            rng = make_rng(rng)
        try:
            data = self.fn(data, rng)
        except Exception as error:
            _annotate(error, self.op)
            raise
        self.next.push(data, rng, state)


class FilterStage(_Stage):
    __slots__ = ("fn",)
    fn: Callable[..., Any]

    def push(self, data: Any, rng: Any, state: Any) -> None:
        try:
            keep = self.fn(data)
        except Exception as error:
            _annotate(error, self.op)
            raise
        if keep:
            self.next.push(data, rng, state)


class BatchStage(_Stage):
    __slots__ = ("allocate", "buffer", "drop_remainder", "fn", "last_rng", "size")
    allocate: Allocator | None
    buffer: list[Any]
    drop_remainder: bool
    fn: Callable[[list[Any]], Any] | None
    last_rng: Any
    size: int

    def push(self, data: Any, rng: Any, state: Any) -> None:
        buffer = self.buffer
        buffer.append(data)
        if len(buffer) == self.size:
            self.buffer = []
            self.next.push(self._stack(buffer), rng, state)
        else:
            self.last_rng = rng

    def _stack(self, values: list[Any]) -> Any:
        try:
            if self.fn is not None:
                return self.fn(values)
            return make_batch(values, self.allocate)
        except Exception as error:
            _annotate(error, self.op)
            raise

    def flush(self, state: Any) -> None:
        if self.buffer and not self.drop_remainder:
            values, self.buffer = self.buffer, []
            self.next.push(self._stack(values), self.last_rng, state)
        self.buffer = []
        self.next.flush(state)


class FlatMapStage(_Stage):
    """Emits each output with state ``(upstream state before this input, outputs taken so far)``.

    That is Grain's own FlatMap checkpoint, so a restore re-reads the input and skips the outputs
    already delivered (``skip``).
    """

    __slots__ = ("fn", "last_count", "previous", "skip")
    fn: Callable[[Any], Any]
    last_count: int
    previous: Any
    skip: int

    def push(self, data: Any, rng: Any, state: Any) -> None:
        before, self.previous = self.previous, state
        try:
            outputs = list(self.fn(data))
        except Exception as error:
            _annotate(error, self.op)
            raise
        start, self.skip = self.skip, 0
        self.last_count = len(outputs)
        push = self.next.push
        for taken in range(start, len(outputs)):
            push(outputs[taken], None, (before, taken + 1))

    def flush(self, state: Any) -> None:
        # Like Grain, the final state keeps the output count of the last input (or the restored
        # one if no input came since): the bytes of get_state() match at the end of the stream.
        self.next.flush((self.previous, self.last_count))


def initial_state(operations: tuple[Any, ...], base: int = 0) -> Any:
    """The state before anything was read: ``base`` wrapped once per FlatMapTransform."""
    state: Any = base
    for op in operations:
        if classify(op) == "flat_map":
            state = (state, 0)
    return state


def build_chain(
    operations: tuple[Any, ...], start: Any, allocate: Allocator | None = None
) -> tuple[Any, Sink, int]:
    """Builds the push chain for ``operations`` resuming at ``start``.

    Returns the head stage, the sink that collects outputs, and the base position (sampler
    positions already consumed) where reading resumes. ``allocate``, if given, is used by a Batch
    that is the last operation to write the batch straight into (shared) memory.
    """
    # Unwrap the nested FlatMap states from the outside in: the outermost FlatMap is the last one.
    kinds = [classify(op) for op in operations]
    resume: dict[int, tuple[Any, int]] = {}
    state = start
    for position in range(len(operations) - 1, -1, -1):
        if kinds[position] == "flat_map":
            state, taken = state
            resume[position] = (state, taken)
    base = state
    sink = Sink()
    downstream: Any = sink
    for position in range(len(operations) - 1, -1, -1):
        op, kind = operations[position], kinds[position]
        stage: Any
        if kind == "map":
            stage = MapStage()
            stage.fn = op.map
        elif kind == "random_map":
            stage = RandomMapStage()
            stage.fn = op.random_map
        elif kind == "filter":
            stage = FilterStage()
            stage.fn = op.filter
        elif kind == "flat_map":
            stage = FlatMapStage()
            stage.fn = op.flat_map
            stage.previous, stage.skip = resume[position]
            stage.last_count = stage.skip
        else:
            stage = BatchStage()  # ours or any object with Batch's three fields
            stage.size, stage.drop_remainder, stage.fn = (
                op.batch_size,
                op.drop_remainder,
                op.batch_fn,
            )
            stage.buffer, stage.last_rng = [], None
            last = position == len(operations) - 1
            stage.allocate = allocate if last else None
        stage.op, stage.next = op, downstream
        downstream = stage
    return downstream, sink, base
