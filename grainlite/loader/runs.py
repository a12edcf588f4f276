"""Runs: the elements of a batch mapped in one tight loop, instead of pushed one at a time.

The push chain (:mod:`grainlite.loader.stages`) costs a few Python calls per element. For small
elements that is a large part of the work, so the commonest pipeline, one Map or RandomMap then the
default Batch, takes a shortcut: the records that complete the batch being filled are mapped in
one loop and added to it at once. The result is exactly the chain's: the same calls of the
transform with the same arguments, in the same order, the same batches and states, the same
failures in the same places (a run stops right after a failure, so the driver names its record).

The first element of every batch still goes through the chain alone (it decides whether the
batch is filled row by row, :mod:`grainlite.transforms.batch_rows`), and so does every element
timed for the stats.
"""

from __future__ import annotations

from typing import Any

from grainlite.engine.failures import fail
from grainlite.loader.stages import BatchStage, MapStage, RandomMapStage, Sink
from grainlite.sampling.rng import record_rng as make_rng


class MappedRuns:
    """The shortcut for a chain ``Map|RandomMap -> Batch`` (default batch function, last)."""

    __slots__ = ("batch", "fn", "name", "random")

    def __init__(self, head: Any, batch: BatchStage) -> None:
        self.fn = head.fn
        self.name = head.name
        self.random = type(head) is RandomMapStage
        self.batch = batch

    @classmethod
    def of(cls, head: Any) -> MappedRuns | None:
        """The shortcut for the chain starting at ``head``, or None if it is another shape."""
        if type(head) not in (MapStage, RandomMapStage):
            return None
        batch = head.next
        if type(batch) is not BatchStage or batch.fn is not None or type(batch.next) is not Sink:
            return None
        return cls(head, batch)

    def room(self, available: int, before_sample: int) -> int:
        """How many of the ``available`` records can go in one run now (0: push the next alone)."""
        batch = self.batch
        if batch.rows is not None or not batch.buffer:
            return 0
        return min(available, before_sample, batch.size - len(batch.buffer))

    def run(
        self, data: list[Any], rngs: list[Any] | None, start: int, take: int, count: int
    ) -> int:
        """Maps ``data[start:start + take]`` (positions ``count + 1`` on) into the batch.

        Returns how many records it used: ``take``, or fewer when one failed (it is the last).
        """
        fn = self.fn
        values = data[start : start + take]
        out: list[Any] = []
        append = out.append
        failure: Exception | None = None
        if self.random:
            seeds = [None] * take if rngs is None else rngs[start : start + take]
            try:
                for value, seed in zip(values, seeds, strict=True):
                    append(fn(value, make_rng(seed) if seed.__class__ is int else seed))
            except Exception as error:
                failure = error
        else:
            try:
                for value in values:
                    append(fn(value))
            except Exception as error:
                failure = error
        done = len(out)
        batch = self.batch
        buffer = batch.buffer
        buffer.extend(out)
        if len(buffer) == batch.size:
            batch.buffer = []
            batch.next.push(batch.stack(buffer), None, count + done)
        if failure is None:
            return done
        batch.push(fail(failure, self.name), None, count + done + 1)
        return done + 1
