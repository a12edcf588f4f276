"""The head start: the first element of a worker stream, made in the parent while workers start.

A worker interpreter needs a few tenths of a second before it can read anything (the interpreter,
NumPy, the user's modules). With grain.config's ``first_element_in_parent`` on (the default), the
first ``next()`` makes the element of the worker whose turn it is right here, from that worker's
state, exactly as the worker would have made it; that worker got a deferred Init and starts from
the state after it (see :mod:`grainlite.engine.protocol`). Elements, order and states are the same
as without the head start; only where the first element is computed changes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from grainlite.engine.remote_errors import exit_in_pipeline_error
from grainlite.engine.transport import check_sendable
from grainlite.loader.failures import FailedElement


class Made(NamedTuple):
    """The element made here, the worker's state after it, and the pipeline's stage counters."""

    element: Any
    state: Any
    stages: list[dict[str, Any]]


def head_start_worker(pipeline: Any, next_worker: int, exhausted: list[bool]) -> int | None:
    """The worker whose first element the parent makes, or None for no head start.

    None when the option is off, when the pipeline cannot run in the parent (a Dataset API
    pipeline slices itself in place and may run a ``worker_init_fn``: it runs only in workers),
    or when every worker's share is already done.
    """
    from grainlite import config

    if not getattr(pipeline, "runs_in_parent", False):
        return None
    if not config.get_or_default("first_element_in_parent"):
        return None
    workers = len(exhausted)
    for step in range(workers):
        worker = (next_worker + step) % workers
        if not exhausted[worker]:
            return worker
    return None


def make_here(pipeline: Any, worker: int, workers: int, state: Any) -> Made | None:
    """Worker ``worker``'s next element after ``state``, made in this process; None at its end.

    A read that fails raises here as it would have in the worker (the stream cannot go on); a
    transform that fails gives a FailedElement in the element's place, and so does an element a
    worker could not have sent (it must pickle). Code in the pipeline that tries to end the
    process (``sys.exit()``) raises the error a worker would report instead.
    """
    copy = getattr(pipeline, "copy_for_parent", None)
    if copy is not None:
        pipeline = copy()
    make_stats = getattr(pipeline, "make_stats", None)
    stats = make_stats() if make_stats is not None else None
    extra = {} if stats is None else {"stats": stats}
    elements = pipeline.iterate(worker, workers, state, None, **extra)
    try:
        element, after = next(elements)
    except StopIteration:
        return None
    except SystemExit as error:
        raise exit_in_pipeline_error(error, worker) from error
    finally:
        elements.close()
        release = getattr(pipeline, "release_readers", None)
        if release is not None:
            release()
    if element.__class__ is not FailedElement:
        try:
            check_sendable(element)
        except Exception as error:
            element = FailedElement(error)
    return Made(element, after, _stages(stats))


def _stages(stats: Any) -> list[dict[str, Any]]:
    """The stage counters of the head start; the read stage counts the records the element used
    (those fetched ahead are read again by the worker, which counts them)."""
    if stats is None:
        return []
    stages: list[dict[str, Any]] = stats.stage_snapshots()
    pushed = getattr(stats, "pushed", None)
    if stages and pushed is not None:
        stages[0]["in"] = stages[0]["out"] = pushed()
    return stages
