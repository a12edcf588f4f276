"""``MapDataset.to_iter_dataset()``: a ``MapDataset`` read in order as an ``IterDataset``.

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
"""

from __future__ import annotations

import builtins
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grainlite.checks import int_option, template_filled
from grainlite.dataset import element_spec, stopping
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.key_hints import HintedRead, KeyHints, list_reads_for
from grainlite.dataset.map import parent_stream
from grainlite.dataset.map_dataset import MapDataset
from grainlite.dataset.options import FILTER_WINDOW, FilterRatioCheck
from grainlite.dataset.read_ahead import (
    BlockReader,
    ElementReadError,
    reading_processes,
    spare_cpus,
)
from grainlite.errors import (
    GrainliteTypeError,
    GrainliteValueError,
    StateOutOfRangeError,
)
from grainlite.options import ReadOptions
from grainlite.sources.list_reads import ListReads, activate
from grainlite.stats.counters import ParentCounters, StageCounter, clock
from grainlite.stats.tracing import span

if TYPE_CHECKING:
    from grainlite.dataset.batch import BatchMapDataset


def _chain(dataset: Any) -> list[Any]:
    """The MapDataset nodes a block read runs through, from the source up (first parents)."""
    nodes = []
    node = dataset
    while node is not None:
        nodes.append(node)
        parents: tuple[Any, ...] = tuple(getattr(node, "_parents", ()))
        node = parents[0] if len(parents) == 1 else None
    return nodes[::-1]


def map_chain_name(dataset: Any) -> str:
    """``RangeMapDataset → SliceMapDataset``: the nodes of a block read that are not timed
    transformations (those have their own rows)."""
    names = [type(n).__name__ for n in _chain(dataset) if not hasattr(n, "_stats_stage")]
    return " → ".join(names) or type(dataset).__name__


def timed_map_nodes(dataset: Any) -> list[Any]:
    """The MapDataset transformations below ``dataset`` that time their block reads."""
    return [
        n for n in _chain(dataset) if isinstance(getattr(n, "_stats_stage", None), StageCounter)
    ]


def node_counts(node: Any) -> tuple[int, int, int, int]:
    """A node counter's (ns, calls, elements in, elements out) now."""
    stage = node._stats_stage
    return stage.ns, stage.calls, stage.elements_in, stage.elements_out


def _check_read_options(read_options: Any) -> Any:
    """``read_options`` or the default; anything with ``num_threads`` and
    ``prefetch_buffer_size`` (grainlite's or Grain's ``ReadOptions``)."""
    if read_options is None:
        return ReadOptions()
    if not (hasattr(read_options, "num_threads") and hasattr(read_options, "prefetch_buffer_size")):
        raise GrainliteTypeError(
            f"to_iter_dataset(read_options=...) must be a ReadOptions (got {read_options!r} of "
            f"type {type(read_options).__name__}); pass grain.ReadOptions(num_threads=..., "
            "prefetch_buffer_size=...) or leave it out for the defaults."
        )
    return read_options


_IN_THIS_THREAD = ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _close(reader: BlockReader, list_reads: ListReads | None) -> None:
    """Closes an iterator's reader and its list reads (the finalizer holds these, not it)."""
    try:
        reader.close()
    finally:
        if list_reads is not None:
            list_reads.close()


class PrefetchIterDataset(IterDataset):
    """The elements of a ``MapDataset`` in index order, read ahead (Grain's ``to_iter_dataset``).

    Args:
      parent: the ``MapDataset`` to read.
      read_options: reader threads and read-ahead depth (``ReadOptions``; Grain's defaults).
      allow_nones: yield the ``None`` holes of a filter instead of skipping them.

    Worker slicing (for ``mp_prefetch``): :meth:`set_slice` (Grain's hook) and
    :meth:`set_block_share` make this node read a share of ``parent`` in place, so worker ``w``
    of ``W`` reads the elements ``[w::W]`` (or a contiguous range); its ``next_index`` counts
    positions within that share, as Grain's workers do.
    """

    _element_spec = property(element_spec.first_parent_spec)

    def __init__(
        self, parent: MapDataset, *, read_options: Any = None, allow_nones: bool = False
    ) -> None:
        super().__init__(parent)
        self._read_options = _check_read_options(read_options)
        self._allow_nones = bool(allow_nones)

    @property
    def read_options(self) -> Any:
        """The ``ReadOptions`` the iterators read with."""
        return self._read_options

    @property
    def allow_nones(self) -> bool:
        """Whether the iterators yield ``None`` holes instead of skipping them."""
        return self._allow_nones

    def map_batch_read_last(self) -> BatchMapDataset | None:
        """The parent's :meth:`~grainlite.dataset.map_dataset.MapDataset.batch_returned_as_is`: this
        node hands out the elements it reads as they are (grainlite's own node; a subclass may
        change them)."""
        if type(self) is not PrefetchIterDataset:
            return None
        return self._parent.batch_returned_as_is()

    def set_slice(self, sl: builtins.slice, sequential_slice: bool = False) -> None:
        """Grain's in-place slicing hook: from now on this node reads ``parent.slice(sl)``.

        With ``sequential_slice``, ``sl`` is ``slice(worker, None, workers)`` and the node reads
        that worker's contiguous range instead (sized as ``numpy.array_split`` sizes them).
        """
        if sequential_slice:
            self.set_block_share(1, sl.start or 0, sl.step or 1, sequential=True)
        else:
            self._parents = (self._parent.slice(sl),)

    def set_block_share(
        self, block: int, worker: int, workers: int, sequential: bool = False
    ) -> None:
        """Makes this node read worker ``worker`` of ``workers``'s share of its ``MapDataset``,
        in place: blocks of ``block`` consecutive indices, block ``k`` going to worker
        ``k % workers`` (with ``sequential``, the worker's contiguous run of blocks). ``block``
        is 1, element by element (Grain's share), except under ``mp_prefetch``'s batch rule
        (google/grain#1129, :mod:`grainlite.dataset.mp.slicing`)."""
        from grainlite.dataset.source import sequential_share

        parent = self._parent
        if sequential:
            blocks = -(-len(parent) // block)
            start, stop = sequential_share(builtins.slice(worker, None, workers), blocks)
            self.set_slice(builtins.slice(start * block, stop * block))
        elif block == 1:
            self.set_slice(builtins.slice(worker, None, workers))
        else:
            from grainlite.dataset.slice import BlockStrideMapDataset

            self._parents = (BlockStrideMapDataset(parent, block, worker, workers),)

    def __iter__(self) -> PrefetchDatasetIterator:
        return PrefetchDatasetIterator(self)

    def __str__(self) -> str:
        return (
            f"PrefetchIterDataset(read_options={self._read_options}, "
            f"allow_nones={self._allow_nones})"
        )


ToIterDataset = PrefetchIterDataset


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
