"""Reads of a remote ArrayRecord file before its whole block is in the cache: only the records'
chunks are fetched, with ranged GETs, into a sparse copy in memory.

A cold start would otherwise wait for whole files: a shuffled first batch touches every file, so
the first batch waited for the whole dataset (133 MB of ``images`` took 1.1 s at 1 Gbit/s, the
first batch 0.9 s later than from local disk). A :class:`PartialCopy` serves those first reads
while the cache downloads the whole files; the source switches to the cached block as soon as it
is there.

How a record's bytes are found without parsing the format: the copy is a ``memfd`` of the
object's size holding its first block and its tail (the index, as :func:`~grainlite.sources.
remote.files.count_records` found it), so array_record's own reader opens it. Reading a record
whose chunk is not there yet fails with riegeli's error naming the offset of the chunk, or of
the 64 KiB block header inside it, that is missing (``chunk at N``, ``block at N``); bytes from
there are fetched, written into the copy, and the read tried again. Riegeli checks
each chunk's header and data against their hashes, so a record is served only once all of its
bytes are those of the object; nothing half-fetched is ever returned.

The copy gives up (the source then waits for the cached block, as without it) where an error
names no chunk, a chunk is still incomplete after :data:`ROUNDS` fetches, or the bytes fetched
pass :data:`BUDGET_BYTES`; it never raises for a read it cannot serve. Linux only (``memfd``);
elsewhere reads wait for the block.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from grainlite.sources.remote.cache import Blob
from grainlite.sources.remote.client import read_ranges

ROUNDS = 4
"""Fetch rounds per read before giving up (each doubles the bytes fetched at a chunk)."""
BUDGET_BYTES = 32 << 20
"""The most bytes one copy fetches (beyond its index): past this, the whole block is the cheaper
way, and reads wait for it."""
HEAD_BYTES = 64 << 10
"""The file's first block: riegeli's file signature."""
_MIN_SPAN = 16 << 10
_SMALL_FILE_FACTOR = 4  # a file under this many times its head and tail is fetched whole first
_MAX_SPAN = 1 << 20
_MISSING_AT = re.compile(r"(?:chunk|block) at (\d+)")
_WAIT_S = 60.0  # the longest wait for another thread's fetch (a fetch retries, then raises)

AVAILABLE = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")
"""Whether reads can go ahead of the cache on this system."""


def first_span(size: int, records: int, written_with: str, tail: int) -> int:
    """Bytes to fetch at a chunk's offset the first time: about twice a chunk's mean size (its
    records times the mean record, from the file's size, record count and ``group_size``).
    0 where reading ahead of the cache does not pay: the file is small (its head and ``tail``,
    fetched first, are a large part of it) or its chunks are large (files written with large
    groups); its reads wait for the block."""
    if size < _SMALL_FILE_FACTOR * (HEAD_BYTES + tail):
        return 0
    group = re.search(r"group_size:(\d+)", written_with)
    per_chunk = int(group[1]) if group else 65536  # array_record's default group
    chunks = max(1, -(-max(records, 1) // max(per_chunk, 1)))
    mean = size // chunks
    if 2 * mean > _MAX_SPAN:
        return 0
    return max(_MIN_SPAN, 2 * mean + 4096)


class PartialCopy:
    """A sparse in-memory copy of ``blob`` with its head and its last ``tail`` bytes, read by an
    array_record reader that ``open_reader(path, options)`` opens; :meth:`read` fetches the
    chunks its records need, ``span`` bytes at a chunk first (:func:`first_span`).

    ``options`` must set ``readahead_buffer_size:0``: a read then touches exactly its chunk,
    never buffering bytes not fetched yet."""

    def __init__(
        self,
        blob: Blob,
        tail: int,
        span: int,
        options: str,
        storage_options: dict[str, Any] | None,
        open_reader: Callable[[str, str], Any],
    ) -> None:
        self.blob = blob
        self._span = span
        self._storage_options = storage_options
        self._lock = threading.Lock()
        self._fetched = 0
        self._spans: dict[int, int] = {}  # chunk offset -> bytes fetched there
        self._in_flight: dict[int, threading.Event] = {}  # chunk offsets being fetched
        self._fd = os.memfd_create("grainlite-partial", os.MFD_CLOEXEC)
        self.reader: Any = None
        try:
            os.ftruncate(self._fd, blob.size)
            head = min(HEAD_BYTES, blob.size)
            start = max(head, blob.size - tail)
            self._fetch([(0, head), (start, blob.size)] if start < blob.size else [(0, head)])
            # No read-ahead: a read touches exactly its chunk, never bytes not fetched yet.
            self.reader = open_reader(f"/proc/self/fd/{self._fd}", options)
        except BaseException:
            self.close()
            raise

    def read(self, positions: Sequence[int]) -> list[bytes] | None:
        """The records at ``positions`` of the file, in order, fetching their chunks first; None
        where the copy cannot serve them (the caller waits for the cached block). Threads may
        read at once: a chunk another thread is fetching is waited for, not fetched again."""
        records: list[bytes | None] = [None] * len(positions)
        for _ in range(ROUNDS + 1):
            missing: set[int] = set()
            for slot, position in enumerate(positions):
                if records[slot] is not None:
                    continue
                try:
                    records[slot] = self.reader.read(position, position + 1)[0]
                except RuntimeError as error:
                    found = _MISSING_AT.search(str(error))
                    if found is None:
                        return None
                    missing.add(int(found[1]))
            if not missing:
                return records  # type: ignore[return-value]
            if not self._fetch_chunks(sorted(missing)):
                return None
        return None

    def _fetch_chunks(self, offsets: list[int]) -> bool:
        """Fetches the chunks at ``offsets`` (twice the bytes of a fetch that fell short), or
        waits for another thread's fetch of them; False past the byte budget."""
        ranges: list[tuple[int, int]] = []
        others: list[threading.Event] = []
        with self._lock:
            for at in offsets:
                event = self._in_flight.get(at)
                if event is not None:
                    others.append(event)
                    continue
                span = 2 * self._spans.get(at, 0) or self._span
                ranges.append((at, min(self.blob.size, at + span)))
            cost = sum(end - start for start, end in ranges)
            if self._fetched + cost > BUDGET_BYTES:
                return False
            self._fetched += cost
            mine = {at: threading.Event() for at, _ in ranges}
            self._in_flight.update(mine)
        try:
            if ranges:
                self._fetch(ranges)
        finally:
            with self._lock:
                for at, end in ranges:
                    self._spans[at] = max(self._spans.get(at, 0), end - at)
                    del self._in_flight[at]
                    mine[at].set()
        for event in others:
            event.wait(_WAIT_S)
        return True

    def _fetch(self, ranges: list[tuple[int, int]]) -> None:
        fetched = read_ranges(self.blob.url, ranges, self._storage_options)
        for (start, _), data in zip(ranges, fetched):
            written = 0
            while written < data.nbytes:
                written += os.pwrite(self._fd, data[written:], start + written)

    def close(self) -> None:
        """Closes the reader and frees the copy's memory; idempotent."""
        reader, self.reader = self.reader, None
        if reader is not None:
            reader.close()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at exit the memory goes with the process anyway
            self.close()
