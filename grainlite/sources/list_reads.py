"""Big index-list reads ahead of a reader, in one background thread: ArrayRecord at its best.

array_record's index-list read ``read([k, ...])`` costs about 2.5 ns per record *in the file*
per call whatever the keys asked, so it pays only for blocks of thousands of shuffled keys, and
it releases the interpreter lock for the whole call. :class:`ListReads` reads a reader's future
keys (both APIs know them: the sampler, the Dataset API's chain of index maps) in such blocks in
a background thread while the consuming thread parses the records of the block before.
:meth:`~grainlite.options.ReadPolicy.list_read_blocks` decides whether a source is read so, and
how big the blocks are (by bytes: records of about 4 KB or more never are read so).

The consumer reads as before, key block by key block, and asks :meth:`ListReads.take` first:
it gives the records where the keys asked are exactly the next keys read ahead, else None, and
the consumer reads them itself. Records are matched by their keys, not by positions, so what is
served is always what a direct read gives; a request that is not the next keys (another order
of reads, reader threads, a restored iterator that kept it by mistake) switches the read-ahead
off for good. A block whose read failed is not served: the consumer reads its keys itself and
gets today's error, naming the record, at its place.

Lifecycle: one owner (the DataLoader's ``RecordReader``, the Dataset API's iterator) calls
:meth:`ListReads.close`, which stops the thread and waits for its read in flight (at most one
block, tens of milliseconds); ``weakref.finalize`` does the same when the owner is collected
without closing. The thread holds its queue, its stop flag and the functions it reads with,
never the :class:`ListReads` or its owner. A read that hangs inside array_record cannot be
interrupted by anything: its daemon thread is left to it after :data:`_JOIN_S`.

Memory: at most three blocks per reader (one being taken, one ready, one being read), each
within ``READ_POLICY.list_read_bytes`` (4 MiB): 12 MiB, plus array_record's own buffers during a
read (about 35 MB for 65,536 keys of the ``small`` benchmark file).
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grainlite.options import READ_POLICY

_JOIN_S = 10.0  # close() waits this long for the read in flight
_POLL_S = 0.05  # a full queue is retried this often, so a stop is seen
_SAMPLE = 16  # records measured before the first block (their real size bounds it)
_END = None  # the thread's last item: no more blocks

# The ListReads of the reads running in this thread (see activate).
_active = threading.local()


class ListReads:
    """Reads the keys of positions ``[start + lead, stop)`` ahead in big list reads of ``source``.

    The consumer reads the first ``lead`` positions itself (as many keys as the first block:
    about as long as that block's read), so the first elements do not wait for a block. Until
    the first block is ready, keys the read-ahead also holds are read by the consumer and
    skipped in the block (checked key by key).

    Args:
      source: the source; its ``list_read(keys)`` reads a block.
      keys_of: ``keys_of(p0, p1)``: the keys of positions ``[p0, p1)``, in reading order
        (``fanout`` keys per position; fewer at the end of the stream).
      start: the consumer's first position.
      stop: one past the last position; None: no end.
      blocks: ``(first, most)`` keys per block, from ``READ_POLICY.list_read_blocks``.
      fanout: keys per position (rows of a batch index), at least 1.
    """

    def __init__(
        self,
        source: Any,
        keys_of: Callable[[int, int], Any],
        start: int,
        stop: int | None,
        blocks: tuple[int, int],
        fanout: int = 1,
    ) -> None:
        self.source = source
        self._pid = os.getpid()
        fanout = max(1, fanout)
        begin = start + -(-blocks[0] // fanout)  # the lead: read by the consumer
        head = np.asarray(keys_of(begin, begin + 1), dtype=np.int64).reshape(-1)
        # The first key read ahead: the consumer's keys reach the read-ahead there.
        self._head = int(head[0]) if head.size else -1
        self._reached = False  # the consumer's keys passed the head
        self._started = False  # a take was served: from now on take waits for its block
        self._skip: list[int] = []  # keys read by the consumer, to drop from the blocks
        self._blocks: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._keys: list[int] = []  # the block being taken, its records (None: failed)
        self._records: list[Any] | None = None
        self._at = 0  # the next key of _keys to take
        self._on = bool(head.size)  # no keys there: nothing to read ahead
        self._thread = threading.Thread(
            target=_read_ahead,
            args=(source.list_read, keys_of, begin, stop, blocks, fanout),
            kwargs={"out": self._blocks, "stop": self._stop},
            name="grainlite-list-reads",
            daemon=True,
        )
        if self._on:
            self._thread.start()
        self._finalizer = weakref.finalize(self, _end, self._thread, self._blocks, self._stop)

    @classmethod
    def open(
        cls,
        source: Any,
        keys_of: Callable[[int, int], Any],
        start: int,
        stop: int | None,
        fanout: int = 1,
        spare_cpus: int = 1,
        processes: int = 1,
    ) -> ListReads | None:
        """A :class:`ListReads` where :data:`~grainlite.options.READ_POLICY` says big list reads
        of ``source`` pay for a process with ``spare_cpus`` CPUs beyond its consuming thread's,
        one of ``processes`` reading the stream (the workers), else None (read as before)."""
        blocks = READ_POLICY.list_read_blocks(source, spare_cpus, processes)
        if blocks is None or not callable(getattr(source, "list_read", None)):
            return None
        lead = -(-blocks[0] // max(1, fanout))
        if stop is not None and stop - start <= lead:
            return None  # the consumer reads it all before a first block could be ready
        return cls(source, keys_of, start, stop, blocks, fanout)

    @property
    def thread(self) -> threading.Thread:
        """The background thread (ended after :meth:`close`)."""
        return self._thread

    def take(self, keys: Sequence[int]) -> list[Any] | None:
        """The records of ``keys`` if they are the next keys read ahead, else None (read them
        yourself). A mismatch switches the read-ahead off; a failed block gives None for its
        keys and goes on after them. Called by one consuming thread."""
        if not self._on:
            return None
        if os.getpid() != self._pid:  # a forked copy: the thread stayed in the parent
            self._on = False
            return None
        if type(keys) is not list:
            keys = list(keys)
        if not self._started:
            if not self._reached:
                try:
                    at = keys.index(self._head)
                except ValueError:
                    return None  # still in the lead
                self._reached = True
                if at:  # these keys straddle the head: read them, skip those read ahead
                    self._skip = keys[at:]
                    return None
            if self._at >= len(self._keys) and self._blocks.empty():
                self._skip += keys  # the first block is not ready: no wait at the start
                return None
            self._started = True
            skip, self._skip = self._skip, []
            if skip and self._advance(skip, keep=False) is None:
                return None  # a mismatch: closed
        return self._advance(keys, keep=True)

    def _advance(self, keys: list[int], keep: bool) -> list[Any] | None:
        """Moves past ``keys`` in the blocks, waiting for them: their records (``keep``; [] if
        not), or None (a failed block where kept, a mismatch, which closes the read-ahead)."""
        wanted, got = len(keys), 0
        parts: list[list[Any]] = []
        failed = False
        while got < wanted:
            at = self._at
            if at >= len(self._keys):
                item = self._blocks.get()
                if item is _END:
                    self.close()
                    return None
                self._keys, self._records = item
                at = self._at = 0
            count = min(wanted - got, len(self._keys) - at)
            if keys[got : got + count] != self._keys[at : at + count]:
                self.close()
                return None
            if self._records is None:
                failed = True
            elif keep and not failed:
                parts.append(self._records[at : at + count])
            self._at = at + count
            got += count
        if not keep:
            return []
        if failed:
            return None
        if len(parts) == 1:
            return parts[0]
        return [record for part in parts for record in part]

    def close(self) -> None:
        """Stops the read-ahead and waits for its thread; idempotent. Reads go on without it."""
        self._on = False
        self._keys, self._records = [], None
        self._finalizer()


def _end(thread: threading.Thread, blocks: queue.Queue[Any], stop: threading.Event) -> None:
    """Tells the thread to stop, frees the block waiting in the queue and waits for it."""
    stop.set()
    _drain(blocks)
    if thread is not threading.current_thread() and thread.ident is not None:
        thread.join(_JOIN_S)
    _drain(blocks)


def _drain(blocks: queue.Queue[Any]) -> None:
    while True:
        try:
            blocks.get_nowait()
        except queue.Empty:
            return


def _put(out: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Puts ``item`` once there is room; False if told to stop first."""
    while not stop.is_set():
        try:
            out.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _record_bytes(records: list[Any]) -> float:
    """The mean size of up to ``_SAMPLE`` records spread over ``records``."""
    step = max(1, len(records) // _SAMPLE)
    sample = records[::step]
    return sum(len(record) for record in sample) / max(1, len(sample))


def _read_ahead(
    read: Callable[[np.ndarray], list[Any]],
    keys_of: Callable[[int, int], Any],
    start: int,
    stop_at: int | None,
    blocks: tuple[int, int],
    fanout: int,
    *,
    out: queue.Queue[Any],
    stop: threading.Event,
) -> None:
    """The thread: reads blocks of keys from position ``start`` on into ``out`` until the keys
    end, ``stop`` is set, or the records prove too large for blocks of ``blocks[0]`` keys
    within the bytes the policy allows. Any error ends it (the consumer then reads itself)."""
    fewest, most = blocks
    size = fewest
    position = start
    try:
        while not stop.is_set():
            end = position + max(1, size // fanout)
            if stop_at is not None:
                end = min(end, stop_at)
            if end <= position:
                return
            keys = np.asarray(keys_of(position, end), dtype=np.int64).reshape(-1)
            if not keys.size:
                return
            if position == start:  # records larger in memory than on disk bound the first block
                head = read(keys[:_SAMPLE])
                if READ_POLICY.keys_within_bytes(_record_bytes(head)) < fewest:
                    return
            try:
                records: list[Any] | None = read(keys)
            except Exception:  # the consumer reads these keys itself and gets the error
                records = None
            listed = keys.tolist()
            if not _put(out, (listed, records), stop):
                return
            if len(listed) < (end - position) * fanout:
                return  # the stream ended
            position = end
            within = most
            if records:
                within = min(most, READ_POLICY.keys_within_bytes(_record_bytes(records)))
            if within < fewest:
                return
            size = min(within, size * 2)
    except Exception:
        return
    finally:
        _put(out, _END, stop)


def activate(reads: ListReads | None) -> ListReads | None:
    """Makes ``reads`` the read-ahead the reads of its source in this thread ask
    (:func:`active_for`); returns the one it replaces, for :func:`activate` after the reads."""
    previous: ListReads | None = getattr(_active, "reads", None)
    _active.reads = reads
    return previous


def active_for(source: Any) -> ListReads | None:
    """The read-ahead of ``source`` activated in this thread, or None."""
    reads: ListReads | None = getattr(_active, "reads", None)
    if reads is not None and reads.source is source:
        return reads
    return None
