"""``IterDataset.mp_prefetch``: the pipeline runs in grainlite's worker processes.

``num_workers=W`` starts W worker processes of grainlite's engine (:mod:`grainlite.engine`, the
DataLoader's: shared-memory transport for numpy arrays, credits per ``per_worker_buffer_size``,
leak-free shutdown). Worker ``w`` runs the pipeline restricted to its share of the elements
(:mod:`grainlite.dataset.mp.slicing`); the parent takes one element from each worker in turn,
skipping finished workers, which is Grain's order. ``num_workers=0`` iterates the pipeline in this
process (the iterator is the pipeline's own, as in Grain).

The state has the shape of Grain's (an interleave over the workers' iterators)::

    {"next_index_in_cycle": w, "next_index_in_datasets": W, "iterators_in_use_indices": [0..W-1],
     "iterators_in_use_states": [state of each worker's iterator], "exhausted": [0 or 1 each],
     "future_states": {}}

so a state saved by Grain restores here and the other way round. ``set_state`` on a running
iterator moves its workers without starting new processes.

Where it differs from Grain: an exception raised in a worker is re-raised at that element's place
and the stream goes on after it (Grain ends the failing worker's share); batches with
``drop_remainder=True`` before ``mp_prefetch`` give the batches of one worker (Grain loses
elements, google/grain#1129; the rule is in :mod:`~grainlite.dataset.mp.slicing`); workers
never need absl flags (google/grain#1355) and keep JAX on the CPU (google/grain#820, #1199).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from grainlite.checks import int_option
from grainlite.dataset import element_spec
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.key_hints import hint_first_keys
from grainlite.dataset.mp.first_reads import copy_first_reads
from grainlite.dataset.mp.pipeline import DatasetPipeline
from grainlite.dataset.mp.slicing import check_sliceable, drops_a_partial_batch_per_worker
from grainlite.dataset.mp.state import decode_state, encode_state
from grainlite.dataset.next_index import NoNextIndexError
from grainlite.engine.iterator import IteratorShell
from grainlite.engine.position import IteratorPosition
from grainlite.engine.preload import preload
from grainlite.errors import GrainliteRuntimeError, GrainliteValueError, shown
from grainlite.options import MultiprocessingOptions
from grainlite.stats.counters import ParentCounters

# Grain's mp_prefetch() without options runs this many workers.
_DEFAULT_WORKERS = 10


def _check_options(options: Any) -> Any:
    """``options`` if its two counts are ints >= 0 (:func:`grainlite.checks.int_option`'s rule).

    Any object with ``num_workers`` and ``per_worker_buffer_size`` is taken (Grain's own
    ``MultiprocessingOptions`` too, which checks nothing); one holding numpy integers comes back
    as a grainlite ``MultiprocessingOptions`` of the same values, so states hold plain ints.
    """
    if options is None:
        return MultiprocessingOptions(num_workers=_DEFAULT_WORKERS)
    fix = (
        "pass grain.MultiprocessingOptions(num_workers=N, per_worker_buffer_size=M) with "
        "N >= 0 and M >= 0."
    )
    counts = {}
    for name in ("num_workers", "per_worker_buffer_size"):
        value = getattr(options, name, None)
        counts[name] = int_option(
            value,
            0,
            wrong_type=f"mp_prefetch options must be a MultiprocessingOptions with an int {name} "
            f">= 0, got {{type}} {{value}}; {fix}",
            too_small=f"mp_prefetch options {name} must be greater than or equal to 0, got "
            f"{{value}}; {fix}",
        )
    if all(type(getattr(options, name)) is int for name in counts):
        return options
    return MultiprocessingOptions(
        **counts, enable_profiling=getattr(options, "enable_profiling", False)
    )


class MultiprocessPrefetchIterDataset(IterDataset):
    """Runs ``parent`` in worker processes and interleaves their elements round-robin.

    Args:
      parent: the pipeline to run; it is cloudpickled to each worker.
      multiprocessing_options: ``num_workers`` (0: in this process) and
        ``per_worker_buffer_size`` (finished elements each worker keeps ready; 0 works as 1).
        ``None`` gives Grain's default of 10 workers.
      worker_init_fn: called as ``worker_init_fn(worker_index, worker_count)`` once in each worker
        process before its first element.
      sequential_slice: give worker ``w`` the ``w``-th contiguous range of the elements instead
        of every ``W``-th element.
      backend: who runs the workers: None for local processes, or e.g.
        ``grainlite.ray.RayWorkers(num_workers=N)`` for Ray actors (it sets the worker count;
        ``multiprocessing_options`` then gives only the buffer size).
    """

    _element_spec = property(element_spec.first_parent_spec)

    # As in Grain, a ds.seed(...) below the workers does not reach random nodes after them.
    hides_upstream_seeds = True

    def __init__(
        self,
        parent: IterDataset,
        multiprocessing_options: Any = None,
        worker_init_fn: Callable[[int, int], None] | None = None,
        sequential_slice: bool = False,
        backend: Any = None,
    ) -> None:
        super().__init__(parent)
        if backend is not None:
            from grainlite.engine import backend as backends

            given = getattr(multiprocessing_options, "num_workers", None)
            count = backends.resolve(backend, given, "num_workers")
            if multiprocessing_options is None:
                multiprocessing_options = MultiprocessingOptions(num_workers=count)
        self._options = _check_options(multiprocessing_options)
        if backend is not None and self._options.num_workers == 0:
            self._options = MultiprocessingOptions(
                num_workers=backend.num_workers,
                per_worker_buffer_size=self._options.per_worker_buffer_size,
                enable_profiling=getattr(self._options, "enable_profiling", False),
            )
        self._backend = backend
        self._worker_init_fn = worker_init_fn
        self._sequential_slice = bool(sequential_slice)
        if self._options.num_workers:
            preload()  # iterating imports nothing: an import can swallow a Ctrl-C

    @property
    def multiprocessing_options(self) -> Any:
        """The process settings."""
        return self._options

    def __iter__(self) -> DatasetIterator:
        """The pipeline's own iterator with ``num_workers=0``; otherwise an iterator whose
        worker processes start now, so their interpreters start while the caller does other
        work before the first ``next()`` (as the DataLoader's ``iter()`` does)."""
        if self._options.num_workers == 0:
            return self._parent.__iter__()
        iterator = MultiprocessPrefetchDatasetIterator(self)
        iterator._start_early()
        return iterator

    def __str__(self) -> str:
        return f"MultiprocessPrefetchIterDataset(multiprocessing_options={self._options})"


def deprecated_prefetch(ds: IterDataset, multiprocessing_options: Any) -> IterDataset:
    """``ds.prefetch(options)``: Grain's old name for ``mp_prefetch``; warns as Grain does."""
    warnings.warn("Please use `mp_prefetch` instead.", DeprecationWarning, stacklevel=3)
    return MultiprocessPrefetchIterDataset(ds, multiprocessing_options)


class MultiprocessPrefetchDatasetIterator(IteratorShell, DatasetIterator):
    """The parent's side of ``mp_prefetch``: worker processes, their merge order, the state.

    Workers start at ``iter()`` (a start that fails there, such as a pipeline that cannot be
    pickled, is raised by the first ``next()``); they end on :meth:`close`, at the end of the stream
    (unless a ``repeat`` above will start another epoch: :meth:`keep_workers_at_end`), on
    an error the stream cannot go on after, on Ctrl-C and when the iterator is garbage collected
    (the engine's process group finalizer: no ``__del__`` here). What no handler covers: a
    SIGKILL of this process; its workers then exit when their socket closes. ``next()``, the
    errors that stop the stream, ``close()`` and moving to a state are the shell both APIs
    share (:class:`~grainlite.engine.iterator.IteratorShell`).
    """

    _stopped_name = "This mp_prefetch iterator"
    _restart_hint = "iter(dataset)"

    def __init__(self, dataset: MultiprocessPrefetchIterDataset) -> None:
        super().__init__()
        self._dataset = dataset
        self._workers = dataset.multiprocessing_options.num_workers
        check_sliceable(dataset._parent, self._workers)
        if drops_a_partial_batch_per_worker(dataset._parent, self._workers):
            warnings.warn(
                f"mp_prefetch with {self._workers} workers over a batch(drop_remainder=True) "
                "that a filter, flat map or custom node feeds: each worker drops its own partial "
                f"batch, so up to {self._workers - 1} more partial batches are lost than with one "
                "worker. Move the batch after mp_prefetch (ds.mp_prefetch(...).batch(n, "
                "drop_remainder=True)) to lose only the stream's last partial batch.",
                stacklevel=3,
            )
        self._pipeline = DatasetPipeline(
            dataset._parent, dataset._sequential_slice, dataset._worker_init_fn
        )
        self._initial: list[Any] = [None] * self._workers
        self._init_shell(IteratorPosition([None] * self._workers, 0, [False] * self._workers))
        self._keep_at_end = False  # see keep_workers_at_end
        self._stats_counters = ParentCounters(self._workers)  # stats(): kept across streams

    def _start(self) -> Any:
        from grainlite.engine.parent import WorkerStream

        self._stats_counters.start()
        fresh = all(state is None for state in self._position.states)
        if fresh:  # before the pipeline is pickled for the workers: it names the first copies
            copy_first_reads(self._dataset._parent, self._workers, self._dataset._sequential_slice)
            # then the files (downloaded in the background), before the workers start: a cold
            # first epoch waits for a remote source's whole files, not for the workers' start
            hint_first_keys(self._dataset._parent)
        stream = WorkerStream(
            self._pipeline,
            self._workers,
            self._position,
            self._dataset.multiprocessing_options.per_worker_buffer_size,
            self._stats_counters,
            backend=self._dataset._backend,
        )
        stream.linger_at_end = self._keep_at_end
        return stream

    def _closed_error(self) -> BaseException:
        return GrainliteRuntimeError(
            "This mp_prefetch iterator was closed; call iter(dataset) for a new one, or "
            "set_state(...) to move this one to a saved position and go on from there."
        )

    def _worker_backend(self) -> Any:
        return self._dataset._backend

    def _before_start(self) -> None:
        if all(self._position.exhausted):
            raise StopIteration

    def _at_end(self) -> None:
        if not self._keep_at_end:
            self._release()  # every worker is done: end the processes now
        self._stats_counters.end()

    def _ended(self) -> None:
        self._stats_counters.end()

    def get_state(self) -> dict[str, Any]:
        """Grain's ``mp_prefetch`` state: the merge position and every worker's iterator state."""
        position = self._stream.position() if self._stream is not None else self._position
        states = list(position.states)
        for w, state in enumerate(states):
            if state is None:  # the worker has not delivered yet: its iterator's first state
                states[w] = self._initial_state(w)
        return encode_state(IteratorPosition(states, position.next_worker, position.exhausted))

    def _initial_state(self, worker: int) -> Any:
        """Worker ``worker``'s iterator state before its first element (made once)."""
        if self._initial[worker] is None:
            self._initial[worker] = self._pipeline.initial_state(worker, self._workers)
        return self._initial[worker]

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to ``state`` (from ``get_state`` here or in Grain with the same worker count).
        A damaged field, a worker's entry included, is a ValueError naming it."""
        self._move_to(
            decode_state(
                state,
                self._workers,
                self._initial_state,
                lambda w, entry: self._pipeline.check_state(w, self._workers, entry),
            )
        )

    def set_num_workers(self, num_workers: int) -> None:
        """Refuses another worker count: an ``mp_prefetch`` state holds each worker's own
        iterator state (worker ``w`` reads slice ``w`` of ``num_workers`` of the pipeline), which
        means nothing to another count. The same count is accepted (nothing changes)."""
        if num_workers == self._workers and not isinstance(num_workers, bool):
            return
        raise GrainliteValueError(
            f"set_num_workers({shown(num_workers)}) on an mp_prefetch iterator with "
            f"{self._workers} workers: an mp_prefetch state is one iterator state per worker, "
            f"each over its own slice of the pipeline, so it cannot move onto another worker "
            f"count (Grain's mp_prefetch states need the same count too). To change the count "
            f"while training, load with grain.DataLoader, whose state restores onto any worker "
            f"count (DataLoaderIterator.set_num_workers); or start a new "
            f"mp_prefetch(MultiprocessingOptions(num_workers=N)) pipeline from its beginning."
        )

    def _get_next_index(self) -> int:
        """Grain's ``get_next_index`` hook: with one worker, the index its iterator gives next
        (read from the state; starts nothing)."""
        return int(self._one_worker_index_state(self.get_state())["next_index"])

    def _set_next_index(self, index: int) -> None:
        """Grain's ``set_next_index`` hook: with one worker, moves it to element ``index``."""
        state = self.get_state()
        self._one_worker_index_state(state)
        state["iterators_in_use_states"] = [{"next_index": index}]
        state["exhausted"] = [0]
        state["next_index_in_cycle"] = 0
        self.set_state(state)

    def _one_worker_index_state(self, state: dict[str, Any]) -> dict[str, Any]:
        entries = state["iterators_in_use_states"]
        if (
            self._workers == 1
            and isinstance(entries[0], dict)
            and set(entries[0]) == {"next_index"}
            and self._pipeline.has_next_index()  # a filter's state looks the same but has none
        ):
            return dict(entries[0])
        raise NoNextIndexError(
            f"get_next_index/set_next_index through mp_prefetch need one worker whose pipeline "
            f"has a next index (got {self._workers} workers, worker state {shown(entries[0])}); "
            "with more workers the position is one index per worker: use get_state() / "
            "set_state() instead."
        )

    def keep_workers_at_end(self, keep: bool) -> None:
        """With ``keep``, the worker processes wait at the end of the stream for a ``set_state``
        (which moves them) instead of ending: a ``repeat`` above calls it for every epoch but the
        last, so its epochs reuse the same processes, as Grain's do. They still end on
        :meth:`close`, on an error and when the iterator is garbage collected; ``keep=False``
        ends workers that already wait at the end."""
        self._keep_at_end = bool(keep)
        stream = self._stream
        if stream is None:
            return
        stream.linger_at_end = self._keep_at_end
        if not keep and all(stream.position().exhausted):
            self._release()

    def start_prefetch(self) -> None:
        """Starts the worker processes now, before the first ``next()``, as Grain's iterators
        do; idempotent. A later ``set_state`` moves the running workers."""
        idle = self._stream is None and self._stopped_by is None and not self._closed
        if idle and not all(self._position.exhausted):
            stream = self._start()
            stream.start()  # closes the stream if it raises; every element made in a worker
            self._stream = stream

    def __str__(self) -> str:
        return f"MultiprocessPrefetchDatasetIterator(workers={self._workers})"
