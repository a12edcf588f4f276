"""``PrefetchDatasetIterator``: a ``MapDataset`` read in order, in blocks, as an iterator.

The iterator walks indices ``0 .. len(parent) - 1``, skips the ``None`` holes a filter left (unless
``allow_nones``; too many in a window of 1000 elements read warn or raise, as Grain's filter
check), and its state is Grain's ``{"next_index": N}``: the index of the next element to
read, holes included. It reads the parent in blocks through ``_getitems`` (vectorised by the
built-in nodes; a user's subclass falls back to one ``ds[i]`` per index), in the consuming thread
first, and moves to ``ReadOptions`` reader threads only if the reads prove slow, at once if the
first one is very slow (see :mod:`grainlite.dataset.read_ahead`). In an ``mp_prefetch`` worker,
a block read in the consuming thread is still one read of the source, but its elements are made
and handed out one by one (the nodes' ``_stream``: see
:func:`grainlite.dataset.map.parent_stream`), so each is sent before the next is made, as
Grain's element-by-element reads are. The position is still per element, so a state taken
between any two elements resumes exactly there.

An exception raised reading an element (a transformation that fails for one record) is raised at
that element's place, once, and the iterator goes on after it: a failed block is read again
element by element, its good elements delivered, and a state taken right after the error resumes
after the failed element (as Grain, which reads element by element).

The node that makes it, ``to_iter_dataset()``'s ``PrefetchIterDataset``, is in
:mod:`grainlite.dataset.to_iter`; the names and timings of the map nodes a block read runs
through, for ``stats()``, are in :mod:`grainlite.dataset.map_chain_stats`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grainlite.checks import int_option, template_filled
from grainlite.dataset import stopping
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.key_hints import HintedRead, KeyHints, list_reads_for
from grainlite.dataset.map import parent_stream
from grainlite.dataset.map_chain_stats import map_chain_name, node_counts, timed_map_nodes
from grainlite.dataset.options import FILTER_WINDOW, FilterRatioCheck
from grainlite.dataset.read_ahead import BlockReader, ElementReadError
from grainlite.dataset.reading_process import reading_processes, spare_cpus
from grainlite.errors import GrainliteValueError, StateOutOfRangeError
from grainlite.options import ReadOptions
from grainlite.sources.list_reads import ListReads, activate
from grainlite.stats.counters import ParentCounters, StageCounter, clock
from grainlite.stats.tracing import span

if TYPE_CHECKING:
    from grainlite.dataset.to_iter import PrefetchIterDataset

_IN_THIS_THREAD = ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _close(reader: BlockReader, list_reads: ListReads | None) -> None:
    """Closes an iterator's reader and its list reads (the finalizer holds these, not it)."""
    try:
        reader.close()
    finally:
        if list_reads is not None:
            list_reads.close()


