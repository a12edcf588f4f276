"""Finding and removing segments left behind, touching nothing that is not provably ours.

Owners remove their segments themselves; only a killed owner (SIGKILL, the out-of-memory killer)
leaves some behind. A segment is *stale* only when all three hold:

- its name carries this pid namespace's identity (:mod:`grainlite.shm.names`): a pid from another
  container or an earlier boot says nothing about processes here;
- its file belongs to this user: another user's segments are theirs to clean;
- no process with its owner pid runs (a reused pid keeps the segment: the safe mistake).

Removing never raises: a segment that is gone or cannot be removed is logged at debug level on
the ``grainlite`` logger and left. Where ``/dev/shm`` does not exist (macOS keeps POSIX shared
memory out of the file system) there is nothing to list and nothing is removed.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from grainlite.shm.names import SegmentName, check_tag, identity, parse

SHM_DIR = "/dev/shm"
AUTO_CLEANUP_ENV = "GRAINLITE_AUTO_CLEANUP"
_OFF = frozenset({"0", "false", "no", "off"})

_log = logging.getLogger("grainlite")


@dataclass(frozen=True)
class StaleSegment:
    """A grainlite segment of this namespace and user whose owning process no longer runs."""

    name: str
    owner_pid: int
    size: int


@dataclass(frozen=True)
class Survey:
    """What :func:`survey` found among the grainlite segments in ``/dev/shm``.

    Attributes:
      stale: ours, with a dead owner: safe to remove.
      in_use: ours, with an owner that runs.
      not_ours: of another pid namespace, boot or user: never touched.
    """

    stale: list[StaleSegment]
    in_use: int
    not_ours: int


def _grainlite_names() -> list[tuple[str, SegmentName]]:
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    found = [(name, parts) for name in names if (parts := parse(name)) is not None]
    return sorted(found)


def list_segments() -> list[str]:
    """Names of all grainlite segments in ``/dev/shm``, of any namespace or user, sorted."""
    return [name for name, _ in _grainlite_names()]


def _stat_if_ours(name: str, parts: SegmentName) -> os.stat_result | None:
    """The segment's stat if it is of this namespace and this user (and still exists)."""
    if parts.identity != identity():
        return None
    try:
        stat = os.stat(os.path.join(SHM_DIR, name))
    except OSError:
        return None
    return stat if stat.st_uid == os.getuid() else None


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` runs in this pid namespace (a zombie counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it runs, as another user
    return True


def survey() -> Survey:
    """Sorts the grainlite segments in ``/dev/shm`` into stale, in use and not ours."""
    stale, in_use, not_ours = [], 0, 0
    for name, parts in _grainlite_names():
        stat = _stat_if_ours(name, parts)
        if stat is None:
            not_ours += 1
        elif pid_alive(parts.owner_pid):
            in_use += 1
        else:
            stale.append(StaleSegment(name, parts.owner_pid, stat.st_size))
    return Survey(stale, in_use, not_ours)


def _remove(name: str) -> bool:
    """Unlinks one segment of ours; True if this call removed it, never raises."""
    try:
        os.unlink(os.path.join(SHM_DIR, name))
    except OSError as error:
        _log.debug("grainlite: could not remove shared-memory segment %s: %s", name, error)
        return False
    return True


def remove(segments: list[StaleSegment]) -> list[StaleSegment]:
    """Unlinks ``segments``; returns those this call removed (never raises)."""
    return [segment for segment in segments if _remove(segment.name)]


def stale_segments() -> list[StaleSegment]:
    """The segments of this namespace and user in ``/dev/shm`` whose owner no longer runs."""
    return survey().stale


def remove_stale_segments() -> list[StaleSegment]:
    """Unlinks the stale segments (see :func:`stale_segments`); returns those it removed.

    Segments of other containers, boots or users are never touched, and a segment that cannot be
    removed is logged at debug level on the ``grainlite`` logger and left: this never raises.
    """
    return remove(stale_segments())


def auto_cleanup_enabled() -> bool:
    """False when the environment variable ``GRAINLITE_AUTO_CLEANUP`` is 0, false, no or off."""
    return os.environ.get(AUTO_CLEANUP_ENV, "").strip().lower() not in _OFF


def remove_stale_segments_automatically() -> None:
    """What a loader runs when it starts workers: :func:`remove_stale_segments`, unless
    ``GRAINLITE_AUTO_CLEANUP=0``; never raises (it must never stop a loader from starting)."""
    if not auto_cleanup_enabled():
        _log.debug("grainlite: %s is off; stale shared memory is not removed", AUTO_CLEANUP_ENV)
        return
    try:
        removed = remove_stale_segments()
    except OSError as error:
        _log.debug("grainlite: could not look for stale shared memory: %s", error)
        return
    if removed:
        _log.debug("grainlite: removed %d stale shared-memory segment(s)", len(removed))


def remove_tagged(tag_prefix: str, owner_pid: int | None = None) -> None:
    """Unlinks our segments owned by ``owner_pid`` whose tag starts with ``tag_prefix``.

    ``owner_pid`` defaults to this process. A segment that is gone or cannot be removed is skipped
    (logged at debug level): this is a backstop run while closing, it never raises for one.

    Raises:
      GrainliteValueError: ``tag_prefix`` is not 1 to 6 characters of ``a-z0-9``.
    """
    check_tag(tag_prefix, "tag prefix")
    owner = os.getpid() if owner_pid is None else owner_pid
    for name, parts in _grainlite_names():
        if (
            parts.owner_pid == owner
            and parts.tag.startswith(tag_prefix)
            and _stat_if_ours(name, parts) is not None
        ):
            _remove(name)
