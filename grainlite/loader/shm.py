"""POSIX shared-memory segments: the only code in grainlite that touches ``/dev/shm``.

Why not ``multiprocessing.shared_memory``: its resource tracker unlinks segments that another
process
still uses, warns about "leaked" segments it does not own, and cannot tell a segment of a live job
from one of a killed job. Here every segment name carries the pid of the process that owns its
lifetime, ``grainlite_<pid>_<kind>_<random>``, so :func:`remove_stale_segments` can find and remove
the segments of owners that no longer run (a SIGKILL leaves no other trace), and nothing else
unlinks behind the owner's back.
"""

from __future__ import annotations

import _posixshmem
import contextlib
import mmap
import os
import secrets
from dataclasses import dataclass

from grainlite.errors import SharedMemoryFullError

PREFIX = "grainlite_"
_SHM_DIR = "/dev/shm"


def segment_name(kind: str, owner_pid: int | None = None) -> str:
    """A fresh segment name that records its owner's pid and what it holds (``kind``)."""
    pid = os.getpid() if owner_pid is None else owner_pid
    return f"{PREFIX}{pid}_{kind}_{secrets.token_hex(8)}"


def owner_pid(name: str) -> int | None:
    """The owner pid recorded in a grainlite segment name, or None for any other name."""
    if not name.startswith(PREFIX):
        return None
    pid_text = name[len(PREFIX) :].split("_", 1)[0]
    return int(pid_text) if pid_text.isdigit() else None


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
        cls, size: int, kind: str, owner: int | None = None, reserve: bool = False
    ) -> Segment:
        """Creates and maps a new segment of ``size`` bytes (at least one page is mapped).

        With ``reserve``, the memory is allocated now, so a full ``/dev/shm`` raises
        SharedMemoryFullError here instead of killing the process with SIGBUS on first write.
        """
        name = segment_name(kind, owner)
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            mapped = max(size, 1)
            if reserve and hasattr(os, "posix_fallocate"):
                try:
                    os.posix_fallocate(fd, 0, mapped)
                except OSError as error:
                    raise SharedMemoryFullError(
                        f"Could not reserve {mapped} bytes of shared memory in {_SHM_DIR} "
                        f"({error.strerror}); free space there, give the container more (for "
                        f"Docker: --shm-size), or use fewer workers, a smaller "
                        f"worker_buffer_size or smaller batches."
                    ) from error
            else:
                os.ftruncate(fd, mapped)
            mapping = mmap.mmap(fd, mapped)
        except BaseException:
            _unlink_quietly(name)
            raise
        finally:
            os.close(fd)
        return cls(name, size, mapping)

    @classmethod
    def attach(cls, name: str) -> Segment:
        """Maps an existing segment by name; raises FileNotFoundError if it is gone."""
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, 0o600)
        try:
            size = os.fstat(fd).st_size
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(name, size, mapping)

    def unlink(self) -> None:
        """Removes the name from ``/dev/shm``; mappings that still exist stay valid."""
        _unlink_quietly(self.name)

    def close(self) -> None:
        """Drops this mapping if nothing exported from it is still alive; else leaves it to GC."""
        self.buf.release()
        # Arrays handed to the user may still point into the mapping; then it goes when they go.
        with contextlib.suppress(BufferError):
            self._mmap.close()


def _unlink_quietly(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        _posixshmem.shm_unlink("/" + name)


def unlink(name: str) -> None:
    """Removes a segment name if it exists."""
    _unlink_quietly(name)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_segments() -> list[str]:
    """Names of all grainlite segments present in ``/dev/shm`` (empty where it does not exist)."""
    try:
        names = os.listdir(_SHM_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(PREFIX))


@dataclass(frozen=True)
class StaleSegment:
    """A grainlite segment whose owning process no longer runs."""

    name: str
    owner_pid: int
    size: int


def stale_segments() -> list[StaleSegment]:
    """The grainlite segments in ``/dev/shm`` whose owner pid is not a running process."""
    found = []
    for name in list_segments():
        pid = owner_pid(name)
        if pid is None or _pid_alive(pid):
            continue
        try:
            size = os.stat(os.path.join(_SHM_DIR, name)).st_size
        except FileNotFoundError:
            continue
        found.append(StaleSegment(name, pid, size))
    return found


def remove_stale_segments() -> list[StaleSegment]:
    """Unlinks every segment left by a dead owner (for example a SIGKILLed run); returns them."""
    removed = stale_segments()
    for segment in removed:
        _unlink_quietly(segment.name)
    return removed
