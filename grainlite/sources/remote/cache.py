"""The host's cache of remote files: whole objects in a local folder, shared by every process of
the host without a server, within a size limit that is never exceeded.

One object is one *block*: ``KEY.blk``, where KEY hashes the URL, size and ETag (a changed
object is a new block), found by that name without listing the folder; its checksum
(:func:`~grainlite.sources.remote.cache_blocks.checksum`) is in ``KEY.sum``. The rules:

- **One download per block per host.** A process takes ``KEY.lock`` (``flock``, exclusive) before
  it downloads a block; the others wait on it and then find the block. A lock dies with its
  process, so a reader that dies mid-download never blocks the others.
- **Nothing half-written is served.** A download goes to ``KEY.PID.TOKEN.part`` (locked by its
  writer) and is renamed to its ``.blk`` name, atomically, only once every byte arrived and the
  checksum is computed and written to ``KEY.sum``. A ``.part`` whose writer is gone (its lock is
  free) is removed.
- **The limit holds on disk.** Space is reserved under ``.space.lock`` before a download: the
  ``.part`` file is sized to the whole object at once, and the sizes of all ``.blk`` and
  ``.part`` files together never pass the limit. To make room, the least recently used blocks
  that no reader holds are removed; where every block is held, the download waits (and tells
  the other processes, through ``.waiting``, to let go of blocks they hold but do not read).
- **Checked once per run.** A block's size and checksum are checked the first time a run uses
  it (computed as it is written, by the process that downloads it); the other processes of the
  run, its workers, trust that check while the block is unchanged on disk, and check it again
  otherwise (:mod:`~grainlite.sources.remote.cache_blocks`). A damaged block is removed and
  fetched again, never served. A new run checks every block again.
- **Held while read.** A reader holds a block with a shared ``flock`` on it (a
  :class:`~grainlite.sources.remote.cache_blocks.Pin`); eviction takes the block only if it gets
  an exclusive lock, so a block being read is never removed.

This module is the cache that reads and downloads (:class:`ShardCache`: the download locks,
the checks on use, the downloads). The rest lives beside it: a block on disk, its checksum and
its pin in :mod:`grainlite.sources.remote.cache_blocks`; the limit, with reservation, eviction
and the removal of orphaned ``.part`` files, in :mod:`grainlite.sources.remote.cache_room`; what
each process keeps (download threads, blocks checked, bytes pinned) in
:mod:`grainlite.sources.remote.cache_process`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from grainlite.errors import GrainliteValueError
from grainlite.sources.remote.cache_blocks import (
    PART_BYTES,
    Blob,
    Pin,
    block_path,
    checked_in_run,
    checksum,
    mark,
    read_sum,
    record_check,
    write_at,
    write_sum,
)
from grainlite.sources.remote.cache_process import process_state
from grainlite.sources.remote.cache_room import CacheRoom
from grainlite.sources.remote.objects import stream_range


def default_directory() -> Path:
    """The cache folder when none is given: ``GRAINLITE_CACHE_DIR``, else
    ``<system temp>/grainlite-cache``."""
    return Path(
        os.environ.get("GRAINLITE_CACHE_DIR") or Path(tempfile.gettempdir()) / "grainlite-cache"
    )


class ShardCache(CacheRoom):
    """The cache folder ``directory`` with at most ``limit_bytes`` of blocks in it (its room is
    kept by :class:`~grainlite.sources.remote.cache_room.CacheRoom`).

    Args:
      directory: the folder (made when first used); None: :func:`default_directory`.
      limit_bytes: the most bytes of blocks (whole and being downloaded) the folder holds; None:
        three quarters of the free space of its file system when the cache is made.
      storage_options: the object-storage settings the downloads use.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        limit_bytes: int | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_directory()
        self.directory.mkdir(parents=True, exist_ok=True)
        if limit_bytes is None:
            space = os.statvfs(self.directory)  # shutil.disk_usage's answer, without shutil's
            limit_bytes = space.f_bavail * space.f_frsize * 3 // 4  # imports (bz2, lzma: 4 ms)
        elif isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes <= 0:
            raise GrainliteValueError(
                f"cache_limit_bytes must be an int > 0 (got {limit_bytes!r:.200}); pass the most "
                f"bytes the cache folder may hold, e.g. 20 * 2**30."
            )
        self.limit = int(limit_bytes)
        self.storage_options = storage_options
        self.run = process_state().run  # travels with the source to the run's workers

    def check_fits(self, blobs: list[Blob]) -> None:
        """Raises if one of ``blobs`` is larger than the limit (it could never be cached)."""
        largest = max(blobs, key=lambda blob: blob.size, default=None)
        if largest is not None and largest.size > self.limit:
            raise GrainliteValueError(
                f"The cache limit of {self.limit} bytes is smaller than {largest.url!r} "
                f"({largest.size} bytes): a file is cached whole. Pass cache_limit_bytes >= "
                f"{largest.size} (better, a few files' worth per worker), or split the data into "
                f"smaller files."
            )

    # -- reading -------------------------------------------------------------------------------

    def acquire(self, blob: Blob, on_wait: Callable[[], None] | None = None) -> Pin:
        """The block of ``blob``, whole and checked, held for reading; downloaded if needed.

        ``on_wait`` is called before waiting for room (release what this process holds idle).
        """
        pin = self._pin_complete(blob)
        if pin is not None:
            return pin
        with self._block_lock(blob, on_wait):
            pin = self._pin_complete(blob)
            if pin is not None:
                return pin
            part = self._reserve(blob, on_wait)
            assert part is not None
            return self._download(blob, *part)

    def fetch_ahead(self, blob: Blob) -> None:
        """Downloads ``blob`` in the background if it is missing and fits in free room (never
        evicting for it); returns at once. Errors are left for the read that needs it."""
        if self.has_block(blob):  # one stat: a hint of a cached file costs no thread's work
            return
        state = process_state()
        with state.lock:
            if blob.key in state.queued:
                return
            state.queued[blob.key] = state.ahead.submit(self._fetch_quietly, blob)

    def _fetch_quietly(self, blob: Blob) -> None:
        try:
            with contextlib.suppress(Exception):
                if self.has_block(blob):
                    return
                lock = self._try_block_lock(blob)
                if lock is None:
                    return  # another process downloads it
                try:
                    if not self.has_block(blob):
                        part = self._reserve(blob, None, evict=False)
                        if part is not None:
                            self._download(blob, *part).release()
                finally:
                    os.close(lock)
        finally:  # a later call asks again (the other process may have died mid-download)
            with process_state().lock:
                process_state().queued.pop(blob.key, None)

    def has_block(self, blob: Blob) -> bool:
        """Whether the whole block of ``blob`` is in the folder (checked when first read)."""
        return block_path(self.directory, blob.key).exists()

    def _pin_complete(self, blob: Blob) -> Pin | None:
        """A pin on the complete block of ``blob``, checked; None if there is none (a damaged
        one is removed)."""
        path = block_path(self.directory, blob.key)
        while True:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None  # not cached, or evicted or removed as damaged meanwhile
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                now = os.fstat(fd)
                same = os.stat(path).st_ino == now.st_ino
            except FileNotFoundError:
                same = False
            if not same:  # evicted between the open and the lock
                os.close(fd)
                continue
            if self._intact(path, fd, now, blob):
                with contextlib.suppress(OSError):  # most recently used (the block's own times
                    os.utime(self.directory / f"{blob.key}.lock")  # are its check's mark)
                return Pin(path, fd, now.st_size)
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == now.st_ino:  # not a new block renamed in meanwhile
                    path.unlink()  # damaged: never served, fetched again

    def _intact(self, path: Path, fd: int, now: os.stat_result, blob: Blob) -> bool:
        """Whether the block at ``path`` (open as ``fd``, ``now`` its stat) is whole and
        undamaged: checked in this process or run while it was as it is now, else read and
        checked (and the check recorded for the run)."""
        state = process_state()
        seen = (str(path), mark(now))
        if seen in state.checked:
            return True
        crc = read_sum(self.directory, blob.key)
        if crc is None or now.st_size != blob.size:
            return False
        if not checked_in_run(self.directory, blob.key, self.run, crc, seen[1]):
            if f"{checksum(fd, now.st_size):08x}" != crc:
                return False
            record_check(self.directory, blob.key, self.run, crc, seen[1])
        state.checked.add(seen)
        return True

    # -- download locks ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _block_lock(self, blob: Blob, on_wait: Callable[[], None] | None) -> Iterator[None]:
        """The block's download lock. While another process holds it (downloading the block, may
        be waiting for room), this one lets its idle blocks go when a process waits for room."""
        while True:
            fd = self._try_block_lock(blob)
            if fd is not None:
                break
            if on_wait is not None and self.under_pressure():
                on_wait()
            time.sleep(0.01)
        try:
            yield
        finally:
            os.close(fd)

    def _try_block_lock(self, blob: Blob) -> int | None:
        fd = os.open(self.directory / f"{blob.key}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    # -- downloading ---------------------------------------------------------------------------

    def _download(self, blob: Blob, part: Path, fd: int) -> Pin:
        """Fills ``part`` (open as ``fd``) with the object, renames it into place and pins it
        (its writer's lock becomes the reader's: the block is never free between the two)."""
        try:
            crcs = self._fetch_parts(blob, fd)
            crc = zlib.crc32(b"".join(value.to_bytes(4, "big") for value in crcs))
            write_sum(self.directory, blob.key, f"{crc:08x}")  # before the block is there
            final = block_path(self.directory, blob.key)
            fcntl.flock(fd, fcntl.LOCK_SH)
            with self._space_lock():  # a listing under the lock never misses the renamed file
                os.rename(part, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
            os.close(fd)
            raise
        written = mark(os.fstat(fd))  # after the rename, which sets the change time
        process_state().checked.add((str(final), written))
        record_check(self.directory, blob.key, self.run, f"{crc:08x}", written)
        return Pin(final, fd, blob.size)

    def _fetch_parts(self, blob: Blob, fd: int) -> list[int]:
        """Downloads every part of ``blob`` into ``fd`` with ranged GETs in parallel, each
        written as its chunks arrive; returns the CRC-32 of each part."""

        def fetch(start: int) -> int:
            def write(chunks: Iterator[memoryview]) -> int:  # called again on a retry
                crc, offset = 0, start
                for chunk in chunks:
                    write_at(fd, offset, chunk)
                    crc = zlib.crc32(chunk, crc)
                    offset += chunk.nbytes
                return crc

            end = min(blob.size, start + PART_BYTES)
            return stream_range(blob.url, start, end, write, self.storage_options)

        starts = range(0, blob.size, PART_BYTES)
        if len(starts) <= 1:
            return [fetch(start) for start in starts]
        futures = [process_state().parts.submit(fetch, start) for start in starts]
        try:
            return [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            for future in futures:
                with contextlib.suppress(BaseException):
                    future.result()
            raise
