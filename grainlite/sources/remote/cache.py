"""The host's cache of remote files: whole objects in a local folder, shared by every process of
the host without a server, within a size limit that is never exceeded.

One object is one *block*: ``KEY.CRC.blk``, where KEY hashes the URL, size and ETag (a changed
object is a new block) and CRC is the block's checksum (:func:`checksum`). The rules:

- **One download per block per host.** A process takes ``KEY.lock`` (``flock``, exclusive) before
  it downloads a block; the others wait on it and then find the block. A lock dies with its
  process, so a reader that dies mid-download never blocks the others.
- **Nothing half-written is served.** A download goes to ``KEY.PID.TOKEN.part`` (locked by its
  writer) and is renamed to its ``.blk`` name, atomically, only once every byte arrived and the
  checksum is computed. A ``.part`` whose writer is gone (its lock is free) is removed.
- **The limit holds on disk.** Space is reserved under ``.space.lock`` before a download: the
  ``.part`` file is sized to the whole object at once, and the sizes of all ``.blk`` and
  ``.part`` files together never pass the limit. To make room, the least recently used blocks
  that no reader holds are removed; where every block is held, the download waits (and tells
  the other processes, through ``.waiting``, to let go of blocks they hold but do not read).
- **Checked on use.** A process checks a block's size and checksum the first time it uses it; a
  damaged block is removed and fetched again, never served.
- **Held while read.** A reader holds a block with a shared ``flock`` on it (a :class:`Pin`);
  eviction takes the block only if it gets an exclusive lock, so a block being read is never
  removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grainlite.errors import GrainliteRuntimeError, GrainliteValueError
from grainlite.sources.remote.client import read_range
from grainlite.sources.remote.idle_pool import IdlePool

PART_BYTES = 8 << 20
"""Bytes per ranged GET of a download, and per CRC-32 of the checksum."""
DOWNLOAD_REQUESTS = 16
"""Ranged GETs one process keeps in flight (for all its downloads together)."""
SPACE_WAIT_S = 600.0
"""How long a download waits for room before it gives up with an error naming the limit."""
OWN_WAIT_S = 10.0
"""How long a download waits while blocks this process itself holds leave no room (its other
threads' reads may end and let them go) before it gives up with an error naming the limit."""
_WAITING_FRESH_S = 2.0  # a .waiting touched this recently means a process waits for room


def default_directory() -> Path:
    """The cache folder when none is given: ``GRAINLITE_CACHE_DIR``, else
    ``<system temp>/grainlite-cache``."""
    return Path(
        os.environ.get("GRAINLITE_CACHE_DIR") or Path(tempfile.gettempdir()) / "grainlite-cache"
    )


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


def checksum(fd: int, size: int) -> int:
    """The block checksum of the first ``size`` bytes of ``fd``: the CRC-32 of the CRC-32s of its
    :data:`PART_BYTES` parts (so parts downloaded in parallel are summed as they arrive)."""
    crcs = bytearray()
    for start in range(0, size, PART_BYTES):
        data = os.pread(fd, min(PART_BYTES, size - start), start)
        crcs += zlib.crc32(data).to_bytes(4, "big")
    return zlib.crc32(bytes(crcs))


class Pin:
    """A block held for reading: a shared lock on it, released by :meth:`release` (or when the
    pin is collected: a dropped source never holds a block for the rest of the process).

    The process counts the bytes its live pins hold (:meth:`ShardCache._reserve` uses it to
    tell a wait that only this process could end from one that another process ends)."""

    def __init__(self, path: Path, fd: int, size: int) -> None:
        self.path = path
        self.size = size
        self._fd: int | None = fd
        self._pid = os.getpid()
        state = _state()
        with state.lock:
            state.pinned += size

    def release(self) -> None:
        """Lets the block go (eviction may then take it); idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            if self._pid == os.getpid():
                state = _state()
                with state.lock:
                    state.pinned -= self.size

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


class _ProcessState:
    """What one process keeps: its download threads and the blocks it checked."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.parts = IdlePool(DOWNLOAD_REQUESTS, "grainlite-fetch")  # daemons, end when idle
        self.ahead = IdlePool(4, "grainlite-fetch-ahead")
        self.queued: dict[str, Future[Any]] = {}
        self.checked: set[tuple[str, int, int]] = set()  # (path, inode, size) verified here
        self.pinned = 0  # bytes of blocks this process holds with live pins


_states: dict[int, _ProcessState] = {}


def _state() -> _ProcessState:
    state = _states.get(os.getpid())
    if state is None:
        state = _states.setdefault(os.getpid(), _ProcessState())
    return state


class ShardCache:
    """The cache folder ``directory`` with at most ``limit_bytes`` of blocks in it.

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
            limit_bytes = shutil.disk_usage(self.directory).free * 3 // 4
        elif isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes <= 0:
            raise GrainliteValueError(
                f"cache_limit_bytes must be an int > 0 (got {limit_bytes!r:.200}); pass the most "
                f"bytes the cache folder may hold, e.g. 20 * 2**30."
            )
        self.limit = int(limit_bytes)
        self.storage_options = storage_options

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
        state = _state()
        with state.lock:
            if blob.key in state.queued:
                return
            state.queued[blob.key] = state.ahead.submit(self._fetch_quietly, blob)

    def _fetch_quietly(self, blob: Blob) -> None:
        try:
            with contextlib.suppress(Exception):
                if self._find(blob) is not None:
                    return
                lock = self._try_block_lock(blob)
                if lock is None:
                    return  # another process downloads it
                try:
                    if self._find(blob) is None:
                        part = self._reserve(blob, None, evict=False)
                        if part is not None:
                            self._download(blob, *part).release()
                finally:
                    os.close(lock)
        finally:  # a later call asks again (the other process may have died mid-download)
            with _state().lock:
                _state().queued.pop(blob.key, None)

    def under_pressure(self) -> bool:
        """Whether a process of this host waits for room (readers should let idle blocks go)."""
        try:
            return time.time() - (self.directory / ".waiting").stat().st_mtime < _WAITING_FRESH_S
        except OSError:
            return False

    def _find(self, blob: Blob) -> Path | None:
        found = sorted(self.directory.glob(f"{blob.key}.*.blk"))
        return found[0] if found else None

    def _pin_complete(self, blob: Blob) -> Pin | None:
        """A pin on the complete block of ``blob``, checked; None if there is none (a damaged
        one is removed)."""
        while True:
            path = self._find(blob)
            if path is None:
                return None
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # evicted meanwhile
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                now = os.fstat(fd)
                same = os.stat(path).st_ino == now.st_ino
            except FileNotFoundError:
                same = False
            if not same:  # evicted between the open and the lock
                os.close(fd)
                continue
            if self._intact(path, fd, now.st_ino, now.st_size, blob):
                with contextlib.suppress(OSError):
                    os.utime(path)  # most recently used
                return Pin(path, fd, now.st_size)
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # damaged: never served, fetched again

    def _intact(self, path: Path, fd: int, inode: int, size: int, blob: Blob) -> bool:
        state = _state()
        mark = (str(path), inode, size)
        if mark in state.checked:
            return True
        expected = path.name.split(".")[1]
        good = size == blob.size and f"{checksum(fd, size):08x}" == expected
        if good:
            state.checked.add(mark)
        return good

    # -- locks and room ------------------------------------------------------------------------

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

    @contextlib.contextmanager
    def _space_lock(self) -> Iterator[None]:
        fd = os.open(self.directory / ".space.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def used_bytes(self) -> int:
        """The bytes of blocks in the folder, whole and being downloaded."""
        total = 0
        for entry in os.scandir(self.directory):
            if entry.name.endswith((".blk", ".part")):
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat().st_size
        return total

    def _reserve(
        self, blob: Blob, on_wait: Callable[[], None] | None, evict: bool = True
    ) -> tuple[Path, int] | None:
        """A ``.part`` file of the blob's size, locked by this process, once there is room (None:
        no room and ``on_wait`` None, or ``evict`` False and no free room)."""
        deadline = time.monotonic() + SPACE_WAIT_S
        own_since: float | None = None  # since when this process alone holds too much
        released = False
        while True:
            with self._space_lock():
                self._remove_orphans()
                used = self.used_bytes()
                if evict and used + blob.size > self.limit:
                    used -= self._evict(used + blob.size - self.limit)
                if used + blob.size <= self.limit:
                    name = f"{blob.key}.{os.getpid()}.{secrets.token_hex(4)}.part"
                    path = self.directory / name
                    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    os.ftruncate(fd, blob.size)
                    return path, fd
            if on_wait is None:
                return None
            on_wait()
            state = _state()
            with state.lock:
                own = state.pinned
            if own + blob.size <= self.limit:
                own_since = None
            elif own_since is None:
                own_since = time.monotonic()
            elif time.monotonic() - own_since > OWN_WAIT_S:
                raise GrainliteRuntimeError(
                    f"The cache {str(self.directory)!r} (limit {self.limit} bytes) cannot hold "
                    f"{blob.url!r} ({blob.size} bytes) beside the {own} bytes of files this "
                    f"process holds open (reads in flight in its other threads, or sources "
                    f"never closed): no other process could free that room. Raise "
                    f"cache_limit_bytes to at least {own + blob.size} (better, a few files "
                    f"per worker of this host), and close() sources no longer read."
                )
            if not released:  # this process let its idle blocks go: evict them at once
                released = True
                continue
            with contextlib.suppress(OSError):
                (self.directory / ".waiting").touch()
            if time.monotonic() > deadline:
                raise GrainliteRuntimeError(
                    f"Waited {SPACE_WAIT_S:.0f} s for room in the cache {str(self.directory)!r} "
                    f"(limit {self.limit} bytes) to fetch {blob.url!r} ({blob.size} bytes): "
                    f"other readers hold every block. Raise cache_limit_bytes to a few files per "
                    f"worker of this host."
                )
            time.sleep(0.05)

    def _remove_orphans(self) -> None:
        """Removes ``.part`` files whose writer is gone (their lock is free)."""
        for path in self.directory.glob("*.part"):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # being written
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            finally:
                os.close(fd)

    def _evict(self, needed: int) -> int:
        """Removes least recently used blocks no reader holds until ``needed`` bytes are free;
        returns the bytes freed."""
        freed = 0
        blocks = []
        for entry in os.scandir(self.directory):
            if entry.name.endswith(".blk"):
                with contextlib.suppress(FileNotFoundError):
                    blocks.append((entry.stat().st_mtime, entry.path))
        for _, path in sorted(blocks):
            if freed >= needed:
                break
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # held by a reader
            try:
                size = os.fstat(fd).st_size
                os.unlink(path)
                freed += size
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)
        return freed

    # -- downloading ---------------------------------------------------------------------------

    def _download(self, blob: Blob, part: Path, fd: int) -> Pin:
        """Fills ``part`` (open as ``fd``) with the object, renames it into place and pins it
        (its writer's lock becomes the reader's: the block is never free between the two)."""
        try:
            crcs = self._fetch_parts(blob, fd)
            crc = zlib.crc32(b"".join(value.to_bytes(4, "big") for value in crcs))
            final = self.directory / f"{blob.key}.{crc:08x}.blk"
            fcntl.flock(fd, fcntl.LOCK_SH)
            with self._space_lock():  # a listing under the lock never misses the renamed file
                os.rename(part, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
            os.close(fd)
            raise
        _state().checked.add((str(final), os.fstat(fd).st_ino, blob.size))
        return Pin(final, fd, blob.size)

    def _fetch_parts(self, blob: Blob, fd: int) -> list[int]:
        """Downloads every part of ``blob`` into ``fd`` with ranged GETs in parallel; returns
        the CRC-32 of each part."""

        def fetch(start: int) -> int:
            end = min(blob.size, start + PART_BYTES)
            data = read_range(blob.url, start, end, self.storage_options)
            written = 0
            while written < data.nbytes:
                written += os.pwrite(fd, data[written:], start + written)
            return zlib.crc32(data)

        starts = range(0, blob.size, PART_BYTES)
        if len(starts) <= 1:
            return [fetch(start) for start in starts]
        futures = [_state().parts.submit(fetch, start) for start in starts]
        try:
            return [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            for future in futures:
                with contextlib.suppress(BaseException):
                    future.result()
            raise
