"""DataLoader and its iterator: Grain's DataLoader API over one pipeline and two drivers.

The driver is the only difference between ``worker_count=0`` (the pipeline runs in this process)
and ``worker_count>0`` (each worker process runs the same pipeline on every W-th record and the
parent merges their outputs round-robin).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from grainlite.engine.in_process import InProcessStream
from grainlite.engine.iterator import IteratorShell
from grainlite.engine.position import IteratorPosition
from grainlite.engine.preload import preload
from grainlite.errors import (
    GrainliteTypeError,
    GrainliteValueError,
    LoaderClosedError,
    shown,
)
from grainlite.loader.arguments import (
    check_source,
    check_worker_buffer_size,
    read_options_error,
    resolve_shard_options,
    resolve_worker_count,
)
from grainlite.loader.chunk_reads import copy_first_reads, hint_first_keys
from grainlite.loader.pipeline import Pipeline
from grainlite.loader.state import elastic
from grainlite.loader.state.encoding import dump
from grainlite.loader.state.layout import Layout
from grainlite.options import MultiprocessingOptions, ReadOptions
from grainlite.sampling.sharding import ShardOptions
from grainlite.stats.counters import ParentCounters
from grainlite.transforms.base import classify

if TYPE_CHECKING:
    from grainlite.stats.report import Stats


class DataLoader:
    """Reads records chosen by a sampler from a data source, transforms and batches them.

    Every argument is keyword-only, as in Grain. ``worker_count=0`` runs the pipeline in this
    process; ``worker_count=N`` runs it in N worker processes (``None``: one per CPU this process
    may use, see :func:`~grainlite.cpus.usable_cpu_count`), each keeping up to
    ``worker_buffer_size`` finished elements ready (0 works as 1). ``shard_options`` defaults to the
    sampler's own. ``read_options`` sets the reader threads of each process.
    ``enable_profiling=True`` logs each iterator's :meth:`~DataLoaderIterator.stats` table and
    diagnosis through ``logging`` (logger ``grainlite.stats``) every few seconds and at the end.
    ``len(loader)`` is the number of elements one iteration yields where that is exact (else a
    TypeError says why). ``backend=grainlite.ray.RayWorkers(num_workers=N)`` runs the N
    workers as Ray actors instead of local processes (same elements, order and states; see
    docs/how-to/ray.md); it sets the worker count.
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
        backend: Any = None,
    ) -> None:
        if backend is not None:
            from grainlite.engine import backend as backends

            worker_count = backends.resolve(backend, worker_count, "worker_count")
        worker_count = resolve_worker_count(worker_count)
        if worker_count:
            preload()  # iterating imports nothing: an import can swallow a Ctrl-C
        self._backend = backend
        worker_buffer_size = check_worker_buffer_size(worker_buffer_size)
        check_source(data_source)
        if sampler is None:  # a ValueError, as Grain raises for it
            raise GrainliteValueError(
                "sampler is None; the DataLoader needs one to know which records to read: pass "
                "sampler=grain.IndexSampler(num_records=len(source), shard_options="
                "grain.NoSharding(), num_epochs=1) or a grain.SequentialSampler."
            )
        if not hasattr(sampler, "__getitem__"):
            raise GrainliteTypeError(
                f"sampler must define __getitem__(index) -> RecordMetadata, got "
                f"{type(sampler).__name__}; use grain.IndexSampler or grain.SequentialSampler."
            )
        if read_options is None:
            read_options = ReadOptions()
        elif not isinstance(read_options, ReadOptions):
            raise read_options_error(read_options)
        operations = tuple(operations)
        # Classified once, here: raises a clear error for anything that is not a transform.
        steps = tuple((classify(op), op) for op in operations)
        shard = resolve_shard_options(shard_options, sampler)
        self._data_source = data_source
        self._sampler = sampler
        # Grain's private attribute, read by Keras's adapter to rebuild the loader with one more
        # transform: the operations as given, in a new list.
        self._operations = list(operations)
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
            steps=steps,
            shard_index=shard.shard_index,
            shard_count=shard.shard_count,
            read_options=read_options,
        )
        self._layout = Layout.of(
            worker_count,
            sampler,
            data_source,
            self._pipeline.has_flat_map,
            shard.shard_index,
            shard.shard_count,
        )
        # A pipeline that cannot be pickled for the workers raises at the first next(), as in
        # Grain (the workers start there), not here.

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

    def __len__(self) -> int:
        """Elements one full iteration yields (batches after a Batch), counted exactly.

        Raises TypeError when the count is not known in advance: an endless sampler
        (``num_epochs=None``), a sampler without a length, or a Filter, FlatMap or custom
        operation, whose output count depends on the data.
        """
        from grainlite.loader.length import loader_length

        return loader_length(self._pipeline, self._layout.worker_count)

    def __iter__(self) -> DataLoaderIterator:
        """A new iterator from the start; each call starts over.

        With ``worker_count > 0`` the worker processes start here, so their interpreters start
        while the caller does other work before the first ``next()``.
        """
        iterator = DataLoaderIterator(self)
        if self._layout.worker_count > 0:
            copy_first_reads(self._pipeline, self._layout.worker_count, self._data_source)
            # The files first (a remote source downloads them in the background): its whole
            # files, not the workers' start, are what a cold first epoch waits for.
            hint_first_keys(self._sampler, self._data_source)
            iterator._start_early()
        return iterator


