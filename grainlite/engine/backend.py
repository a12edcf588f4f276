"""The ``backend=`` argument of loaders: who runs the worker processes' loop.

None means local worker processes (:class:`~grainlite.engine.process_group.ProcessGroup`); a
backend object (e.g. :class:`grainlite.ray.RayWorkers`) has ``num_workers`` and
``group(count, tag)``, the worker group :class:`~grainlite.engine.parent.WorkerStream` talks to.
The backend fixes the worker count, so the count given the usual way must agree with it.
"""

from __future__ import annotations

from typing import Any

from grainlite.errors import GrainliteTypeError, GrainliteValueError, shown


def resolve(backend: Any, worker_count: int | None, argument: str) -> int:
    """The worker count with ``backend``: its ``num_workers``.

    Args:
      backend: a worker backend.
      worker_count: the count given the usual way (``argument``); None or 0 let the backend say.
      argument: how the user spelled the count, for the message.
    """
    count = getattr(backend, "num_workers", None)
    if not callable(getattr(backend, "group", None)) or not isinstance(count, int):
        raise GrainliteTypeError(
            f"backend must be a worker backend such as grainlite.ray.RayWorkers(num_workers=N), "
            f"or None for local worker processes; got {shown(backend)}."
        )
    if worker_count not in (None, 0, count):
        raise GrainliteValueError(
            f"{argument}={worker_count} disagrees with backend={backend!r}, which runs "
            f"{count} workers; leave {argument} out (the backend sets the count) or make them "
            "equal."
        )
    return count
