"""Read-ahead hints for the Dataset API: the source keys a ``MapDataset``'s next indices read.

The DataLoader tells its source the keys its sampler will read next
(:data:`~grainlite.options.READ_POLICY`'s ``tell_ahead`` records, ``source.prefetch_keys``): an
ArrayRecord source on ``s3://`` or ``gs://`` then fetches the files those keys need into its
cache before the reads ask for them. ``to_iter_dataset`` reads a ``MapDataset`` by index, and an
index becomes a source key through the nodes below it (a shuffle permutes, a slice offsets, a
batch reads many rows, a repeat wraps). :class:`KeyHints` walks that chain once per iterator and,
before each block read, tells the source the keys of the indices ahead that it has not told yet,
in reading order. The same walk gives the keys that big list reads read ahead of the iterator
(:func:`list_reads_for`, for local ArrayRecord files).

Each node that maps its indices to its parent's says how in its own ``_parent_keys(indices)``
method (the same rule its ``_getitems`` reads with); a node without one (a mix, a zip, a user's
subclass) means no hints for that pipeline, and its reads go on as before. A hint is advisory: it
never changes what is read or in which order, and an error computing one is dropped (the reads
themselves say what fails).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grainlite.dataset.map_dataset import MapDataset
from grainlite.options import READ_POLICY
from grainlite.sources.list_reads import ListReads


def chain_to_source(dataset: Any) -> list[Any] | None:
    """The nodes from ``dataset`` down to its source node (which has ``_source_keys``), or None
    where a node on the way cannot say its parent's indices."""
    nodes = []
    node = dataset
    while not hasattr(node, "_source_keys"):
        if not hasattr(node, "_parent_keys"):
            return None
        parents = tuple(getattr(node, "_parents", ()))
        if len(parents) != 1:
            return None
        nodes.append(node)
        node = parents[0]
    nodes.append(node)
    return nodes


def keys_through(nodes: list[Any], indices: Sequence[int] | np.ndarray) -> np.ndarray:
    """The keys of the source under ``nodes`` (from :func:`chain_to_source`) that reading
    ``indices`` of the first node reads, in reading order."""
    keys = np.asarray(indices, dtype=np.int64)
    for node in nodes[:-1]:
        keys = np.asarray(node._parent_keys(keys), dtype=np.int64).reshape(-1)
    return np.asarray(nodes[-1]._source_keys(keys), dtype=np.int64)


def rows_per_index(nodes: list[Any]) -> int:
    """Source keys per index of the first node (the rows of a batch)."""
    fanout = 1
    for node in nodes[:-1]:
        fanout *= int(getattr(node, "_rows_per_index", 1))
    return fanout


def list_reads_for(
    dataset: Any, start: int, stop: int, spare_cpus: int, processes: int = 1
) -> ListReads | None:
    """Big list reads ahead of an iterator reading ``dataset``'s indices ``[start, stop)`` in
    order (:mod:`grainlite.sources.list_reads`), where
    :meth:`~grainlite.options.ReadPolicy.list_read_blocks` says they pay for its source (and a
    process with ``spare_cpus`` CPUs beyond its consuming thread's, one of ``processes``), else
    None. The source node takes its records from them while they are active in the reading
    thread (:func:`~grainlite.sources.list_reads.activate`)."""
    nodes = chain_to_source(dataset)
    if nodes is None:
        return None

    def keys_of(i0: int, i1: int) -> np.ndarray:
        return keys_through(nodes, np.arange(i0, i1, dtype=np.int64))

    source = nodes[-1]._hinted_source()
    fanout = rows_per_index(nodes)
    return ListReads.open(source, keys_of, start, stop, fanout, spare_cpus, processes)


class KeyHints:
    """Tells ``dataset``'s source the keys of the indices a reader will read next.

    Build it with :meth:`for_dataset` (None where the pipeline gives no hints). Thread-safe:
    reader threads may call :meth:`before_read` at once."""

    def __init__(
        self, nodes: list[Any], prefetch: Callable[[Any], None], length: int, fanout: int
    ) -> None:
        self._nodes = nodes
        self._prefetch = prefetch
        self._length = length
        # Indices ahead of a read to tell: tell_ahead records' worth (a batch index reads rows).
        self._ahead = max(1, READ_POLICY.tell_ahead // max(1, fanout))
        self._told = 0  # indices below this were told
        self._last_start = 0
        self._lock = threading.Lock()

    @classmethod
    def for_dataset(cls, dataset: Any) -> KeyHints | None:
        """Hints for an iterator reading ``dataset`` by index, or None where its source takes
        none (a local or in-memory source) or a node cannot say which keys it reads."""
        nodes = chain_to_source(dataset)
        if nodes is None:
            return None
        source_node = nodes[-1]
        prefetch = READ_POLICY.prefetcher(source_node._hinted_source())
        if prefetch is None:
            return None
        return cls(nodes, prefetch, len(dataset), rows_per_index(nodes))

    def source_keys(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The source keys that reading ``indices`` of the dataset reads, in reading order."""
        return keys_through(self._nodes, indices)

    def tell_first(self) -> None:
        """Tells the source the keys of the dataset's first indices (``ahead`` of them)."""
        self.before_read(0, 0)

    def before_read(self, start: int, stop: int) -> None:
        """Called before the indices ``[start, stop)`` are read: tells the source the keys of
        the indices up to ``stop + ahead`` not told yet, once fewer than half of ``ahead`` are
        left told (so the source hears of keys in large blocks). A read far behind the last one
        (``set_state`` moved back) tells again from there."""
        with self._lock:
            if start + self._ahead < self._last_start:
                self._told = start
            self._last_start = start
            end = min(self._length, stop + self._ahead)
            if self._told >= min(end, stop + self._ahead // 2):
                return
            begin = max(start, self._told)
            self._told = end
        with contextlib.suppress(Exception):  # advisory: the reads say what fails
            self._prefetch(self.source_keys(np.arange(begin, end, dtype=np.int64)))


class HintedRead:
    """``read(indices)`` (a block read of a ``range`` of indices: ``_getitems`` or a stream)
    that first lets ``hints`` tell the source the keys ahead."""

    def __init__(self, read: Callable[[Any], Any], hints: KeyHints) -> None:
        self._read = read
        self._hints = hints

    def __call__(self, indices: Any) -> Any:
        if isinstance(indices, range) and len(indices):
            self._hints.before_read(indices.start, indices.stop)
        return self._read(indices)


def hint_first_keys(pipeline: Any) -> None:
    """From the training process while ``mp_prefetch`` workers start (their interpreters take a
    second or more): tells the source of the ``MapDataset`` that ``pipeline`` (an
    ``IterDataset`` chain) reads the keys of its first indices, which the workers read between
    them, so a remote source starts fetching their files meanwhile. Advisory: a pipeline whose
    nodes cannot say their keys gives no hint."""
    node = pipeline
    while not isinstance(node, MapDataset):
        parents = tuple(getattr(node, "_parents", ()))
        if len(parents) != 1:
            return
        node = parents[0]
    with contextlib.suppress(Exception):  # advisory, as every hint
        hints = KeyHints.for_dataset(node)
        if hints is not None:
            hints.tell_first()
