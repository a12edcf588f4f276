"""The first worker's first records of a cold remote ArrayRecord source, fetched by exact ranges
while the whole files are still downloading, so the first batch does not wait for every file.

A shuffled first batch holds records of every file, so with whole files alone it waited for the
whole dataset (133 MB of ``images`` take 1.1 s at 1 Gbit/s). The training process knows, before
its workers start, which keys the first worker reads first (its sampler and its worker layout).
It fetches only those records' chunks, with ranged GETs, into one *first copy* per file while the
cache downloads the whole files; the first worker's first reads are served from the copies.

- **What a copy is.** A sealed ``memfd`` of the object's size (sparse: only what was fetched takes
  memory) holding the file's first block, its index tail and the chunks of the records asked
  for. The first block and the tail are those the source read the file's index from when it
  was built, where it kept them (sources of at most :data:`MAX_FILES` files, until reading
  begins), else fetched in one round trip. array_record's own reader reads it; riegeli checks
  every chunk against its hashes, so a record is served only whole and as the object holds it.
  Where a chunk is not there, the read fails with riegeli's error naming the chunk's offset: the
  training process fetches those offsets (the reads name the chunks, no format is parsed here);
  a worker's read that finds one missing waits for the cached block instead, as it would
  without copies.
- **How a worker finds it.** The pickled source carries the training process's pid and each
  copy's descriptor number (:func:`shared_copies`). The worker opens
  ``/proc/PID/fd/N``, checks that it is the memfd of that very object (its name holds the block's
  key) and waits until it is sealed (complete), at most :data:`WAIT_S`.
- **Nothing left behind.** A memfd lives in memory only while a process holds it: no file is
  made, and every copy is gone when the last process holding it exits, however it exits. The
  training process closes each copy a second after its whole block is cached (every copy after
  :data:`KEEP_S`); the workers close theirs when they switch to the cached block.

Not copied (their reads wait for the whole block, as before): files under four times their
head and first index tail (fetched whole about as soon), files written with large groups (whose
chunks are large), and the files past the first :data:`MAX_FILES` the keys touch. Linux only
(``memfd`` and ``/proc``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grainlite.sources.array_record_files import written_group_size
from grainlite.sources.distinct import first_positions
from grainlite.sources.remote.cache_blocks import Blob, write_at
from grainlite.sources.remote.files import FIRST_TAIL, HEAD_BYTES
from grainlite.sources.remote.idle_pool import IdlePool
from grainlite.sources.remote.objects import read_ranges

AVAILABLE = (
    hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS") and os.path.isdir("/proc/self/fd")
)
"""Whether first copies can be made on this system."""
COPY_OPTIONS = "readahead_buffer_size:0"
"""How copies are read: no read-ahead, so a read touches its own chunk, never bytes not fetched."""
ROUNDS = 4
"""Fetch rounds per copy before it is sealed as it is (each doubles the bytes at a chunk)."""
WAIT_S = 10.0
"""The longest a worker waits for a copy to be sealed before it waits for the block instead."""
KEEP_S = 120.0
"""The longest the training process keeps its copies while the whole blocks are not cached."""
MAX_FILES = 64
"""The most files one source copies at once (:func:`keys_within_files`)."""
FILL_THREADS = 16
"""Copies filled at once (each fetches its file's edges, then its chunks, in one call a round)."""
_SMALL_FILE_FACTOR = 4
_GRACE_S = 1.0  # copies are kept this long after the blocks are cached
_SPAN_BYTES = 16 << 10  # the bytes first fetched at a chunk's offset (doubled on a short fetch)
_MAX_MEAN_CHUNK = 256 << 10  # files whose chunks are larger than this are not copied
_MISSING_AT = re.compile(r"(?:chunk|block) at (\d+)")
_SEAL_WRITE = getattr(fcntl, "F_SEAL_WRITE", 8)
_SEALS = (
    getattr(fcntl, "F_SEAL_SEAL", 1)
    | getattr(fcntl, "F_SEAL_SHRINK", 2)
    | getattr(fcntl, "F_SEAL_GROW", 4)
    | _SEAL_WRITE
)
_NAME = "grainlite-first-"

_lock = threading.Lock()
_copies: dict[str, int] = {}  # block key -> this process's memfd of its first copy


def shared_copies(blobs: Sequence[Blob | None]) -> tuple[int, dict[int, int]] | None:
    """What a pickled source tells its workers: ``(pid, {file index: memfd number})`` of the
    first copies this process holds for ``blobs``; None where it holds none."""
    with _lock:
        found = {
            index: _copies[blob.key]
            for index, blob in enumerate(blobs)
            if blob is not None and blob.key in _copies
        }
    return (os.getpid(), found) if found else None


def worth_copying(blob: Blob | None) -> bool:
    """Whether a first copy of ``blob`` pays: a remote file several times larger than its head
    and first index tail (a smaller one is fetched whole about as soon)."""
    return blob is not None and blob.size >= _SMALL_FILE_FACTOR * (HEAD_BYTES + FIRST_TAIL)


def keys_within_files(file_of: np.ndarray) -> int:
    """How many of the keys in reading order (``file_of``: each key's file) to copy: those
    before the key of the :data:`MAX_FILES` + 1-th file they touch (each copy costs its file's
    head and index; the reads past them wait for the files, as without copies)."""
    first = first_positions(file_of)
    if first.size <= MAX_FILES:
        return int(file_of.size)
    return int(first[MAX_FILES])


Edges = tuple[memoryview, memoryview]
"""A file's first bytes and last bytes, as :func:`~grainlite.sources.remote.files.inspect_file`
fetched them."""


def start_copies(
    work: Sequence[tuple[Blob, list[int], Edges | None]],
    open_reader: Callable[[str, str], Any],
    storage_options: dict[str, Any] | None,
    cached: Callable[[Blob], bool],
) -> None:
    """Starts the first copies of ``work``'s ``(blob, record positions, edges)`` in the
    background and returns at once, their memfds made (so a pickle of the source made now names
    them). ``edges``: the head and tail the source read the file's index from, where it kept
    them (the copy then starts from them, not from a round trip of its own). ``cached(blob)``
    says when the whole block of ``blob`` is in the cache: its copy is then let go."""
    made = []
    with _lock:
        for blob, positions, edges in work:
            if blob.key in _copies or not positions:
                continue
            fd = os.memfd_create(f"{_NAME}{blob.key}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, blob.size)
            _copies[blob.key] = fd
            made.append((blob, positions, fd, edges))
    if made:
        threading.Thread(
            target=_fill_all,
            args=(made, open_reader, storage_options, cached),
            daemon=True,
            name="grainlite-first-copies",
        ).start()


def _fill_all(
    made: list[tuple[Blob, list[int], int, Edges | None]],
    open_reader: Callable[[str, str], Any],
    storage_options: dict[str, Any] | None,
    cached: Callable[[Blob], bool],
) -> None:
    """Fills the copies (:data:`FILL_THREADS` at once), then keeps each until its block is
    cached."""
    try:
        pool = IdlePool(FILL_THREADS, "grainlite-first-copy")  # daemons: never hold up an exit
        fills = [
            pool.submit(_fill_and_seal, blob, positions, fd, edges, open_reader, storage_options)
            for blob, positions, fd, edges in made
        ]
        for fill in fills:
            fill.result()
        deadline = time.monotonic() + KEEP_S
        seen: dict[int, float] = {}  # copy -> when its block was first seen cached
        while len(made) > len(seen) and time.monotonic() < deadline:
            time.sleep(0.1)
            now = time.monotonic()
            for blob, _, fd, _ in made:
                if fd not in seen and cached(blob):
                    seen[fd] = now
            for blob, _, fd, _ in made:  # a worker that saw no block just before it came opens
                if now - seen.get(fd, now) >= _GRACE_S:  # the copy meanwhile: kept a while
                    _let_go(blob, fd)
        time.sleep(_GRACE_S)
    finally:
        for blob, _, fd, _ in made:
            _let_go(blob, fd)


def _let_go(blob: Blob, fd: int) -> None:
    """Closes this process's copy of ``blob`` (``fd``), once."""
    with _lock:
        if _copies.get(blob.key) == fd:
            del _copies[blob.key]
            os.close(fd)


def _fill_and_seal(
    blob: Blob,
    positions: list[int],
    fd: int,
    edges: Edges | None,
    open_reader: Callable[[str, str], Any],
    storage_options: dict[str, Any] | None,
) -> None:
    """Fills the copy, then seals it, complete or not (a worker's read of a chunk that is not
    there reads the block instead)."""
    try:
        with contextlib.suppress(Exception):  # an incomplete copy only sends reads to the block
            _fill(blob, positions, fd, edges, open_reader, storage_options)
    finally:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)


def _write(fd: int, ranges: list[tuple[int, int]], url: str, storage_options: Any) -> None:
    for (start, _), data in zip(ranges, read_ranges(url, ranges, storage_options)):
        write_at(fd, start, data)


def _open_edges(
    blob: Blob,
    fd: int,
    edges: Edges | None,
    open_reader: Callable[[str, str], Any],
    storage: Any,
) -> Any:
    """A reader of the copy once its head and index tail are in it (the tail grown, as
    :func:`~grainlite.sources.remote.files.count_records` does, until the index fits), from
    ``edges`` where given, else fetched."""
    head = min(HEAD_BYTES, blob.size)
    have = blob.size  # bytes from here on are in the copy
    tail = FIRST_TAIL
    ranges = [(0, head)]  # the head comes with the first tail: one round trip
    if edges is not None and edges[0].nbytes >= head and 0 < edges[1].nbytes <= blob.size:
        write_at(fd, 0, edges[0][:head])
        tail = edges[1].nbytes
        have = blob.size - tail
        write_at(fd, have, edges[1])
        ranges = []
    while True:
        start = max(head, blob.size - tail)
        if start < have:
            ranges.append((start, have))
        _write(fd, ranges, blob.url, storage)
        have, ranges = min(have, start), []
        reader = open_reader(f"/proc/self/fd/{fd}", COPY_OPTIONS)
        if reader.num_records() or start <= head:
            return reader
        reader.close()
        tail *= 4


def _mean_chunk(blob: Blob, reader: Any) -> int:
    """The mean bytes of one chunk of ``blob``: its records per chunk (``group_size``, written
    in its options) times the mean bytes of a record."""
    per_chunk = written_group_size(reader.writer_options_string()) or 65536  # the default
    records = max(1, reader.num_records())
    return blob.size // records * min(per_chunk, records)


def _fill(
    blob: Blob,
    positions: list[int],
    fd: int,
    edges: Edges | None,
    open_reader: Callable[[str, str], Any],
    storage_options: dict[str, Any] | None,
) -> None:
    """Fetches the chunks of ``positions`` into the copy: each round reads every record not
    read yet, and fetches the chunks their errors name (twice the bytes where a chunk was
    fetched short), all in one call."""
    reader = _open_edges(blob, fd, edges, open_reader, storage_options)
    try:
        if _mean_chunk(blob, reader) > _MAX_MEAN_CHUNK:
            return  # large chunks (large groups): the whole block is the cheaper way
        spans: dict[int, int] = {}
        waiting = list(positions)
        for _ in range(ROUNDS):
            missing = set()
            left = []
            for position in waiting:
                try:
                    reader.read(position, position + 1)
                except RuntimeError as error:
                    found = _MISSING_AT.search(str(error))
                    if found is None:
                        return  # not a missing chunk: the worker's read of the block says what
                    missing.add(int(found[1]))
                    left.append(position)
            if not missing:
                return
            ranges = []
            for at in sorted(missing):
                spans[at] = 2 * spans.get(at, 0) or _SPAN_BYTES
                ranges.append((at, min(blob.size, at + spans[at])))
            _write(fd, ranges, blob.url, storage_options)
            waiting = left
    finally:
        reader.close()


def open_copy(shared: tuple[int, dict[int, int]], index: int, blob: Blob) -> int | None:
    """This process's descriptor of file ``index``'s first copy that ``shared`` names, once it
    is sealed; None where there is none (gone, not that object, or not sealed in time)."""
    pid, fds = shared
    number = fds.get(index)
    if number is None or pid == os.getpid():
        return None
    try:
        fd = os.open(f"/proc/{pid}/fd/{number}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not os.readlink(f"/proc/self/fd/{fd}").startswith(f"/memfd:{_NAME}{blob.key} "):
            os.close(fd)
            return None
        deadline = time.monotonic() + WAIT_S
        while not fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEAL_WRITE:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            time.sleep(0.005)
    except OSError:
        os.close(fd)
        return None
    return fd
