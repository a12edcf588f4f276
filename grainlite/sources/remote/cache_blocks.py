"""A block of the host's cache (:mod:`grainlite.sources.remote.cache`) as it lies on disk: the
remote object it holds, its name, its checksum, and the pin that holds it while it is read.

One object is one block, ``KEY.CRC.blk``: KEY hashes the URL, size and ETag (:attr:`Blob.key`; a
changed object is a new block) and CRC is the block's checksum (:func:`checksum`), so a block's
name alone says which object it holds and what its bytes must sum to (checked on first use).

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

from grainlite.sources.remote.cache_process import process_state

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
