"""Which processes a process has started: the check behind "no worker outlives its loader"."""

from __future__ import annotations

import os


def live_children(parent: int | None = None) -> set[int]:
    """Pids of the live (not zombie) child processes of ``parent`` (default: this process).

    Reads ``/proc`` (Linux); elsewhere the set is empty.
    """
    parent = os.getpid() if parent is None else parent
    children: set[int] = set()
    if not os.path.isdir("/proc"):
        return children
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended while we looked
        if int(fields[1]) == parent and fields[0] != "Z":
            children.add(int(entry))
    return children