class PrefetchDatasetIterator(DatasetIterator):
    """Iterates a ``MapDataset`` in index order; state ``{"next_index": N}``.

    Nothing is started at construction (the iterator pickles); the first ``next()`` creates the
    block reader, whose threads (if any) end on :meth:`close` (which waits for them), at
    exhaustion, on ``set_state``, and when the iterator is garbage collected. An error reading
    one element does not end them: the iterator goes on after it.
    """

    def __init__(self, dataset: PrefetchIterDataset) -> None:
        super().__init__()
        parent = dataset._parent
        self._map = parent
        self._length = len(parent)
        getitems = getattr(parent, "_getitems", None)
        self._getitems: Callable[[Any], list[Any]] = (
            getitems if getitems is not None else (lambda ix: [parent[i] for i in ix])
        )
        self._read_options = dataset.read_options
        self._allow_nones = dataset.allow_nones
        self._buf: list[Any] = []  # the elements at indices [_base, _base + len(_buf))
        self._end = 0  # len(_buf)
        self._pos = 0  # the next element of _buf to return
        self._base = 0
        self._reader: BlockReader | None = None
        # Big list reads ahead of the reader (local ArrayRecord files), made and closed with it.
        self._list_reads: ListReads | None = None
        self._finalizer: Any = None
        # Grain's filter check: the holes skipped in each window of FILTER_WINDOW elements read
        # warn (or raise) over DatasetOptions' ratios. The fast path of next() stops at the end
        # of a window (_fast_end), so only the slow path counts and checks.
        check = FilterRatioCheck(str(self))
        self._check = check if check.active and not self._allow_nones else None
        self._window_end = FILTER_WINDOW
        self._dropped = 0
        self._fast_end = 0  # next() reads _buf[_pos] itself while _pos < _fast_end
        # stats(): each block read is timed; this iterator's clock starts at the first one. The
        # MapDataset transformations below time their blocks themselves (cumulative over every
        # reader of the dataset): their counts at this point are the baseline.
        self._stats_stage = StageCounter(f"read ({map_chain_name(parent)})", "read")
        self._stats_counters = ParentCounters(0)
        self._stats_nodes = [(node, node_counts(node)) for node in timed_map_nodes(parent)]

    def __next__(self) -> Any:
        pos = self._pos
        if pos < self._fast_end:
            element = self._buf[pos]
            if element is not None or self._allow_nones:
                self._pos = pos + 1
                return element
        return self._next_slow()

    def _next_slow(self) -> Any:
        """``next()`` past the end of the buffer or of a check window, or at a hole: skips
        holes (counting them for the filter check), closes full windows, refills."""
        check = self._check
        while True:
            pos = self._pos
            if check is not None and self._base + pos >= self._window_end:
                self._close_window(check)
            if pos < self._end:
                element = self._buf[pos]
                self._pos = pos + 1
                if element is not None or self._allow_nones:
                    return element
                self._dropped += 1
                continue
            reader = self._reader
            if reader is not None and reader._open is not None and not stopping.active:
                self._next_streamed(reader)
            elif not self._refill():
                raise StopIteration

    def _next_streamed(self, reader: BlockReader) -> None:
        """:meth:`_refill` with the next element of the block the reader is streaming (in an
        ``mp_prefetch`` worker): the same moves, less the checks an open block makes needless
        (the iterator is open, the dataset not at its end, the reader made and started)."""
        self._base += self._end
        self._buf, self._end, self._pos, self._fast_end = [], 0, 0, 0
        block = self._read_block(reader)  # its next element, or what follows an error in it
        end = len(block)
        self._buf, self._end = block, end
        self._fast_end = end if self._check is None else self._fast_end_now()

    def _read_block(self, reader: BlockReader) -> list[Any]:
        """The reader's next block, its read timed into this stage's stats. An element that
        failed to read is raised at its place (the next read goes on after it); any other
        exception stops the reader."""
        begin = clock()
        previous = activate(self._list_reads)  # the source node takes its records from them
        try:
            with span(self._stats_stage.name):  # a profiler span while a trace records
                block = reader.next_block()
        except ElementReadError as failed:
            self._base += 1
            raise failed.error from None
        except BaseException:
            self._stop_reader()
            raise
        finally:
            activate(previous)
        self._stats_stage.add(clock() - begin, len(block), len(block))
        return block

    def _close_window(self, check: FilterRatioCheck) -> None:
        """Checks the window of elements just read (warns or raises, as Grain's filter check
        does) and starts the next one; the position has already moved past the window, so a
        raise loses nothing and the next ``next()`` goes on."""
        dropped, self._dropped = self._dropped, 0
        self._window_end += FILTER_WINDOW
        self._fast_end = self._fast_end_now()
        check.window(FILTER_WINDOW, dropped)

    def _fast_end_now(self) -> int:
        """Where the fast path of ``next()`` stops in ``_buf``: its end, or the end of the
        check window."""
        if self._check is None:
            return self._end
        return max(0, min(self._end, self._window_end - self._base))

    def _refill(self) -> bool:
        """Reads the next block into the buffer; False at the end of the dataset. A read-ahead
        thread told to stop stops here, between blocks (the position is that of the elements
        and holes already passed)."""
        if stopping.active:
            stopping.stop_point()
        if self._closed:
            raise GrainliteValueError(
                "This to_iter_dataset iterator was closed and cannot advance; create a new one "
                "with iter(dataset) (and set_state(...) to resume where it was)."
            )
        self._base += self._end
        self._buf, self._end, self._pos, self._fast_end = [], 0, 0, 0
        if self._base >= self._length:
            self._stop_reader()
            self._stats_counters.end()
            return False
        if self._reader is None:
            getitems, stream = self._getitems, parent_stream(self._map)
            hints = KeyHints.for_dataset(self._map)  # a remote source hears the keys ahead
            if hints is not None:
                getitems, stream = HintedRead(getitems, hints), HintedRead(stream, hints)
            self._list_reads = list_reads_for(
                self._map, self._base, self._length, spare_cpus(), reading_processes()
            )
            self._reader = BlockReader(
                getitems,
                self._base,
                self._length,
                # Reads served by list reads ahead stay in this thread (reader threads would
                # read around them).
                self._read_options if self._list_reads is None else _IN_THIS_THREAD,
                stream,  # used in an mp_prefetch worker: see BlockReader
            )
            self._finalizer = weakref.finalize(self, _close, self._reader, self._list_reads)
        counters = self._stats_counters
        counters.start()
        block = self._read_block(self._reader)
        if not counters.first_ns:
            counters.first_element()
        self._buf, self._end = block, len(block)
        self._fast_end = self._fast_end_now()
        return True

    def _stop_reader(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # closes the reader and the list reads (once)
        self._reader, self._finalizer, self._list_reads = None, None, None

    def _stats_rows(self) -> list[dict[str, Any]]:
        """stats(): the read (less the transformations' time) and each MapDataset
        transformation it ran, counted since this iterator was made."""
        rows = []
        for node, (ns, _calls, elements_in, elements_out) in self._stats_nodes:
            stage = node._stats_stage
            rows.append(
                {
                    "name": stage.name,
                    "kind": "transform",
                    "seconds": (stage.ns - ns) / 1e9,
                    "in": stage.elements_in - elements_in,
                    "out": stage.elements_out - elements_out,
                    "sampled": False,
                }
            )
        read = self._stats_stage.snapshot()
        read["seconds"] = max(0.0, read["seconds"] - sum(row["seconds"] for row in rows))
        return [read, *rows]

    def get_state(self) -> dict[str, Any]:
        """``{"next_index": N}``: the index of the next element to read (holes included)."""
        return {"next_index": self._base + self._pos}

    def _get_next_index(self) -> int:
        """Grain's next index: the index of the next element to read (holes included)."""
        return self._base + self._pos

    def _set_next_index(self, index: int) -> None:
        """Moves to ``index``, which must be in ``[0, len(dataset)]`` (reads nothing)."""
        self.set_state({"next_index": index})

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to ``state["next_index"]``, which must be in ``[0, len(dataset)]``."""
        next_index = self.check_state(state)
        self._stop_reader()
        self._buf, self._end, self._pos, self._fast_end, self._base = [], 0, 0, 0, next_index
        self._window_end, self._dropped = next_index + FILTER_WINDOW, 0

    def check_state(self, state: dict[str, Any]) -> int:
        """``state["next_index"]`` if it is an integer (a numpy one too, as in Grain) in
        ``[0, len(dataset)]``, as an ``int``, else Grain's error (a KeyError, a TypeError or an
        IndexError that is also a ValueError; :func:`grainlite.checks.int_option`). Reads
        nothing."""
        out_of_range = (
            f"Checkpoint `next_index` {{value}} is out of range for dataset of length "
            f"{self._length}: it must be in [0, {self._length}]; restore a state saved from an "
            "iterator over this same dataset."
        )
        next_index = int_option(
            state["next_index"],
            0,
            wrong_type="Checkpoint `next_index` must be an int (got {value} of type {type}); pass "
            "a state from get_state().",
            too_small=out_of_range,
            too_small_error=StateOutOfRangeError,
        )
        if next_index > self._length:
            raise StateOutOfRangeError(template_filled(out_of_range, next_index))
        return next_index

    @property
    def read_threads(self) -> list[Any]:
        """The reader threads this iterator's block reader runs now (none before the reads
        move to threads, and none after :meth:`close`)."""
        return self._reader.threads if self._reader is not None else []

    def close(self) -> None:
        """Stops the reader threads (if any) and waits for them (a read in flight finishes
        first); the iterator cannot advance afterwards."""
        self._stop_reader()
        self._base += self._pos  # keeps get_state(); next() now reaches _refill and raises
        self._buf, self._end, self._pos, self._fast_end = [], 0, 0, 0
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"], state["_finalizer"], state["_list_reads"] = None, None, None
        state["_base"] += state["_pos"]  # the unpickled copy re-reads from its position
        state["_buf"], state["_end"], state["_pos"], state["_fast_end"] = [], 0, 0, 0
        return state

    def __str__(self) -> str:
        return (
            f"PrefetchDatasetIterator(read_options={self._read_options}, "
            f"allow_nones={self._allow_nones})"
        )
