"""Segment names: who owns a segment, written so that nobody else can be mistaken for the owner.

A name is ``gl_<identity>_<owner pid>_<tag>_<random>``, such as ``gl_k3jx7q_48213_ab1201_w2nfa``:

- ``identity``: 6 characters naming the pid namespace the owner pid belongs to. A pid means
  nothing outside its namespace: containers that share ``/dev/shm`` but not their pids (``docker
  --ipc=host``, the containers of a Kubernetes pod) see each other's segments, and pid 48213 there
  is not pid 48213 here. The identity is a hash of the kernel's boot id and the inode of the pid
  namespace, so it differs between namespaces and between boots, and it is the same for every
  process of one namespace.
- ``owner pid``: the process whose lifetime the segment follows (decimal, at most 7 digits: Linux
  pids are at most 4194304).
- ``tag``: 1 to 6 characters of ``a-z0-9`` saying what holds the segment (``src`` for an
  InMemoryDataSource, a stream's tag for worker slabs).
- ``random``: 5 characters, so one owner can hold many segments of one tag.

Names stay within 30 characters: with the ``/`` that ``shm_open`` needs, 31, the POSIX limit on
macOS.

Where ``/proc`` does not say which namespace this is, the identity is random, starts with ``0``
(which a hash identity never contains) and is handed to child processes in the environment
variable ``_GRAINLITE_SHM_IDENTITY`` (set when this module is imported): such names never match
another namespace's identity, so cleanup removes only segments made by this process and its
children.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import re
import secrets
from typing import NamedTuple

from grainlite.errors import GrainliteValueError

PREFIX = "gl_"
MAX_PID = 4_194_304  # Linux's highest possible pid_max (2**22)
MAX_TAG_LENGTH = 6

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_PID_NAMESPACE_PATH = "/proc/self/ns/pid"
_FALLBACK_ENV = "_GRAINLITE_SHM_IDENTITY"
_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"  # RFC 4648 base32, lower case: no "0" and no "1"
_TAG = re.compile(r"[a-z0-9]{1,6}")
_FALLBACK_IDENTITY = re.compile(r"0[a-z2-7]{5}")
_NAME = re.compile(r"gl_([a-z2-7]{6}|0[a-z2-7]{5})_([1-9][0-9]{0,6})_([a-z0-9]{1,6})_([a-z2-7]{5})")


class SegmentName(NamedTuple):
    """The parts of a grainlite segment name."""

    identity: str
    owner_pid: int
    tag: str
    random: str


def _random_base32(length: int) -> str:
    return "".join(secrets.choice(_BASE32) for _ in range(length))


def identity_from(boot_id: str, namespace: os.stat_result) -> str:
    """The identity of the pid namespace ``namespace`` (a stat of ``/proc/<pid>/ns/pid``)."""
    key = f"{boot_id.strip()}:{namespace.st_dev}:{namespace.st_ino}".encode()
    return base64.b32encode(hashlib.sha256(key).digest()).decode()[:6].lower()


@functools.cache
def identity() -> str:
    """The identity of this process's pid namespace (see the module docstring)."""
    try:
        with open(_BOOT_ID_PATH) as file:
            boot_id = file.read()
        namespace = os.stat(_PID_NAMESPACE_PATH)
    except OSError:
        inherited = os.environ.get(_FALLBACK_ENV, "")
        if _FALLBACK_IDENTITY.fullmatch(inherited):
            return inherited
        fallback = "0" + _random_base32(5)
        os.environ[_FALLBACK_ENV] = fallback  # worker processes inherit it
        return fallback
    return identity_from(boot_id, namespace)


# Known from import on (two small reads), so that where the random fallback applies it is in the
# environment before this process starts any worker.
identity()


def check_tag(tag: object, what: str = "tag") -> str:
    """Returns ``tag`` if it is 1 to 6 characters of ``a-z0-9``, else raises GrainliteValueError."""
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        raise GrainliteValueError(
            f"A shared-memory segment {what} must be 1 to {MAX_TAG_LENGTH} characters of a-z and "
            f"0-9 (got {tag!r}); pass a short lower-case tag such as 'src'."
        )
    return tag


def _check_pid(pid: object) -> int:
    if isinstance(pid, bool) or not isinstance(pid, int) or not 1 <= pid <= MAX_PID:
        raise GrainliteValueError(
            f"A shared-memory segment owner_pid must be a process id from 1 to {MAX_PID} "
            f"(got {pid!r}); pass os.getpid() of the owning process, or None for this process."
        )
    return pid


def format_name(identity: str, owner_pid: int, tag: str) -> str:
    """A fresh name for a segment of pid namespace ``identity``, owned by ``owner_pid``."""
    return f"{PREFIX}{identity}_{_check_pid(owner_pid)}_{check_tag(tag)}_{_random_base32(5)}"


def owned_prefix(owner_pid: int, tag: str) -> str:
    """The start of every name :func:`segment_name` gives ``tag`` and ``owner_pid`` in this pid
    namespace (a process with nothing of grainlite imported can remove them by it)."""
    return f"{PREFIX}{identity()}_{_check_pid(owner_pid)}_{check_tag(tag)}_"


def segment_name(tag: str, owner_pid: int | None = None) -> str:
    """A fresh segment name in this pid namespace, owned by ``owner_pid`` (default: this process).

    Raises:
      GrainliteValueError: ``tag`` is not 1 to 6 characters of ``a-z0-9``, or ``owner_pid`` is not
        a process id.
    """
    return format_name(identity(), os.getpid() if owner_pid is None else owner_pid, tag)


def parse(name: str) -> SegmentName | None:
    """The parts of a grainlite segment name of any namespace, or None for any other name."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    ident, pid, tag, random = match.groups()
    return SegmentName(ident, int(pid), tag, random)


def owner_pid(name: str) -> int | None:
    """The owner pid if ``name`` is a grainlite segment of this pid namespace, else None."""
    parts = parse(name)
    if parts is None or parts.identity != identity():
        return None
    return parts.owner_pid
