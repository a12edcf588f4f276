"""``ThreadPrefetchIterDataset``: the parent iterated ahead in a background thread.

A thread reads up to ``prefetch_buffer_size`` elements ahead of the consumer, each with the
parent's state right after it, so ``get_state()`` is the parent's state after the last element
*delivered* (Grain's rule: the state is the parent's own, ``{"next_index": 5}`` over a
``to_iter_dataset``), never one of an element still in the buffer, and at the end of the stream
still the one after the last element (a restore reads the rest of the parent again and ends).
``prefetch_buffer_size=0`` reads in the consuming thread. Useful where the parent waits (file or
network reads release the interpreter); pure-Python work does not get faster.

``set_state`` stops the thread, drops the buffer, moves the parent and starts again at the next
``next()``; a fresh iterator restores the same way. Until an element is read ahead, ``get_state()``
is the parent's own (what its ``set_state`` kept), and Grain's ``get_next_index`` /
``set_next_index`` move the parent without reading. The parent may be any iterator with
``get_state`` / ``set_state``. An exception from the parent reaches the
consumer at its place in the stream, and ``get_state()`` stays the state before the failed
element (Grain's rule); the thread ends there and the next ``next()`` goes on from where the
parent is.

The thread is a daemon thread that holds the parent iterator and the buffer, never this iterator:
it ends on :meth:`close`, when this iterator is garbage collected (``weakref.finalize``), and at
the end of the stream. A ``next()`` of the parent already running ends at its next stop point
(:mod:`grainlite.dataset.stopping`: a ``to_iter_dataset`` block read, a wait for an inner thread
prefetch), so an endless run of filtered-out elements does not hold up ``close()`` (Grain leaves
that thread running); a single read that never returns still cannot be interrupted.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from typing import Any

from grainlite.checks import int_option
from grainlite.dataset import element_spec
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.experimental.interleave import InterleaveIterDataset
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.mp.slicing import (
    check_sliceable,
    is_to_iter,
    iter_nodes,
    slice_for_worker,
)
from grainlite.dataset.next_index import get_next_index, set_next_index
from grainlite.dataset.options import WithOptionsIterDataset, pipeline_options
from grainlite.dataset.stopping import get_stoppable, stoppable
from grainlite.engine.producer import End, Failed, Producer
from grainlite.errors import GrainliteTypeError, GrainliteValueError, clipped


def _check_buffer_size(size: Any) -> int:
    """``size`` as an int >= 0 (:func:`grainlite.checks.int_option`); Grain's wording."""
    fix = "pass 0 to read in the consuming thread or a positive number of elements to read ahead."
    return int_option(
        size,
        0,
        wrong_type=f"ThreadPrefetch prefetch_buffer_size must be an int, got {{type}} {{value}}; "
        f"{fix}",
        too_small="ThreadPrefetch `prefetch_buffer_size` must be greater than or equal to 0, got "
        f"{{value}}; {fix}",
    )


