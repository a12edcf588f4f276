"""A block of the host's cache (:mod:`grainlite.sources.remote.cache`) as it lies on disk: the
remote object it holds, its name, its checksum, and the pin that holds it while it is read.

One object is one block, ``KEY.blk``: KEY hashes the URL, size and ETag (:attr:`Blob.key`; a
changed object is a new block), so a block is found by its name alone, without listing the
folder (a folder of thousands of objects' files took milliseconds to list, per lookup). What
its bytes must sum to (:func:`checksum`, checked on first use) is in ``KEY.sum``
(:func:`write_sum`), written by the download before the block is renamed into place. An
object's bytes, and so its checksum, never change under one KEY, so ``KEY.sum`` outlives the
block's eviction, as ``KEY.lock`` does: a few bytes per object, not counted in the room.

**Checked once per run, again once changed.** The process that downloads a block, or the first
that reads all of it back to check it, records the check in ``KEY.ok`` (:func:`record_check`):
the run that checked (:attr:`ProcessState.run
<grainlite.sources.remote.cache_process.ProcessState.run>`, the token of the training process,
which its workers get with the source) and the block's :func:`mark` when checked. The other
processes of that run trust the check while the run goes on (its training process lives) and the
block's mark is the same (:func:`checked_in_run`): a write through the file system changes its
modification and change times, a replaced block its inode. A new run checks each block again,
on first use.

**Held while read.** A reader holds a block with a shared ``flock`` on it (a :class:`Pin`);
eviction (:mod:`grainlite.sources.remote.cache_room`) takes the block only if it gets an
exclusive lock, so a block being read is never removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grainlite.sources.remote.cache_process import process_state, run_alive

PART_BYTES = 8 << 20
"""Bytes per ranged GET of a download, and per CRC-32 of the checksum."""


@dataclass(frozen=True)
class Blob:
    """One remote object to cache: its ``url``, ``size`` and ``etag``."""

    url: str
    size: int
    etag: str

    @property
    def key(self) -> str:
        """The block's name stem: a hash of the URL, size and ETag."""
        text = f"{self.url}\0{self.size}\0{self.etag}".encode()
        return hashlib.sha1(text).hexdigest()


def write_at(fd: int, start: int, data: Any) -> None:
    """Writes all of ``data`` (bytes or a buffer) into ``fd`` at offset ``start``: ``pwrite``
    may write less than it is given, so it is called until every byte is written."""
    view = memoryview(data).cast("B")
    written = 0
    while written < view.nbytes:
        written += os.pwrite(fd, view[written:], start + written)


def checksum(fd: int, size: int) -> int:
    """The block checksum of the first ``size`` bytes of ``fd``: the CRC-32 of the CRC-32s of its
    :data:`PART_BYTES` parts (so parts downloaded in parallel are summed as they arrive)."""
    crcs = bytearray()
    # One buffer read into again: a new 8 MiB bytes object per part doubled the time (0.11 s
    # against 0.05 s for the 139 MB of the images benchmark's files), every worker paying it once.
    buffer = memoryview(bytearray(min(PART_BYTES, size)))
    for start in range(0, size, PART_BYTES):
        part = buffer[: min(PART_BYTES, size - start)]
        read = os.preadv(fd, [part], start)  # fewer bytes only past the end: the check fails
        crcs += zlib.crc32(part[:read]).to_bytes(4, "big")
    return zlib.crc32(bytes(crcs))


Mark = tuple[int, int, int, int]
"""What a block was when it was checked: its inode, size, and modification and change times in
nanoseconds. Writing into the block, or setting its times, changes the change time."""


def mark(stat: os.stat_result) -> Mark:
    """The :data:`Mark` of a block from its ``stat``."""
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def block_path(directory: Path, key: str) -> Path:
    """The block of object ``key``: ``KEY.blk``."""
    return directory / f"{key}.blk"


def write_sum(directory: Path, key: str, crc: str) -> None:
    """Writes ``crc``, the checksum of object ``key``, into ``KEY.sum``: whole or not at all (a
    new file renamed over the old). Called by the one process that holds the object's download
    lock, before its block is renamed into place, so a block's checksum is there before it is."""
    new = directory / f"{key}.sum.new"  # one writer per key at a time: the download lock
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{crc}\n".encode())
    finally:
        os.close(fd)
    os.replace(new, directory / f"{key}.sum")


def read_sum(directory: Path, key: str) -> str | None:
    """The checksum of object ``key`` from ``KEY.sum``; None if it is missing or damaged (the
    block is then fetched again, which writes it anew)."""
    try:
        text = (directory / f"{key}.sum").read_text()
    except (OSError, UnicodeDecodeError):
        return None
    crc = text[:-1]
    if not text.endswith("\n") or len(crc) != 8 or crc.strip("0123456789abcdef"):
        return None
    return crc


def check_record_path(directory: Path, key: str) -> Path:
    """The file recording the last check of block ``key``: ``KEY.ok`` (not counted in the room:
    a few dozen bytes)."""
    return directory / f"{key}.ok"


def record_check(directory: Path, key: str, run: str, crc: str, when: Mark) -> None:
    """Records that a process of ``run`` checked block ``key`` (checksum ``crc``) as it was at
    ``when`` (its mark taken before it was read, so a write after that changes the mark).

    One short write replaces the record; a reader that sees it half-written finds no match and
    checks the block itself. A folder that refuses the write only costs later checks."""
    text = " ".join([run, crc, *map(str, when)]) + "\n"
    with contextlib.suppress(OSError):
        path = check_record_path(directory, key)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def checked_in_run(directory: Path, key: str, run: str, crc: str, now: Mark) -> bool:
    """Whether a process of ``run``, a run still going (its training process lives), checked
    block ``key`` (checksum ``crc``) and the block is still what it was then (its mark is
    ``now``)."""
    if not run_alive(run):
        return False
    try:
        text = check_record_path(directory, key).read_text()
    except (OSError, UnicodeDecodeError):
        return False
    return text.endswith("\n") and text[:-1].split(" ") == [run, crc, *map(str, now)]


class Pin:
    """A block held for reading: a shared lock on it, released by :meth:`release` (or when the
    pin is collected: a dropped source never holds a block for the rest of the process).

    The process counts the bytes its live pins hold (:meth:`CacheRoom._reserve
    <grainlite.sources.remote.cache_room.CacheRoom._reserve>` uses it to tell a wait that only
    this process could end from one that another process ends)."""

    def __init__(self, path: Path, fd: int, size: int) -> None:
        self.path = path
        self.size = size
        self._fd: int | None = fd
        self._pid = os.getpid()
        state = process_state()
        with state.lock:
            state.pinned += size

    def release(self) -> None:
        """Lets the block go (eviction may then take it); idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            if self._pid == os.getpid():
                state = process_state()
                with state.lock:
                    state.pinned -= self.size

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()
