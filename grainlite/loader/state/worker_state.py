"""One worker's state: its position, and what it carries after a restore or a failure.

A worker's position is what its stages write after each element (see
:mod:`grainlite.loader.stages`): an ``int`` (sampler positions consumed in its slice) or, below
FlatMapTransforms, Grain's nested tuple ``((...(n, t1), ...), tk)``. That bare form costs nothing
per element, and it is the state of almost every element. A worker that carries more is a
:class:`WorkerState`, the one typed form of a worker's state: its innermost position, the FlatMap
outputs taken, its :class:`Plan` of holes (after an elastic restore) and the failures to drop
(after a failure overtook elements a Batch held). The checkpoint codec and the elastic restore
read and write only :class:`WorkerState`; :meth:`WorkerState.of` gives it for any state and
:meth:`WorkerState.compact` the bare form again where nothing more is carried.

**Holes.** After a restore into another layout (see :mod:`grainlite.loader.state.elastic`) a worker
owns a list of "holes": sampler indices the old layout had not delivered, below the point from
which every index is undelivered. It reads them first, in the order given, then goes on with its
native indices (those it would read in a fresh run) from that point on. A hole may carry a
FlatMap "skip" (outputs of that record delivered before the save): the FlatMapTransform at each
level drops that many outputs of the record. Once every hole is read the state is an ordinary
position again, so the checkpoint is plain Grain v2 again. Holes take the positions right before
the first native position read (see :class:`~grainlite.loader.striding.WorkerSlice`), which is
what makes that hand-over free.

**Failures to drop.** A failed element takes its element's place and its state says "go on after
it". When the failure overtook elements a Batch still holds, positions alone cannot say that, so
the state keeps the position of the last delivered element plus the failures to drop when they
come again (see :mod:`grainlite.loader.pipeline`).

A leaf of the state package: it imports no pipeline, stage or codec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grainlite.checks import invalid_state
from grainlite.errors import GrainliteValueError
from grainlite.loader.striding import WorkerSlice


def bad(what: str) -> GrainliteValueError:
    """The error for a DataLoader state this package cannot read: ``what`` is wrong with it."""
    return invalid_state(
        what, "Pass the bytes returned by get_state() of a loader with the same settings."
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """One worker's holes.

    Attributes:
      head: the hole indices, in reading order.
      head_start: the position of the first hole (the native position of the first tail index
        minus ``len(head)``).
      skips: ``(position, skips)`` for holes whose record was partly delivered: per FlatMap level
        (innermost first), how many of the record's outputs at that level to drop.
    """

    head: tuple[int, ...]
    head_start: int
    skips: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def tail_start(self) -> int:
        """The first native position, read after every hole."""
        return self.head_start + len(self.head)

    def slice(self, native: WorkerSlice) -> WorkerSlice:
        """``native`` with the holes read before its tail."""
        return WorkerSlice(native.first, native.stride, native.end, self.head, self.head_start)


def position_of(state: Any) -> int:
    """The position reading resumes at (the innermost of a nested state) for any worker state."""
    if state.__class__ is WorkerState:
        return state.position
    while state.__class__ is tuple:
        state = state[0]
    return int(state)


def nest(takens: tuple[int, ...] | list[int], base: int) -> Any:
    """The nested FlatMap state at ``base`` with ``takens`` outputs taken, innermost first."""
    state: Any = base
    for taken in takens:
        state = (state, taken)
    return state


def takens_of(state: Any) -> tuple[int, ...]:
    """The FlatMap output counts of a worker state, innermost first (empty for a position)."""
    if state.__class__ is WorkerState:
        return state.takens
    out: list[int] = []
    while state.__class__ is tuple:
        state, taken = state
        out.append(taken)
    return tuple(reversed(out))


@dataclass(frozen=True, slots=True)
class WorkerState:
    """One worker's state, typed (see the module doc).

    Attributes:
      position: the worker position reading resumes at (the innermost level of a nested state).
      takens: per FlatMap level, innermost first, the outputs already taken from the input that
        level reads; empty without a FlatMapTransform.
      plan: the holes still to read after an elastic restore, or None.
      skipped: ``(position, state)`` of each failure already delivered in the place of an element
        that a Batch held back: the worker position of the record it came from (in the slice the
        plan reads, if any), and the failed element's own state, which tells it from other
        failures of that record.
    """

    position: int
    takens: tuple[int, ...] = ()
    plan: Plan | None = None
    skipped: tuple[tuple[int, Any], ...] = ()

    @staticmethod
    def of(state: Any) -> WorkerState:
        """The typed form of any worker state (a bare position or a WorkerState)."""
        if state.__class__ is WorkerState:
            return state  # type: ignore[no-any-return]
        return WorkerState(position_of(state), takens_of(state))

    @property
    def nested(self) -> Any:
        """The position as the stages write it: an int, or Grain's nested FlatMap tuple."""
        return nest(self.takens, self.position)

    def compact(self) -> Any:
        """This state as a worker carries it: the bare position when nothing more is carried."""
        return self.nested if self.plan is None and not self.skipped else self

    def slice(self, native: WorkerSlice) -> WorkerSlice:
        """What this worker reads: ``native``, with the plan's holes first if there are any."""
        return native if self.plan is None else self.plan.slice(native)


def wrap(plan: Plan | None, state: Any) -> Any:
    """``state`` as the worker reports it: with ``plan`` while holes remain."""
    if plan is None or position_of(state) >= plan.tail_start:
        return state
    if state.__class__ is WorkerState:
        return WorkerState(state.position, state.takens, plan, state.skipped)
    return WorkerState(position_of(state), takens_of(state), plan)


def with_skipped(state: Any, skipped: tuple[tuple[int, Any], ...]) -> Any:
    """``state`` (a bare position) carrying the failures ``skipped`` to drop."""
    return WorkerState(position_of(state), takens_of(state), None, skipped)


def armed_push(
    push: Callable[[Any, Any, Any], None], chain: Any, plan: Plan
) -> Callable[[Any, Any, Any], None]:
    """``push`` that arms the FlatMap skips of the holes that have some (see the module doc).

    A record's skips and those of the restored position (when reading resumes inside that
    record) are two places in it, compared innermost level first: the one further on applies.
    The hole's skips are cleared after the record (a level it sent no input never uses its
    skip), so they never reach another record; the restored position's skips, when further on,
    stay until an input reaches their level, as after any restore.
    """
    stages = []
    stage = chain
    while stage is not None and hasattr(stage, "next"):
        if hasattr(stage, "skip"):  # a FlatMap stage, innermost first
            stages.append(stage)
        stage = stage.next
    armed = dict(plan.skips)

    def push_armed(value: Any, rng: Any, count: Any) -> None:
        skips = armed.get(count - 1)
        if skips is None:
            push(value, rng, count)
            return
        restored = tuple(stage.skip for stage in stages)
        if restored >= skips:  # the restored position is as far into this record, or further
            push(value, rng, count)
            return
        for stage, skip in zip(stages, skips):
            stage.skip = skip
        push(value, rng, count)
        for stage in stages:  # a level this record sent no input: its skip is moot
            stage.skip = 0

    return push_armed
