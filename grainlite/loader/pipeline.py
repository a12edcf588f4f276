"""One process's pipeline: read, transform, batch. The same code runs in the calling process
(``worker_count=0``) and in each worker process; only the driver around it differs.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from grainlite.loader.options import ReadOptions
from grainlite.loader.reader import RecordReader, WorkerSlice
from grainlite.loader.stages import Allocator, build_chain, initial_state
from grainlite.transforms.base import classify


@dataclass(frozen=True)
class Pipeline:
    """Everything a process needs to produce its share of the elements; pickled to workers.

    Attributes:
      source: the random-access data source.
      sampler: maps a global index to a record key (and rng).
      operations: the transforms, in order.
      shard_index: this host's shard.
      shard_count: how many hosts share the stream.
      read_options: reader threads and read-ahead per process.
    """

    source: Any
    sampler: Any
    operations: tuple[Any, ...]
    shard_index: int
    shard_count: int
    read_options: ReadOptions

    @property
    def has_flat_map(self) -> bool:
        """True when a FlatMapTransform is present: then states use Grain's nested format."""
        return any(classify(op) == "flat_map" for op in self.operations)

    def initial_state(self) -> Any:
        """One worker's state before it has read anything."""
        return initial_state(self.operations)

    def worker_slice(self, worker: int, workers: int) -> WorkerSlice:
        """The global indices worker ``worker`` of ``workers`` (>= 1) reads on this host."""
        return WorkerSlice.of(self.sampler, self.shard_index, self.shard_count, worker, workers)

    def iterate(
        self, worker: int, workers: int, start: Any, allocate: Allocator | None = None
    ) -> Generator[tuple[Any, Any], None, None]:
        """Yields ``(element, state after it)`` for worker ``worker`` of ``workers`` from ``start``.

        ``start`` is a state as yielded before (or :meth:`initial_state`); iteration resumes right
        after the element that state was yielded with.
        """
        head, sink, base = build_chain(self.operations, start, allocate)
        reader = RecordReader(
            self.sampler, self.source, self.worker_slice(worker, workers), base, self.read_options
        )
        out = sink.out
        push = head.push
        count = base
        try:
            # Elements leave as soon as they are made: the first one is not held back by the
            # rest of its chunk, and an error raised by a record arrives after every element
            # made before it.
            for rngs, data in reader:
                if rngs is None:
                    for value in data:
                        count += 1
                        push(value, None, count)
                        if out:
                            yield from out
                            out.clear()
                else:
                    for value, rng in zip(data, rngs):
                        count += 1
                        push(value, rng, count)
                        if out:
                            yield from out
                            out.clear()
            head.flush(count)
            yield from out
            out.clear()
        finally:
            reader.close()
