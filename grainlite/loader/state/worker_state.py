"""A worker's stream after an elastic restore: its holes first, then its native tail.

After a restore into another layout (see :mod:`grainlite.loader.state.elastic`) a worker owns a list
of "holes": sampler indices the old layout had not delivered, below the point from which every
index is undelivered. It reads them first, in the order given, then goes on with its native
indices (those it would read in a fresh run) from that point on. A hole may carry a FlatMap
"skip" (outputs of that record delivered before the save): the FlatMapTransform at each level
drops that many outputs of the record.

The worker's state is a :class:`Resuming` (the :class:`Plan` plus the ordinary position) until
every hole is read; from then on it is an ordinary position, so the checkpoint is plain Grain v2
again. Holes take the positions right before the first native position read (see
:class:`~grainlite.loader.striding.WorkerSlice`), which is what makes that hand-over free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grainlite.loader.striding import WorkerSlice


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


@dataclass(frozen=True, slots=True)
class Resuming:
    """The state of a worker that still has holes to read: its plan and its position."""

    plan: Plan
    state: Any


def innermost(state: Any) -> int:
    """The position reading resumes at, for a position, a nested FlatMap state or a Skipping."""
    state = getattr(state, "state", state)  # a Skipping's position
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
    """The FlatMap output counts of a nested state, innermost first (empty for a position)."""
    state = getattr(state, "state", state)  # a Skipping's position
    out: list[int] = []
    while state.__class__ is tuple:
        state, taken = state
        out.append(taken)
    return tuple(reversed(out))


def wrap(plan: Plan | None, state: Any) -> Any:
    """``state`` as the worker reports it: a :class:`Resuming` while holes remain."""
    if plan is None or innermost(state) >= plan.tail_start:
        return state
    return Resuming(plan, state)


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