class ThreadPrefetchIterDataset(IterDataset):
    """Iterates ``parent`` in a background thread, ``prefetch_buffer_size`` elements ahead.

    Args:
      parent: the stream to read ahead.
      prefetch_buffer_size: elements read ahead; 0 reads in the consuming thread.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(self, parent: IterDataset, *, prefetch_buffer_size: int) -> None:
        super().__init__(parent)
        self._prefetch_buffer_size = _check_buffer_size(prefetch_buffer_size)

    def __iter__(self) -> ThreadPrefetchDatasetIterator:
        return ThreadPrefetchDatasetIterator(iter(self._parent), self._prefetch_buffer_size)

    def __str__(self) -> str:
        return f"ThreadPrefetchIterDataset(prefetch_buffer_size={self._prefetch_buffer_size})"


def _reading(parent: DatasetIterator) -> Callable[[], tuple[Any, Any]]:
    """The producer's step: the parent's next element and its state right after it."""

    def step() -> tuple[Any, Any]:
        element = next(parent)
        return element, parent.get_state()

    return step


class ThreadPrefetchDatasetIterator(DatasetIterator):
    """Reads ``parent`` (an iterator) ahead in a thread; its state is the parent's.

    Args:
      parent: the iterator to read ahead: a ``DatasetIterator``, or any iterator with
        ``get_state()`` / ``set_state()``.
      prefetch_buffer_size: elements read ahead; 0 reads in the consuming thread.
    """

    def __init__(self, parent: DatasetIterator, prefetch_buffer_size: int) -> None:
        super().__init__((parent,))  # one parent, even one that is not a DatasetIterator
        self._size = _check_buffer_size(prefetch_buffer_size)
        # The parent's state after the last element delivered; None while the parent itself
        # is there (nothing read ahead), so get_state() asks it (as Grain does).
        self._state: Any = None
        self._producer: Producer | None = None
        self._finalizer: Any = None
        self._done = False  # the parent is exhausted and the last state is delivered

    def __next__(self) -> Any:
        if self._size == 0:
            element = next(self._parent)
            self._state = self._parent.get_state()
            return element
        if self._done:
            raise StopIteration
        if self._closed:
            raise GrainliteValueError(
                "This ThreadPrefetch iterator was closed and cannot advance; create a new one "
                "with iter(dataset) (and set_state(...) to resume where it was)."
            )
        producer = self._producer
        if producer is None:
            producer = self._start_producer()
        item = get_stoppable(producer)  # a plain get() unless read ahead itself
        if isinstance(item, Failed):  # the state stays the one before the failed element
            self._stop()
            raise item.error
        if isinstance(item, End):  # the state stays the one after the last element (Grain's)
            self._stop()
            self._done = True
            raise StopIteration
        self._state = item.state
        return item.value

    def _start_producer(self) -> Producer:
        if self._state is None:  # the parent is about to move ahead: keep where it is
            self._state = self._parent.get_state()
        parent = self._parent
        # The thread stops at the parent's stop points too (grainlite.dataset.stopping): a
        # ReadStopped raised there ends it once stop() is asked, with nothing queued.
        producer = self._producer = Producer(
            _reading(parent),
            self._size,
            "grainlite-thread-prefetch",
            final_state=parent.get_state,
            around=stoppable,
        )
        self._finalizer = weakref.finalize(self, producer.stop)
        return producer

    def start_prefetch(self) -> None:
        """Starts the read-ahead thread now (it otherwise starts at the first ``next()``)."""
        if self._size and self._producer is None and not self._done and not self._closed:
            self._start_producer()

    def _stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # stops the thread (once)
        self._producer, self._finalizer = None, None

    def get_state(self) -> dict[str, Any]:
        """The parent's state after the last element delivered."""
        return self._parent.get_state() if self._state is None else self._state

    def set_state(self, state: dict[str, Any]) -> None:
        """Stops the read-ahead, moves the parent to ``state``; reading restarts on ``next()``.
        ``get_state()`` then asks the parent (which may keep a state of its own)."""
        self._stop()
        self._parent.set_state(state)
        self._state = None
        self._done = False

    def _rewind(self) -> None:
        """Stops the read-ahead and moves the parent back to the last element delivered."""
        self._stop()
        if self._state is not None:
            self._parent.set_state(self._state)
            self._state = None

    def _get_next_index(self) -> int:
        """The parent's next index at the last element delivered (the read-ahead restarts on
        the next ``next()``)."""
        self._rewind()
        return get_next_index(self._parent)

    def _set_next_index(self, index: int) -> None:
        """Moves the parent to ``index`` (reads nothing, asks no state); reading restarts on
        ``next()``."""
        self._stop()
        set_next_index(self._parent, index)
        self._state = None
        self._done = False

    def close(self) -> None:
        """Stops the thread; the iterator cannot advance afterwards. Idempotent."""
        self._stop()
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        self._rewind()  # the buffer is dropped: the parent moves back to the delivered state
        return self.__dict__.copy()

    def __str__(self) -> str:
        return f"ThreadPrefetchDatasetIterator(prefetch_buffer_size={self._size})"


