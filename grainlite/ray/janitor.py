"""Removes a Ray actor's shared-memory slabs if the training process dies first.

``python -I -S .../grainlite/ray/janitor.py OWNER ACTOR PREFIX``, started by an actor that
writes its elements into shared memory (:mod:`grainlite.ray.actor`); it forks at once and the
fork, in a session of its own, does the work, so it is not the actor's child (Ray ends a
worker's children with it) and the actor reaps the first process at once. The
slabs are named with the training process's pid (``OWNER``), which owns them: it maps and
unlinks each one it is told of, and removes the rest of its stream's names when it closes the
actors. If it dies instead (even by SIGKILL), Ray ends its actors at once, by SIGKILL, and an
actor's own thread may not get to run first; the janitor, which Ray does not end, then waits for
the actor (``ACTOR``) to be gone and unlinks every name in ``/dev/shm`` that starts with
``PREFIX`` (:func:`grainlite.shm.names.owned_prefix`: the stream's worker tag and the owner).
If the actor ends first (its loader closed it), there is nothing to do: the training process
removes what is left.

Standard library only, run with ``-S``: it starts in milliseconds and imports nothing of
grainlite or Ray.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time

SHM_DIR = "/dev/shm"
_ACTOR_EXIT_WAIT_S = 10.0


def _pidfd(pid: int) -> int:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ended(pid: int, fd: int, timeout: float | None) -> bool:
    """Whether ``pid`` (its pidfd ``fd``, -1 where there is none) ends within ``timeout`` s
    (None: waits as long as it runs)."""
    if fd >= 0:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    deadline = None if timeout is None else time.monotonic() + timeout
    while _running(pid):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def main() -> None:
    owner, actor, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    # Leave the actor's tree: Ray ends a worker's child processes with it. The actor waits for
    # this first process; the second, an orphan in its own session, is the janitor.
    if os.fork():
        os._exit(0)
    os.setsid()
    owner_fd, actor_fd = _pidfd(owner), _pidfd(actor)
    if owner_fd >= 0 and actor_fd >= 0:
        ready, _, _ = select.select([owner_fd, actor_fd], [], [])
        if owner_fd not in ready:
            return  # the actor ended first: its loader closed it, the owner removes the rest
    else:  # no pidfds here: look every 0.1 s
        while _running(owner):
            if not _running(actor):
                return
            time.sleep(0.1)
    _ended(actor, actor_fd, _ACTOR_EXIT_WAIT_S)  # Ray ends it at once; then it makes no slab
    for name in os.listdir(SHM_DIR):
        if name.startswith(prefix):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(SHM_DIR, name))


if __name__ == "__main__":
    main()
