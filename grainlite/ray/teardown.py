"""Ending a Ray group's actors, and only those, and removing the shared memory they leave.

Ownership: a group (:class:`grainlite.ray.group.RayGroup`) owns its actors and nothing else.
Its :meth:`~grainlite.ray.group.RayGroup.close`, garbage collection and interpreter exit all run
:func:`kill_actors` (``ray.kill``); actors of other loaders or users are never touched. Actors
on this host write their elements into shared-memory slabs named with this process's pid and the
stream's tag (see :mod:`grainlite.ray.actor`); the parent maps and unlinks each when it is
announced, and after killing the actors (once their processes are gone) removes any name of the
tag left, as a local process group does.

It has its own module because the ending is a finalizer (``weakref.finalize``): it must hold no
reference to the group, only the lists the group fills, and it runs in orders the group's reads
never see (Ray shut down first, the head lost, a forked child at exit).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from grainlite import shm
from grainlite.engine.channel import Channel
from grainlite.ray.direct import DirectListener, close_all
from grainlite.ray.health import ClusterHealth

_GONE_WAIT_S = 5.0  # how long close waits for killed actors of this host to end


def kill_actors(
    actors: list[Any],
    creator: int,
    health: ClusterHealth,
    hellos: list[Any],
    tag: str,
    channels: list[Channel | None],
    listeners: list[DirectListener],
) -> None:
    """Closes the sockets to ``actors``, kills them and removes the slabs of ``tag``; in a
    process other than ``creator`` (a forked child) it does nothing."""
    if os.getpid() != creator or not actors:
        return  # a forked child leaves its parent's actors alone
    close_all(channels)  # the actors' workers see the end of their socket and make no more
    channels.clear()
    for listener in listeners:
        listener.close()
    listeners.clear()
    try:
        import ray
    except ImportError:  # pragma: no cover - actors exist only if ray imported
        return
    if not ray.is_initialized():  # Ray was shut down, and the actors with it
        actors.clear()  # (ray.kill now would start a new local instance)
        shm.remove_tagged(tag)
        return
    pids = _local_pids(ray, hellos)
    for actor in actors:
        if health.is_lost:  # ray.kill goes through the head: ask the actor itself to end
            with contextlib.suppress(Exception):
                actor.quit.remote()
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
    actors.clear()
    _wait_gone(pids)  # then no actor of this host makes another slab
    shm.remove_tagged(tag)


def _local_pids(ray: Any, hellos: list[Any]) -> list[int]:
    """The process ids of the actors that answered ``hello`` and run on this host."""
    pids: list[int] = []
    with contextlib.suppress(Exception):
        here = ray.util.get_node_ip_address()
        answered, _ = ray.wait(list(hellos), num_returns=len(hellos), timeout=1.0)
        for hello in answered:
            with contextlib.suppress(Exception):  # a dead actor answers with its error
                pid, node, _ = ray.get(hello, timeout=0)
                if node == here:
                    pids.append(int(pid))
    return pids


def _wait_gone(pids: list[int]) -> None:
    """Waits (at most ``_GONE_WAIT_S``) until the processes ``pids`` of this host have ended."""
    deadline = time.monotonic() + _GONE_WAIT_S
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                break  # not ours: another user's process took the pid
            time.sleep(0.01)