def _copy_pipeline(ds: IterDataset) -> IterDataset:
    """A deep copy of ``ds`` that shares the ``MapDataset`` read by each ``to_iter_dataset``
    (read-only, and already read by several reader threads at once): slicing the copy for one
    thread changes neither ``ds`` nor the other threads' copies."""
    memo: dict[int, Any] = {}
    for node in iter_nodes(ds):
        if is_to_iter(node):
            for parent in node.parents:
                memo[id(parent)] = parent
    try:
        return copy.deepcopy(ds, memo)
    except Exception as error:
        raise GrainliteTypeError(
            "multithread_prefetch copies the pipeline for each of its threads (each reads its "
            f"own slice), and a part of it cannot be copied: {clipped(str(error))}. Make such "
            "objects (locks, open files, connections) lazily inside the transformation, or "
            "pass num_threads=1."
        ) from error


def multithread_prefetch(
    ds: IterDataset, num_threads: int, buffer_size: int, sequential_slice: bool = False
) -> IterDataset:
    """Grain's thread-based ``mp_prefetch``: ``num_threads`` slices of ``ds`` read ahead by as
    many threads and interleaved.

    ``num_threads=0`` returns ``ds`` unchanged. Otherwise thread ``t`` of ``T`` reads a copy of
    ``ds`` whose every ``to_iter_dataset`` reads the elements ``[t::T]`` of its ``MapDataset``
    (with ``sequential_slice=True``, the ``t``-th of ``T`` contiguous ranges, sized as
    ``numpy.array_split`` sizes them; ``num_threads=1`` reads ``ds`` itself), each a
    :class:`ThreadPrefetchIterDataset` of ``buffer_size`` elements, and the result takes one
    element from each thread in turn (an ``InterleaveIterDataset`` with ``cycle_length=T``):
    Grain's elements, order and states (``{"next_index_in_cycle": ..., "iterators_in_use_states":
    [...]}``). The slicing is ``mp_prefetch``'s, its batch rule included
    (:mod:`grainlite.dataset.mp.slicing`). As in Grain, ``num_threads > 1`` over a pipeline
    with an ``IterDataset`` source of its own (no ``MapDataset`` below it to share out) is a
    ``ValueError``.
    """
    threads = int_option(
        num_threads,
        0,
        wrong_type="multithread_prefetch num_threads must be an int, got {type} {value}; pass how "
        "many threads read ahead (0 turns it off).",
        too_small="multithread_prefetch num_threads must be >= 0, got {value}; 0 turns it off.",
    )
    if threads == 0:
        return ds
    size = _check_buffer_size(buffer_size)
    try:  # Grain's rule: several threads need a MapDataset to share out
        check_sliceable(ds, threads)
    except GrainliteValueError:
        raise GrainliteValueError(
            f"Cannot slice `IterDataset` source: multithread_prefetch(num_threads={threads}) "
            "shares the elements of a MapDataset between its threads, and this pipeline has an "
            "IterDataset source of its own. Build it from a MapDataset "
            "(MapDataset.source(...).to_iter_dataset()), or pass num_threads=1."
        ) from None
    shards: list[IterDataset] = []
    for thread in range(threads):
        shard = ds
        if threads > 1:
            shard = _copy_pipeline(ds)
            slice_for_worker(shard, thread, threads, sequential_slice)
        shards.append(ThreadPrefetchIterDataset(shard, prefetch_buffer_size=size))
    threaded: IterDataset = InterleaveIterDataset(shards, cycle_length=threads)
    # The interleave keeps its inputs' options to them; as in Grain, the options set in ``ds``
    # also act on the nodes after multithread_prefetch.
    options = pipeline_options(ds)
    return threaded if options is None else WithOptionsIterDataset(threaded, options)
