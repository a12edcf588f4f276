"""DataLoader and its iterator: Grain's DataLoader API over one pipeline and two drivers.

The driver is the only difference between ``worker_count=0`` (the pipeline runs in this process)
and ``worker_count>0`` (each worker process runs the same pipeline on every W-th record and the
parent merges their outputs round-robin).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from grainlite.errors import GrainliteTypeError, GrainliteValueError, LoaderClosedError
from grainlite.loader import state as state_codec
from grainlite.loader.options import MultiprocessingOptions, ReadOptions
from grainlite.loader.pipeline import Pipeline
from grainlite.sampling.sharding import ShardOptions
from grainlite.sources.protocol import source_repr
from grainlite.transforms.base import classify


def _resolve_worker_count(worker_count: int | None) -> int:
    if worker_count is None:
        count = os.cpu_count()
        if count is None:
            raise GrainliteValueError(
                "worker_count=None means one worker per CPU, but os.cpu_count() is unknown on "
                "this machine; pass worker_count=N explicitly."
            )
        return count
    if isinstance(worker_count, bool) or not isinstance(worker_count, int):
        raise GrainliteTypeError(
            f"worker_count must be an int or None, got {worker_count!r}; pass 0 to run in this "
            f"process or N >= 1 for N worker processes."
        )
    if worker_count < 0:
        raise GrainliteValueError(
            f"Worker count should be greater than or equal zero. Current worker_count is "
            f"{worker_count}; pass 0 to run in this process or N >= 1 for N worker processes."
        )
    return worker_count


def _resolve_shard_options(shard_options: ShardOptions | None, sampler: Any) -> ShardOptions:
    if shard_options is not None:
        if not isinstance(shard_options, ShardOptions):
            raise GrainliteTypeError(
                f"shard_options must be a ShardOptions (or NoSharding / ShardByJaxProcess), got "
                f"{shard_options!r}."
            )
        return shard_options
    inherited = getattr(sampler, "_shard_options", None)
    if isinstance(inherited, ShardOptions):
        return inherited
    raise GrainliteValueError(
        "No shard options were provided to the DataLoader. Please pass shard options to the "
        "DataLoader: a custom sampler carries no sharding, so pass "
        "shard_options=grain.NoSharding() (one host) or grain.ShardByJaxProcess() (one shard per "
        "JAX process)."
    )


def _check_source(data_source: Any) -> None:
    if not (hasattr(data_source, "__len__") and hasattr(data_source, "__getitem__")):
        raise GrainliteTypeError(
            f"data_source must be random-access (define __len__ and __getitem__), got "
            f"{type(data_source).__name__}; wrap the data in a list, an ArrayRecordDataSource "
            f"or an InMemoryDataSource."
        )


class DataLoader:
    """Reads records chosen by a sampler from a data source, transforms and batches them.

    Every argument is keyword-only, as in Grain. ``worker_count=0`` runs the pipeline in this
    process; ``worker_count=N`` runs it in N worker processes (``None``: one per CPU), each keeping
    up to ``worker_buffer_size`` finished elements ready. ``shard_options`` defaults to the
    sampler's own. ``read_options`` sets the reader threads of each process. ``enable_profiling`` is
    accepted for compatibility; per-stage timings are always available from the iterator.
    """

    def __init__(
        self,
        *,
        data_source: Any,
        sampler: Any,
        operations: Sequence[Any] = (),
        worker_count: int | None = 0,
        worker_buffer_size: int = 1,
        shard_options: ShardOptions | None = None,
        read_options: ReadOptions | None = None,
        enable_profiling: bool = False,
    ) -> None:
        worker_count = _resolve_worker_count(worker_count)
        if isinstance(worker_buffer_size, bool) or not isinstance(worker_buffer_size, int):
            raise GrainliteTypeError(
                f"worker_buffer_size must be an int, got {worker_buffer_size!r}; pass N >= 1."
            )
        if worker_buffer_size < 0:
            raise GrainliteValueError(
                f"Worker buffer size must be greater than or equal zero. Current "
                f"worker_buffer_size is {worker_buffer_size}; pass N >= 1."
            )
        _check_source(data_source)
        if not hasattr(sampler, "__getitem__"):
            raise GrainliteTypeError(
                f"sampler must define __getitem__(index) -> RecordMetadata, got "
                f"{type(sampler).__name__}; use grain.IndexSampler or grain.SequentialSampler."
            )
        if read_options is None:
            read_options = ReadOptions()
        elif not isinstance(read_options, ReadOptions):
            raise GrainliteTypeError(f"read_options must be a ReadOptions, got {read_options!r}.")
        operations = tuple(operations)
        for op in operations:
            classify(op)  # raises a clear error for anything that is not a transform
        shard = _resolve_shard_options(shard_options, sampler)
        self._data_source = data_source
        self._sampler = sampler
        self._operations = operations
        self._shard_options = shard
        self._read_options = read_options
        self._multiprocessing_options = MultiprocessingOptions(
            num_workers=worker_count,
            per_worker_buffer_size=worker_buffer_size,
            enable_profiling=enable_profiling,
        )
        self._pipeline = Pipeline(
            source=data_source,
            sampler=sampler,
            operations=operations,
            shard_index=shard.shard_index,
            shard_count=shard.shard_count,
            read_options=read_options,
        )
        self._layout = state_codec.Layout(
            worker_count=worker_count,
            shard_index=shard.shard_index,
            shard_count=shard.shard_count,
            sampler_repr=repr(sampler),
            source_repr=source_repr(data_source),
            flat_map=self._pipeline.has_flat_map,
        )
        if worker_count > 0:
            from grainlite.loader.workers import check_picklable

            check_picklable(self._pipeline)

    @property
    def multiprocessing_options(self) -> MultiprocessingOptions:
        """The process settings, as Grain reports them."""
        return self._multiprocessing_options

    @property
    def read_options(self) -> ReadOptions:
        """The reader settings of each process."""
        return self._read_options

    @property
    def shard_options(self) -> ShardOptions:
        """Which shard of the stream this host reads."""
        return self._shard_options

    def __iter__(self) -> DataLoaderIterator:
        """A new iterator from the start; each call starts over."""
        return DataLoaderIterator(self)


class DataLoaderIterator(Iterator[Any]):
    """Iterates a DataLoader's elements; its position is saved and restored as small JSON.

    Close it (or use it as a context manager) to stop reader threads and worker processes at once;
    garbage collection and interpreter exit do the same as a backstop.
    """

    def __init__(self, loader: DataLoader, state: bytes | None = None) -> None:
        self._loader = loader
        self._layout = loader._layout
        self._pipeline = loader._pipeline
        workers = self._layout.workers
        self._position = state_codec.IteratorPosition(
            [self._pipeline.initial_state()] * workers, 0, [False] * workers
        )
        self._stream: Any = None
        self._closed = False
        if state is not None:
            self.set_state(state)

    def _start(self) -> Any:
        if self._layout.worker_count == 0:
            return _InProcessStream(self._pipeline, self._position)
        from grainlite.loader.workers import WorkerStream

        return WorkerStream(self._pipeline, self._layout, self._position, self._loader)

    def __next__(self) -> Any:
        stream = self._stream
        if stream is None:
            if self._closed:
                raise LoaderClosedError(
                    "This iterator was closed; call iter(loader) for a new one, or restore a "
                    "saved state into a new iterator with set_state()."
                )
            stream = self._stream = self._start()
        return stream.next()

    def start_prefetch(self) -> None:
        """Starts reading (and worker processes) before the first ``next()``; idempotent."""
        if self._stream is None and not self._closed:
            self._stream = self._start()
            self._stream.start()

    def get_state(self) -> bytes:
        """The position after the last element returned, as Grain's checkpoint JSON."""
        position = self._stream.position() if self._stream is not None else self._position
        return state_codec.encode(position, self._layout)

    def set_state(self, state: bytes) -> None:
        """Moves this iterator to a saved position; the next element is the one after it.

        Raises CheckpointMismatchError if the state belongs to a loader with another worker
        count, sampler or data source, and GrainliteValueError if it is not a valid state.
        """
        flat_maps = sum(classify(op) == "flat_map" for op in self._pipeline.operations)
        position = state_codec.decode(state, self._layout, flat_maps)
        self._position = position
        if self._stream is not None:
            if getattr(self._stream, "alive", False):
                self._stream.restart(position)  # running workers move; no new processes
                return
            self._stream.close()
            self._stream = None
        self._closed = False

    def close(self) -> None:
        """Stops all background work now and releases its resources. Safe to call twice."""
        if self._stream is not None:
            self._position = self._stream.position()
            self._stream.close()
            self._stream = None
        self._closed = True

    def __enter__(self) -> DataLoaderIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.close()

    def __str__(self) -> str:
        return f"PyGrainDatasetIterator(state={self.get_state().decode()})"


class _InProcessStream:
    """The driver for ``worker_count=0``: the pipeline runs in the calling thread."""

    def __init__(self, pipeline: Pipeline, position: state_codec.IteratorPosition) -> None:
        self._state = position.states[0]
        self._generator = pipeline.iterate(0, 1, self._state)

    def start(self) -> None:
        pass

    def next(self) -> Any:
        element, self._state = next(self._generator)
        return element

    def position(self) -> state_codec.IteratorPosition:
        return state_codec.IteratorPosition([self._state], 0, [False])

    def close(self) -> None:
        self._generator.close()
