"""The room of the host's cache (:mod:`grainlite.sources.remote.cache`): its size limit, kept on
disk by reserving space before a download and evicting blocks no reader holds.

**The limit holds on disk.** Space is reserved under ``.space.lock`` before a download: the
``.part`` file is sized to the whole object at once, and the sizes of all ``.blk`` and ``.part``
files together never pass the limit.

**Counted without listing while there is room.** The lock file also holds the *ledger*: the
bytes those files took at the last count plus every reservation since. A reservation the ledger
has room for lists nothing (a folder of thousands of objects' files took milliseconds to list,
under the lock, per download). Only reservations add bytes, always through the ledger; files
removed outside it (a download that failed, a damaged block, a user's ``rm``) leave it counting
too much, never too little, so the limit still holds. Where the ledger says the room is short
(or is missing or unreadable), the folder is counted again before anything is evicted.
``.part`` files whose writer died (their lock is free) are removed, and their bytes taken off
the ledger, at each count and at each process's first reservation in the folder.

**Eviction.** To make room, the least recently used blocks that no reader holds are removed (a
reader marks a block used by touching its ``KEY.lock``; a block is held by a shared ``flock``, a
:class:`~grainlite.sources.remote.cache_blocks.Pin`, and eviction takes it only with an
exclusive one); where every block is held, the download waits (and tells the other processes,
through ``.waiting``, to let go of blocks they hold but do not read).

A wait that only this process could end (the blocks it pins itself leave no room) ends after
:data:`OWN_WAIT_S`, one that other processes may end after :data:`SPACE_WAIT_S`, each with an
error naming the limit.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from grainlite.errors import GrainliteRuntimeError
from grainlite.sources.remote.cache_blocks import Blob, check_record_path
from grainlite.sources.remote.cache_process import process_state

SPACE_WAIT_S = 600.0
"""How long a download waits for room before it gives up with an error naming the limit."""
OWN_WAIT_S = 10.0
"""How long a download waits while blocks this process itself holds leave no room (its other
threads' reads may end and let them go) before it gives up with an error naming the limit."""
_WAITING_FRESH_S = 2.0  # a .waiting touched this recently means a process waits for room


class CacheRoom:
    """The room of the cache folder ``directory``: at most ``limit`` bytes of blocks in it.

    :class:`~grainlite.sources.remote.cache.ShardCache` (which sets both) is the room that also
    downloads into it.
    """

    directory: Path
    limit: int

    def under_pressure(self) -> bool:
        """Whether a process of this host waits for room (readers should let idle blocks go)."""
        try:
            return time.time() - (self.directory / ".waiting").stat().st_mtime < _WAITING_FRESH_S
        except OSError:
            return False

    @contextlib.contextmanager
    def _space_lock(self) -> Iterator[int]:
        """Holds the folder's space lock; yields the lock file's descriptor (its ledger)."""
        fd = os.open(self.directory / ".space.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    @staticmethod
    def _ledger(fd: int) -> int | None:
        """The bytes the ledger in ``fd`` counts; None if it has none (a new folder) or it is
        damaged."""
        text = os.pread(fd, 32, 0)
        if not text.endswith(b"\n") or not text[:-1].isdigit():
            return None
        return int(text[:-1])

    @staticmethod
    def _set_ledger(fd: int, used: int) -> None:
        text = b"%d\n" % used
        os.pwrite(fd, text, 0)
        os.ftruncate(fd, len(text))

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
            with self._space_lock() as ledger:
                used = self._ledger(ledger)
                swept = process_state().swept
                if used is None or used + blob.size > self.limit:  # count the folder again
                    self._remove_orphans()
                    used = self.used_bytes()
                    if evict and used + blob.size > self.limit:
                        used -= self._evict(used + blob.size - self.limit)
                elif str(self.directory) not in swept:  # orphans of processes that died
                    used = max(0, used - self._remove_orphans())
                swept.add(str(self.directory))
                if used + blob.size <= self.limit:
                    self._set_ledger(ledger, used + blob.size)  # before the bytes are taken
                    name = f"{blob.key}.{os.getpid()}.{secrets.token_hex(4)}.part"
                    path = self.directory / name
                    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    os.ftruncate(fd, blob.size)
                    return path, fd
                self._set_ledger(ledger, used)
            if on_wait is None:
                return None
            on_wait()
            state = process_state()
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

    def _remove_orphans(self) -> int:
        """Removes ``.part`` files whose writer is gone (their lock is free); returns their
        bytes."""
        removed = 0
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
                    size = os.fstat(fd).st_size
                    path.unlink()
                    removed += size
            finally:
                os.close(fd)
        return removed

    def _last_used(self, entry: os.DirEntry[str]) -> float:
        """When the block ``entry`` was last used: the time its ``KEY.lock`` was last touched (a
        reader touches it; the block's own times are the mark of its check), else when the block
        was written."""
        used = entry.stat().st_mtime
        with contextlib.suppress(FileNotFoundError):
            used = max(used, (self.directory / f"{entry.name.split('.')[0]}.lock").stat().st_mtime)
        return used

    def _evict(self, needed: int) -> int:
        """Removes least recently used blocks no reader holds until ``needed`` bytes are free;
        returns the bytes freed."""
        freed = 0
        blocks = []
        for entry in os.scandir(self.directory):
            if entry.name.endswith(".blk"):
                with contextlib.suppress(FileNotFoundError):
                    blocks.append((self._last_used(entry), entry.path))
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
                key = os.path.basename(path).split(".")[0]
                check_record_path(self.directory, key).unlink(missing_ok=True)
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)
        return freed
