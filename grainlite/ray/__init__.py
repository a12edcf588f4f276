"""Run a loader's workers as Ray actors: ``backend=grainlite.ray.RayWorkers(num_workers=N)``.

The one argument that moves a pipeline's workers from local processes to a Ray cluster::

    ds.mp_prefetch(backend=RayWorkers(num_workers=4))              # Dataset API
    grain.DataLoader(..., backend=RayWorkers(num_workers=4))        # DataLoader

Each worker is an actor running grainlite's worker loop (:class:`grainlite.engine.child.Worker`)
on its share of the stream; the parent merges the actors' elements in the same order as local
workers, with the same credits (``per_worker_buffer_size`` / ``worker_buffer_size`` elements
made ahead per worker), so the elements, their order and ``get_state()`` are those of N local
worker processes, and a state restores on either backend. Actors on the training process's host
hand their arrays over in shared memory and their messages over a socket, as local workers do;
the others through Ray's object store (read-only, zero-copy on the training process's node) and
Ray calls; see docs/how-to/ray.md.

This module imports Ray only when a loader starts its workers: ``import grainlite`` never does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grainlite.errors import GrainliteTypeError, GrainliteValueError, shown

__all__ = ["RayWorkers"]

DEFAULT_CONNECT_TIMEOUT_S = 15.0  # grainlite.ray.connect's bound on reaching the cluster


class RayWorkers:
    """A worker backend: ``num_workers`` Ray actors instead of local worker processes.

    Args:
      num_workers: how many actors (the loader's worker count; states record it as local workers
        do, so the elastic rules apply when it changes).
      address: the Ray cluster to use when this process is not connected yet (``"auto"``,
        ``"ray://host:10001"``, ``"host:6379"``); None: the running one (``ray.init()``: the
        cluster of ``RAY_ADDRESS`` or of ``ray start`` on this machine, else a new local one);
        ``"local"``: a fresh local instance, whatever else runs.
      resources: what each actor asks of Ray, e.g. ``{"CPU": 2, "data_node": 1}`` (a custom
        resource that only the CPU machines declare keeps every worker off the training
        node). ``CPU`` defaults to 1.
      runtime_env: Ray's runtime environment for the actors (``working_dir``, ``pip``, ...). Its
        ``env_vars`` are added to the worker environment (accelerators hidden, this process's
        import path), as local workers get it.
      connect_timeout_s: how long connecting to the cluster may take (seconds > 0). An address
        that does not answer in time (a ``ray start`` whose head is gone, a wrong address) is a
        :class:`~grainlite.errors.ClusterConnectionError` naming it, where it came from and the
        fix, where ``ray.init()`` itself would wait without end.
      restart_lost_workers: how many times one iterator may replace its actors after one of them
        is lost (killed, out of memory, its node gone): the iterator logs a warning naming the
        worker, its node and Ray's reason, starts new actors at the element after the last one
        it returned, and goes on with nothing lost or repeated. The window is the iterator: the
        count starts at 0 when it is made and again at each ``set_state()`` or
        ``set_num_workers()``. Once it is spent, the next loss raises
        :class:`~grainlite.errors.WorkerDiedError` saying so. ``0`` (the default): the first loss
        raises it. An element whose transform raised is not a lost worker: it is raised at its
        place as always. A lost connection to the cluster's head is never restarted.
      shared_memory: whether actors that share this process's shared memory (the same host,
        pid namespace and ``/dev/shm``) write their elements into shared-memory slabs and send
        their messages over a socket of this process, as local workers do: one copy less than
        through Ray's object store, no Ray call per element, and writable arrays, as from local
        workers. False: every actor uses the object store (read-only arrays) and Ray calls.
        Actors on other hosts always do.
    """

    def __init__(
        self,
        num_workers: int,
        address: str | None = None,
        resources: Mapping[str, float] | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        restart_lost_workers: int = 0,
        shared_memory: bool = True,
    ) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise GrainliteValueError(
                f"RayWorkers(num_workers=...) must be an int >= 1, got {shown(num_workers)}; "
                "for no workers leave the backend out and use worker_count=0 / num_workers=0."
            )
        if address is not None and not isinstance(address, str):
            raise GrainliteTypeError(
                f"RayWorkers(address=...) must be a string such as 'auto' or "
                f"'ray://host:10001', or None; got {shown(address)}."
            )
        if (
            isinstance(connect_timeout_s, bool)
            or not isinstance(connect_timeout_s, int | float)
            or not connect_timeout_s > 0
        ):
            raise GrainliteValueError(
                f"RayWorkers(connect_timeout_s=...) must be a number of seconds > 0, got "
                f"{shown(connect_timeout_s)}."
            )
        if (
            isinstance(restart_lost_workers, bool)
            or not isinstance(restart_lost_workers, int)
            or restart_lost_workers < 0
        ):
            raise GrainliteValueError(
                f"RayWorkers(restart_lost_workers=...) must be an int >= 0 (how many times an "
                f"iterator may replace lost actors; 0: never), got {shown(restart_lost_workers)}."
            )
        if not isinstance(shared_memory, bool):
            raise GrainliteTypeError(
                f"RayWorkers(shared_memory=...) must be True or False, got {shown(shared_memory)}."
            )
        needs = {"CPU": 1.0, **dict(resources or {})}
        for name, amount in needs.items():
            number = isinstance(amount, int | float) and not isinstance(amount, bool)
            if not isinstance(name, str) or not number or amount < 0:
                raise GrainliteValueError(
                    f"RayWorkers(resources=...) maps Ray resource names to amounts >= 0 per "
                    f"worker, e.g. {{'CPU': 1, 'data_node': 1}}; got {shown(resources)}."
                )
        self.num_workers = num_workers
        self.address = address
        self.resources = needs
        self.runtime_env = dict(runtime_env or {})
        self.connect_timeout_s = float(connect_timeout_s)
        self.restart_lost_workers = restart_lost_workers
        self.shared_memory = shared_memory

    def group(self, count: int, tag: str) -> Any:
        """The engine's worker group for ``count`` actors (see WorkerStream's ``backend``)."""
        from grainlite.ray.group import RayGroup

        return RayGroup(count, self, tag)

    def __repr__(self) -> str:
        return (
            f"RayWorkers(num_workers={self.num_workers}, address={self.address!r}, "
            f"resources={self.resources!r}, restart_lost_workers={self.restart_lost_workers}, "
            f"shared_memory={self.shared_memory})"
        )
