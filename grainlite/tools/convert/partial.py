"""Partial folders: where a conversion writes before it publishes, and reclaiming the dead ones.

A conversion writes into ``<dst>.partial-<pid>-<identity>-<random>`` beside its destination and
renames it to ``<dst>`` at the end (see converter.py). A conversion killed mid-way (SIGKILL, the
out-of-memory killer, a lost node) leaves that folder behind. A partial folder is *stale*, and
removed by the next conversion to the same destination or by ``python -m grainlite cleanup``,
only when all three hold (the rule of :mod:`grainlite.shm.cleanup` for shared memory):

- its ``identity`` is this pid namespace's (:func:`grainlite.shm.names.identity`, a hash of the
  boot id and the pid namespace): a pid means nothing on another host sharing the file system, in
  another container or after a reboot;
- the folder belongs to this user;
- no process with its owner pid runs (a reused pid keeps the folder: the safe mistake).

Folders named ``<dst>.partial-<pid>-<random>`` (grainlite before the identity was added) cannot
be proven dead: they are counted as unknown and kept.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from dataclasses import dataclass, field

from grainlite.shm.cleanup import pid_alive
from grainlite.shm.names import identity

_PARTIAL = re.compile(
    r"(?P<base>.+)\.partial-(?P<pid>[1-9][0-9]{0,6})-(?P<identity>[a-z2-7]{6}|0[a-z2-7]{5})"
    r"-[0-9a-f]{8}"
)
_UNKNOWN = re.compile(r"(?P<base>.+)\.partial-[0-9]+-[0-9a-f]{8}")


def new_name(dst: str) -> str:
    """A fresh partial folder path for destination ``dst``, owned by this process."""
    return f"{dst}.partial-{os.getpid()}-{identity()}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class StalePartial:
    """A partial folder of this namespace and user whose owning process no longer runs."""

    path: str
    owner_pid: int


@dataclass
class PartialSurvey:
    """What :func:`survey` found among the partial folders it looked at.

    Attributes:
      stale: ours, with a dead owner: safe to remove.
      in_use: ours, with an owner that runs (a conversion in progress).
      unknown: of another namespace, host, boot or user, or named by an older grainlite: kept.
    """

    stale: list[StalePartial] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.stale or self.in_use or self.unknown)


def _candidates(path: str) -> list[str]:
    """Partial folders of destination ``path`` (its siblings) and of destinations in it."""
    path = os.path.abspath(path)
    found = []
    parent, base = os.path.split(path)
    for folder, wanted in ((parent, base), (path, None)):
        try:
            names = os.listdir(folder)
        except OSError:  # missing, not a folder, not readable: nothing there to reclaim
            continue
        for name in names:
            match = _PARTIAL.fullmatch(name) or _UNKNOWN.fullmatch(name)
            if match and (wanted is None or match["base"] == wanted):
                found.append(os.path.join(folder, name))
    return sorted(set(found))


def survey(*paths: str) -> PartialSurvey:
    """Sorts the partial folders of each of ``paths`` into stale, in use and unknown.

    A path is a destination (its ``<dst>.partial-*`` siblings are looked at) or a folder holding
    destinations (its ``*.partial-*`` entries are); symbolic links and files are never counted.
    """
    result = PartialSurvey()
    for path in sorted({found for given in paths for found in _candidates(given)}):
        try:
            stat = os.lstat(path)
        except OSError:
            continue
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        match = _PARTIAL.fullmatch(os.path.basename(path))
        if match is None or match["identity"] != identity() or stat.st_uid != os.getuid():
            result.unknown.append(path)
        elif pid_alive(int(match["pid"])):
            result.in_use.append(path)
        else:
            result.stale.append(StalePartial(path, int(match["pid"])))
    return result


def remove(stale: list[StalePartial]) -> list[StalePartial]:
    """Removes the ``stale`` folders; returns those this call removed (never raises)."""
    removed = []
    for folder in stale:
        shutil.rmtree(folder.path, ignore_errors=True)
        if not os.path.lexists(folder.path):
            removed.append(folder)
    return removed


def remove_stale(*paths: str) -> list[StalePartial]:
    """Removes the stale partial folders of ``paths`` (see :func:`survey`); returns them."""
    return remove(survey(*paths).stale)
