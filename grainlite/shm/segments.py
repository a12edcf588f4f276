"""Shared-memory segments: create, attach, unlink.

Why not ``multiprocessing.shared_memory``: its resource tracker unlinks segments that another
process still uses, warns about "leaked" segments it does not own, and cannot tell a segment of a
live job from one of a killed job. Here every segment's name records the process that owns its
lifetime (see :mod:`grainlite.shm.names`), and nothing else unlinks behind the owner's back.

``_posixshmem`` (CPython's ``shm_open``/``shm_unlink``) is imported at the first create, attach or
unlink, so ``import grainlite`` works where POSIX shared memory does not exist (Windows, or a
Python built without it); only using a segment there raises.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import sys
from types import ModuleType

from grainlite.errors import GrainliteRuntimeError, SharedMemoryError, SharedMemoryFullError
from grainlite.shm import termination
from grainlite.shm.names import segment_name

_NAME_ATTEMPTS = 8  # a fresh random part per attempt; a clash is already a 1 in 32**5 event


def _posix() -> ModuleType:
    """CPython's ``_posixshmem``, or a clear error where this platform has none."""
    try:
        import _posixshmem
    except ImportError as error:
        raise GrainliteRuntimeError(
            f"POSIX shared memory is not available on this platform (sys.platform is "
            f"{sys.platform!r} and Python's _posixshmem module cannot be imported: {error}); "
            f"worker processes and InMemoryDataSource need it. Use worker_count=0 and a source "
            f"that is not InMemoryDataSource (for example a list or RangeDataSource)."
        ) from error
    return _posixshmem


def _open_new(tag: str, owner_pid: int | None) -> tuple[str, int]:
    """Creates a segment under a fresh name; returns the name and an open descriptor."""
    for _ in range(_NAME_ATTEMPTS - 1):
        name = segment_name(tag, owner_pid)
        with contextlib.suppress(FileExistsError):
            return name, _shm_create(name)
    name = segment_name(tag, owner_pid)
    return name, _shm_create(name)


def _shm_create(name: str) -> int:
    """``shm_open`` of a new segment; any failure but a name clash says what to change."""
    try:
        return _posix().shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except FileExistsError:
        raise
    except OSError as error:
        raise unusable_shm_error(name, error) from error


def unusable_shm_error(name: str, error: OSError) -> SharedMemoryError:
    """The error for a segment that could not be created, by the reason the system gave."""
    if error.errno in (errno.EMFILE, errno.ENFILE):
        fix = (
            "this process has too many open files: close loaders you no longer use, or raise the "
            "limit (`ulimit -n`)"
        )
    else:
        fix = (
            "/dev/shm must be a writable tmpfs: mount one (Docker: it is by default; read-only "
            "containers need --tmpfs /dev/shm), or use worker_count=0 with a source that is not "
            "InMemoryDataSource, which need no shared memory"
        )
    return SharedMemoryError(
        error.errno or 0,
        f"Could not create the shared-memory segment /dev/shm/{name} ({error.strerror}): {fix}.",
    )


def _free_space() -> str:
    """How full ``/dev/shm`` is, for error messages; empty where it cannot be read."""
    try:
        stats = os.statvfs("/dev/shm")
    except OSError:
        return ""
    free, total = stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize
    return f"; /dev/shm has {free} of {total} bytes free"


class Segment:
    """One mapped shared-memory segment.

    ``buf`` is a writable memoryview of the whole segment. The mapping stays valid while anything
    (for example a numpy array made from ``buf``) still refers to it, even after :meth:`unlink`:
    unlinking only removes the name, the memory goes when the last mapping goes.
    """

    __slots__ = ("_mmap", "buf", "name", "size")

    def __init__(self, name: str, size: int, mapping: mmap.mmap) -> None:
        self.name = name
        self.size = size
        self._mmap = mapping
        self.buf = memoryview(mapping)

    @classmethod
    def create(
        cls, size: int, tag: str, owner_pid: int | None = None, reserve: bool = False
    ) -> Segment:
        """Creates and maps a new segment of ``size`` bytes (at least one page is mapped).

        Args:
          size: bytes the caller needs.
          tag: 1 to 6 characters of ``a-z0-9`` saying what holds the segment.
          owner_pid: the process whose lifetime the segment follows (default: this process).
          reserve: allocate the memory now, so a full ``/dev/shm`` raises SharedMemoryFullError
            here instead of killing the process with SIGBUS at the first write.

        Raises:
          GrainliteValueError: a bad ``tag`` or ``owner_pid``.
          SharedMemoryFullError: ``reserve`` and ``/dev/shm`` has no room.
          SharedMemoryError: ``/dev/shm`` is missing or read-only, or no descriptor is free.
          GrainliteRuntimeError: this platform has no POSIX shared memory.
        """
        name, fd = _open_new(tag, owner_pid)
        segment = cls._map_new(name, fd, size, reserve)
        if owner_pid is None or owner_pid == os.getpid():
            termination.track(name, unlink)
        return segment

    @classmethod
    def create_named(cls, name: str, size: int, reserve: bool = False) -> Segment:
        """Creates and maps a segment under exactly ``name``, chosen by a user.

        Such a name carries no owner, so stale-segment cleanup never removes it: its creator must.

        Raises:
          FileExistsError: a segment of that name exists already.
          SharedMemoryFullError: ``reserve`` and ``/dev/shm`` has no room.
          SharedMemoryError: ``/dev/shm`` is missing or read-only, or no descriptor is free.
          GrainliteRuntimeError: this platform has no POSIX shared memory.
        """
        fd = _shm_create(name)
        segment = cls._map_new(name, fd, size, reserve)
        termination.track(name, unlink)
        return segment

    @classmethod
    def _map_new(cls, name: str, fd: int, size: int, reserve: bool) -> Segment:
        """Sizes (reserving the memory, with ``reserve``) and maps a segment just created."""
        try:
            mapped = max(size, 1)
            if reserve and hasattr(os, "posix_fallocate"):
                try:
                    os.posix_fallocate(fd, 0, mapped)
                except OSError as error:
                    raise SharedMemoryFullError(
                        error.errno or 0,
                        f"Could not reserve {mapped} bytes of shared memory in /dev/shm for "
                        f"{name!r} ({error.strerror}{_free_space()}); free space there, give the "
                        f"container more "
                        f"(for Docker: --shm-size), or use fewer workers, a smaller "
                        f"worker_buffer_size or smaller batches.",
                    ) from error
            else:
                os.ftruncate(fd, mapped)
            mapping = mmap.mmap(fd, mapped)
        except BaseException:
            unlink(name)
            raise
        finally:
            os.close(fd)
        return cls(name, size, mapping)

    @classmethod
    def attach(cls, name: str) -> Segment:
        """Maps an existing segment by name; raises FileNotFoundError if it is gone."""
        fd = _posix().shm_open("/" + name, os.O_RDWR, 0o600)
        try:
            size = os.fstat(fd).st_size
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(name, size, mapping)

    def unlink(self) -> None:
        """Removes the name from ``/dev/shm``; mappings that still exist stay valid."""
        unlink(self.name)

    def close(self) -> None:
        """Drops this mapping if nothing exported from it is still alive; else leaves it to GC."""
        self.buf.release()
        # Arrays handed to the user may still point into the mapping; then it goes when they go.
        with contextlib.suppress(BufferError):
            self._mmap.close()


def unlink(name: str) -> None:
    """Removes a segment name if it exists (a name that is already gone is not an error)."""
    with contextlib.suppress(FileNotFoundError):
        _posix().shm_unlink("/" + name)
    termination.forget(name)
