"""The deal: a saved layout's remainder split between the new layout's streams.

Both elastic rules (:mod:`grainlite.loader.state.elastic` and
:mod:`grainlite.loader.state.resharding`) end with a :class:`Remainder`: the holes (records the
saving run had not delivered before the point where every new stream starts its own tail), sorted
in the order they are dealt, and where each new host's tail starts. :func:`deal` turns it into this
host's worker states, by rule 3 of ``docs/how-to/checkpointing.md`` ("Resume with another layout"):
hole ``j`` of ``H`` goes to stream ``(g0 - H + j) mod n``, ``g0`` being the stream whose tail starts
with the smallest index, and each new stream reads its holes in that order, then its tail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grainlite.engine.position import IteratorPosition
from grainlite.loader.stages import initial_state
from grainlite.loader.state.layout import Layout
from grainlite.loader.state.worker_state import Plan, WorkerState, takens_of

# A hole: its sampler index (or foreign code) and the outputs to drop per FlatMap level, or None.
Hole = tuple[int, tuple[int, ...] | None]


@dataclass(frozen=True)
class Remainder:
    """What the saved layout left for the new one.

    Attributes:
      holes: the undelivered records before the tails, in dealing order.
      tails: per new host ``s'``, the index its tail starts from: it reads its native indices
        ``>= tails[s']``.
      own: True when each host deals only its own holes among its own workers (the same host
        count); False when all hosts' holes are dealt among all ``S' * max(W', 1)`` streams.
      key: orders hole indices as ``holes`` is sorted (for the first worker to read).
    """

    holes: list[Hole]
    tails: tuple[int, ...]
    own: bool
    key: Callable[[int], Any] = int


def _first_tail(remainder: Remainder, host: int, hosts: int) -> int:
    """The first native index of ``host`` at or after its tail bound."""
    bound = remainder.tails[host]
    return bound + (host - bound) % hosts


def deal(remainder: Remainder, layout: Layout, pipeline: Any) -> IteratorPosition:
    """This host's worker states: its share of the holes, then its tail."""
    s, hosts, workers = layout.shard_index, layout.shard_count, layout.workers
    if remainder.own:  # this host's own holes, among its own workers w'
        streams, mine = workers, list(range(workers))
        g0 = (_first_tail(remainder, s, hosts) - s) // hosts % workers
    else:  # every host's holes, among all streams g = s' + S'*w'
        streams, mine = hosts * workers, [s + hosts * w for w in range(workers)]
        first = min(range(hosts), key=lambda h: _first_tail(remainder, h, hosts))
        g0 = first + hosts * ((_first_tail(remainder, first, hosts) - first) // hosts % workers)
    holes = remainder.holes
    offset = (g0 - len(holes)) % streams  # so the last hole's stream is followed by g0's
    states: list[Any] = []
    firsts = []
    for w, g in enumerate(mine):
        native = pipeline.worker_slice(w, workers)
        tail_start = max(0, -(-(remainder.tails[s] - native.first) // native.stride))
        own = holes[(g - offset) % streams :: streams]
        start = tail_start - len(own)
        firsts.append((0, remainder.key(own[0][0])) if own else (1, native.index(tail_start)))
        if not own:
            states.append(initial_state(pipeline.steps, tail_start))
            continue
        skips = tuple((start + p, skip) for p, (_, skip) in enumerate(own) if skip is not None)
        plan = Plan(tuple(i for i, _ in own), start, skips)
        states.append(WorkerState(start, takens_of(initial_state(pipeline.steps, start)), plan))
    # Reading starts at the worker with the smallest first index: a 1:1 pipeline on one host then
    # delivers the remainder in index order, as Grain delivers a fresh run.
    first_worker = firsts.index(min(firsts)) if layout.worker_count else 0
    return IteratorPosition(states, first_worker, [False] * workers)
