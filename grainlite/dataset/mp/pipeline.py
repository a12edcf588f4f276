"""What one ``mp_prefetch`` worker process runs: its share of an ``IterDataset`` pipeline.

The engine (:mod:`grainlite.engine`) runs any :class:`~grainlite.engine.pipeline.WorkerPipeline`;
the DataLoader's is :class:`~grainlite.loader.pipeline.Pipeline`, the Dataset API's is
:class:`DatasetPipeline`. Its stream is the pipeline restricted to
the worker's share (:mod:`grainlite.dataset.mp.slicing`), and each element's state is the
worker iterator's ``get_state()``, the per-worker entry of Grain's ``mp_prefetch`` checkpoint.

An exception raised by ``next()`` takes its element's place (the engine re-raises it in the
parent at that point of the order) and the worker goes on with the next element, as iterating the
same pipeline in one process does; a worker iterator whose position did not move past the failure
(a user's node) cannot go on, so its share ends there, and a note on that error says so.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from grainlite.dataset import reading_process
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.mp.slicing import slice_for_worker
from grainlite.dataset.next_index import NoNextIndexError, get_next_index
from grainlite.dataset.options import in_force, set_options
from grainlite.engine.failures import FailedElement
from grainlite.engine.malloc import keep_freed_memory
from grainlite.engine.pipeline import PipelineBase
from grainlite.stats.collect import IteratorStats
from grainlite.transforms.batch_rows import BatchRows, batch_as_they_come


def _picklable(node: Any) -> bool:
    from grainlite.engine import pickling  # cloudpickle: the parent's only

    try:
        pickling.dumps(node)
    except Exception:
        return False
    return True


def _first_unpicklable(node: Any) -> Any:
    """The node an unpicklable ``node`` fails at: the first one, parents first, whose own
    parents all pickle (so the note names the node that holds the culprit, as Grain's does);
    None when ``node`` itself pickles (then the pipeline's own fields are the culprit)."""
    if _picklable(node):
        return None
    while True:
        broken = [parent for parent in getattr(node, "parents", ()) if not _picklable(parent)]
        if not broken:
            return node
        node = broken[0]


class DatasetPipeline(PipelineBase):
    """An ``IterDataset`` pipeline as the engine runs it in each worker process.

    Args:
      dataset: the pipeline below ``mp_prefetch`` (pickled to the workers with cloudpickle).
      sequential: give each worker a contiguous range instead of every ``W``-th element.
      worker_init_fn: called as ``worker_init_fn(worker, workers)`` once in each worker process,
        before its first element.
    """

    def __init__(
        self,
        dataset: IterDataset,
        sequential: bool = False,
        worker_init_fn: Callable[[int, int], None] | None = None,
    ) -> None:
        self.dataset = dataset
        self.sequential = sequential
        self.worker_init_fn = worker_init_fn
        self._blob: bytes | None = None
        # The DatasetOptions in force where the mp_prefetch iterator was built (set by a
        # WithOptionsIterDataset above it): in force again wherever this pipeline is iterated.
        self.options = set_options()
        self._started = False  # set in the worker: the share is sliced, worker_init_fn ran

    @property
    def batches_last(self) -> bool:
        """True when the last node stacks batches: then they go straight into the worker's
        shared memory (as the DataLoader's last Batch does), not copied there after. That is an
        ``IterDataset.batch`` last, or a ``MapDataset.batch`` that ``to_iter_dataset()`` reads
        last (:class:`_RowsLater`); both with the default batch function."""
        if getattr(self.dataset, "fills_shared_memory", False):
            return True
        return self.dataset.map_batch_read_last() is not None

    def pickled(self) -> bytes:
        """The pipeline, cloudpickled for the workers (once; the error says what cannot travel)."""
        if self._blob is None:
            from grainlite.engine import pickling  # cloudpickle: the parent's only

            try:
                self._blob = pickling.dumps(self)
            except Exception as error:
                culprit = _first_unpicklable(self.dataset)
                if culprit is not None:
                    error.add_note(f"Dataset: {culprit} cannot be pickled!")
                error.add_note(
                    "grainlite: the dataset under mp_prefetch cannot be pickled for the worker "
                    "processes. Make every node and transform picklable with cloudpickle (open "
                    "files and locks lazily, not in __init__), or pass "
                    "MultiprocessingOptions(num_workers=0)."
                )
                raise
        return self._blob

    def _iterator(self, dataset: IterDataset) -> Any:
        """``iter(dataset)`` with the options of the mp_prefetch's consumer in force."""
        with in_force(self.options):
            return dataset.__iter__()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_blob"] = None
        return state

    def worker_dataset(self, worker: int, workers: int) -> IterDataset:
        """A private copy of the pipeline restricted to worker ``worker``'s share, for the
        parent's questions about a worker's iterator (they never touch the user's nodes).

        With one worker the share is the whole pipeline, so a pipeline that cannot be pickled
        (it holds a lock, or a multiprocessing Event that only process inheritance may share)
        is asked itself, as Grain's ``get_state`` asks it: taking or setting a state before the
        worker starts works, and the pickling error comes when the worker starts, as in Grain.
        """
        try:
            blob = self.pickled()
        except Exception:
            if workers != 1:
                raise
            return self.dataset
        dataset: IterDataset = pickle.loads(blob).dataset  # cloudpickle's output
        slice_for_worker(dataset, worker, workers, self.sequential)
        return dataset

    def initial_state(self, worker: int, workers: int) -> Any:
        """The state of worker ``worker`` before its first element (asked for in the parent)."""
        iterator = self._iterator(self.worker_dataset(worker, workers))
        try:
            return iterator.get_state()
        finally:
            iterator.close()

    def check_state(self, worker: int, workers: int, state: Any) -> None:
        """Raises the ValueError of worker ``worker``'s iterator if ``state`` cannot be its
        state, as far as its nodes tell without reading (their ``check_state``, e.g. a FlatMap's
        ``next_index_in_buffer`` against ``max_fan_out``). Asked in the parent; reads nothing."""
        iterator = self._iterator(self.worker_dataset(worker, workers))
        try:
            check = getattr(iterator, "check_state", None)
            if callable(check):
                check(state)
        finally:
            iterator.close()

    def has_next_index(self) -> bool:
        """True when the pipeline's iterator (one worker's) names its position as one element
        index (Grain's ``get_next_index``); asked in the parent, reads nothing."""
        iterator = self._iterator(self.worker_dataset(0, 1))
        try:
            get_next_index(iterator)
        except NoNextIndexError:
            return False
        finally:
            iterator.close()
        return True

    def make_stats(self) -> IteratorStats:
        """The counters :meth:`iterate` reports into (the worker's iterator tree)."""
        return IteratorStats()

    def iterate(
        self,
        worker: int,
        workers: int,
        state: Any,
        allocate: Any = None,
        stats: IteratorStats | None = None,
    ) -> Generator[tuple[Any, Any], None, None]:
        """Yields ``(element, state after it)`` of worker ``worker``'s share, from ``state``.

        ``state`` None starts at the beginning. Runs in the worker process, where this object is
        its own private copy: the first call slices the pipeline in place and runs
        ``worker_init_fn``. ``stats`` (from :meth:`make_stats`) counts the worker's iterator.
        """
        if not self._started:
            reading_process.share_cpus(workers)
            reading_process.stream_blocks()  # each element sent as soon as it is made
            slice_for_worker(self.dataset, worker, workers, self.sequential)
            self._started = True
            if allocate is not None:
                _fill_rows_in_shared_memory(self.dataset, allocate)
            if self.worker_init_fn is not None:
                self.worker_init_fn(worker, workers)
        iterator = self._iterator(self.dataset)
        if stats is not None:
            stats.attach(iterator)
        try:
            if state is not None:
                iterator.set_state(state)
            if allocate is not None and callable(
                stack_into := getattr(iterator, "stack_into", None)
            ):
                stack_into(allocate)
            get_state = iterator.get_state
            state = get_state()
            while True:
                try:
                    element = next(iterator)
                except StopIteration:
                    return
                except Exception as error:
                    before, state = state, get_state()
                    stuck = state == before
                    if stuck:  # the share ends here: said with the error, never silently
                        error.add_note(_stuck_note(worker, workers, state))
                    yield FailedElement(error), state
                    if stuck:
                        return
                    continue
                if element.__class__ is _RowsLater:
                    element = element.fill(allocate)
                state = get_state()
                yield element, state
        finally:
            iterator.close()


def _stuck_note(worker: int, workers: int, state: Any) -> str:
    from grainlite.errors import shown

    return (
        f"grainlite: the iterator of mp_prefetch worker {worker} of {workers} did not move past "
        f"this error (its get_state() stayed {shown(state)}), so that worker's share of the "
        "elements ends here; the other workers go on. Make the iterator's position move past a "
        "failed element, as grainlite's nodes do, to go on after it."
    )


class _RowsLater:
    """A ``MapDataset.batch`` batch not stacked yet: its elements are copied into rows of the
    worker's shared memory when it is sent, not stacked in private memory and copied again.

    Made only for elements :class:`~grainlite.transforms.batch_rows.BatchRows` takes, all of one
    layout, so the batch equals ``make_batch``'s and filling it cannot fail. A block of batches
    is read before any of them is sent, so the rows cannot be allocated when the batch is made:
    the worker's shared memory holds one element in the making at a time.
    """

    __slots__ = ("elements", "rows")

    def __init__(self, rows: BatchRows, elements: list[Any]) -> None:
        self.rows, self.elements = rows, elements

    @property
    def nbytes(self) -> int:
        """The bytes of the batch it makes (what the read-ahead's memory bound counts)."""
        rows = self.rows
        row = sum(
            int(np.prod(shape)) * dtype.itemsize for shape, dtype in zip(rows.shapes, rows.dtypes)
        )
        return row * len(self.elements)

    def fill(self, allocate: Callable[..., Any]) -> Any:
        """The batch, its rows in ``allocate``'s memory."""
        keep_freed_memory()  # the elements are freed together (see grainlite.engine.malloc)
        rows, elements = self.rows, self.elements
        rows.allocate(len(elements), allocate)
        for element in elements:
            rows.add(element)
        return rows.batch()


def _stack_later(values: list[Any]) -> Any:
    """The worker's ``batch_fn`` for a default ``MapDataset.batch`` right under the reader: a
    :class:`_RowsLater` where rows take the elements, else the stacked batch (errors included)."""
    from grainlite.dataset.batch_arguments import stack

    rows = BatchRows.layout(values[0]) if values else None
    if rows is not None and rows.takes_all(values[1:]):
        return _RowsLater(rows, list(values))
    return stack(values)


def _fill_rows_in_shared_memory(dataset: IterDataset, allocate: Callable[..., Any]) -> None:
    """Makes the batch ``dataset`` reads last (:meth:`IterDataset.map_batch_read_last`), if any,
    fill its rows in the worker's shared memory: a batch streamed in the consuming thread
    (:func:`~grainlite.dataset.reading_process.stream_blocks`, the element being made) takes each
    element into its row as it is made, so the worker never holds the batch's elements; one
    read in a block ahead (reader threads, or a block read again after an error) is a
    :class:`_RowsLater`, its rows filled when it is sent."""
    from grainlite.dataset.batch_arguments import stack

    node = dataset.map_batch_read_last()
    if node is not None:
        fill = functools.partial(batch_as_they_come, allocate=allocate, stack=stack)
        node.stack_with(_stack_later, fill)
