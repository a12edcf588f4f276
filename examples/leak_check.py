"""Which processes a process has started: the check behind "no worker outlives its loader".

Scaffolding of this repository, not part of the ``grainlite`` package: the tests' per-test leak
check and ``examples/demo.py`` use it. Import it with ``examples/`` on ``sys.path``
(``from leak_check import live_children``).
"""

from __future__ import annotations

import os


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie, ended but not yet reaped, does not count).

    A process that ends while its ``stat`` file is read counts as gone: the read then fails with
    ``ProcessLookupError`` rather than ``FileNotFoundError``, and both are caught.
    """
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def live_children(parent: int | None = None) -> set[int]:
    """Pids of the live (not zombie) descendants of ``parent`` (default: this process): its
    children, their children, and so on. Workers forked by grainlite's fork server are the
    server's children, the training process's grandchildren: they count too.

    Reads ``/proc`` (Linux); elsewhere the set is empty.
    """
    parent = os.getpid() if parent is None else parent
    children: set[int] = set()
    if not os.path.isdir("/proc"):
        return children
    by_parent: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is None or fields[0] in ("Z", "X"):
            continue  # the process ended while we looked, or is a zombie
        by_parent.setdefault(int(fields[1]), []).append(int(entry))
    pending = [parent]
    while pending:
        for child in by_parent.get(pending.pop(), []):
            if child not in children:
                children.add(child)
                pending.append(child)
    return children