class DataLoaderIterator(IteratorShell, Iterator[Any]):
    """Iterates a DataLoader's elements; its position is saved and restored as small JSON.

    Close it (or use it as a context manager) to stop reader threads and worker processes at once;
    garbage collection and interpreter exit do the same as a backstop. ``next()``, the errors that
    stop the stream, ``close()`` and moving to a restored position are the shell both APIs share
    (:class:`~grainlite.engine.iterator.IteratorShell`).
    """

    _stopped_name = "This iterator"
    _restart_hint = "iter(loader)"

    def __init__(self, loader: DataLoader, state: bytes | None = None) -> None:
        self._loader = loader
        self._layout = loader._layout  # this iterator's own after set_num_workers
        self._backend = loader._backend
        self._pipeline = loader._pipeline
        workers = self._layout.workers
        self._init_shell(
            IteratorPosition([self._pipeline.initial_state()] * workers, 0, [False] * workers)
        )
        self._counters = ParentCounters(self._layout.worker_count)  # stats(), across streams
        self._timer: Any = None  # the in-process pipeline's counters (worker_count=0)
        self._profiler: Any = None
        if state is not None:
            self.set_state(state)

    def _start(self) -> Any:
        """A new stream at ``_position``: the pipeline in this thread, or its worker processes."""
        if self._profiler is None and self._loader.multiprocessing_options.enable_profiling:
            from grainlite.stats.profiling import Profiler

            self._profiler = Profiler(self)
        if self._layout.worker_count == 0:
            if self._timer is None:
                self._timer = self._pipeline.make_stats()
            return InProcessStream(self._pipeline, self._position, self._timer, self._counters)
        from grainlite.engine.parent import WorkerStream

        return WorkerStream(
            self._pipeline,
            self._layout.worker_count,
            self._position,
            self._loader.multiprocessing_options.per_worker_buffer_size,
            self._counters,
            backend=self._backend,
        )

    def _closed_error(self) -> BaseException:
        return LoaderClosedError(
            "This iterator was closed; call iter(loader) for a new one, or restore a "
            "saved state into a new iterator with set_state()."
        )

    def _before_start(self) -> None:
        self._counters.start()

    def _worker_backend(self) -> Any:
        return self._backend

    def _after_error(self) -> None:
        self.close()

    def start_prefetch(self) -> None:
        """Starts the worker processes (if any) before the first ``next()``; idempotent.

        ``iter(loader)`` already calls it; after ``set_state`` on a new iterator the running
        workers move to the restored position. Every element is made in a worker process.
        """
        if self._stream is None and not self._closed:
            stream = self._start()
            stream.start()  # closes the stream if it raises
            self._stream = stream

    def get_state(self) -> bytes:
        """The position after the last element returned, as Grain's checkpoint JSON."""
        position = self._stream.position() if self._stream is not None else self._position
        return dump(position, self._layout)

    def set_state(self, state: bytes) -> None:
        """Moves this iterator to a saved position; the next element is the one after it.

        A state saved with another worker count (this host count) is restored elastically: each
        record the old workers had not delivered comes exactly once (the rule is in
        :mod:`grainlite.loader.state.elastic`). Raises CheckpointMismatchError if the state belongs
        to a loader with another sampler or data source, and GrainliteValueError if it is not a
        valid state.
        """
        self._move_to(elastic.restore(state, self._layout, self._pipeline))

    def set_num_workers(self, num_workers: int) -> None:
        """Goes on with ``num_workers`` workers: nothing lost or repeated, no new iterator.

        The iterator takes its state after the last element returned, ends its workers, and
        restores the state onto ``num_workers`` workers by the rules of :meth:`set_state` with
        another worker count (each record the old workers had not delivered comes exactly once,
        in the order of the new count). The new workers start now (local processes, or actors of
        the same ``backend=``, e.g. :class:`grainlite.ray.RayWorkers`, on the cluster's current
        machines) while the caller goes on; the next ``next()`` returns the element after the
        last one returned. ``get_state()`` then records the new count. ``0`` (local workers
        only) runs the pipeline in this process. As :meth:`set_state` does, it moves a stopped
        or closed iterator too.
        """
        count = self._checked_worker_count(num_workers)
        if count == self._layout.worker_count:
            return
        state = self.get_state()
        self._release()  # the old workers end here; the state above is where they stood
        layout = dataclasses.replace(self._layout, worker_count=count)
        position = elastic.restore(state, layout, self._pipeline)
        self._layout = layout
        if self._backend is not None:
            self._backend = copy.copy(self._backend)
            self._backend.num_workers = count
        self._counters.worker_count = count
        self._counters.workers.clear()  # the old workers' snapshots
        if count:
            preload()
        self._move_to(position)
        if count:
            self._start_early()

    def _checked_worker_count(self, num_workers: Any) -> int:
        least = 1 if self._backend is not None else 0
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < least:
            backend = f" with backend={self._backend!r}" if self._backend is not None else ""
            raise GrainliteValueError(
                f"set_num_workers(num_workers=...) needs an int >= {least}{backend}, got "
                f"{shown(num_workers)}."
            )
        return num_workers

    def restore_hosts(self, documents: dict[int, Any], hosts: int) -> None:
        """Moves to this host's part of what ``hosts`` hosts left unread: ``documents`` holds each
        saving host's state (its file's parsed JSON) by host index. The Orbax handler calls it
        when the JAX process count changed since the save."""
        self._move_to(elastic.restore_hosts(documents, hosts, self._layout, self._pipeline))

    def stats(self) -> Stats:
        """Where this iterator's time went: per stage, the consumer's wait, and a diagnosis.

        ``print(iterator.stats())`` shows a table; ``.to_dict()`` gives JSON-able numbers;
        ``.diagnosis`` names the bottleneck and the option to change. Cheap to call at any time.
        """
        from grainlite.stats.loader_stats import loader_stats

        return loader_stats(self._counters, self._timer)

    def _ended(self) -> None:
        self._counters.end()
        if self._profiler is not None:
            self._profiler.stop()

    _at_end = _ended

    def __del__(self) -> None:
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.close()

    def __str__(self) -> str:
        return f"PyGrainDatasetIterator(state={self.get_state().decode()})"
