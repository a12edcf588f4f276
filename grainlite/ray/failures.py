"""The errors a Ray group raises when Ray fails it, in words the user can act on.

Ray reports trouble as its own exceptions, with long texts; a loader raises grainlite's errors
instead, each saying what happened and what to do:

- a dead actor (:func:`actor_gone` tells Ray's errors for one apart) surfaces as
  :class:`~grainlite.errors.WorkerDiedError` naming the worker, its pid and node, and Ray's
  reason (:func:`worker_died`), as soon as Ray reports the death (a second or so);
- a lost cluster (its head silent, Ray shut down) as
  :class:`~grainlite.errors.ClusterConnectionError` (:func:`disconnected`);
- workers that no node of the cluster could place, which would wait forever, as
  :class:`~grainlite.errors.GrainliteValueError` before any actor is made
  (:func:`check_placeable`).

Ray's reasons are cut to ``REASON_CHARS`` characters, on one line.
"""

from __future__ import annotations

from typing import Any

from grainlite.errors import ClusterConnectionError, GrainliteValueError, WorkerDiedError

REASON_CHARS = 600


def actor_gone(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's errors for a call whose actor died: killed, crashed, out of memory, node lost."""
    errors = ray.exceptions
    names = ("RayActorError", "OutOfMemoryError", "WorkerCrashedError", "NodeDiedError")
    return tuple(getattr(errors, name) for name in names if hasattr(errors, name))


def worker_died(
    worker: int, count: int, pid: int, node: str, error: BaseException
) -> WorkerDiedError:
    """The error for ``worker`` (of ``count``; its ``pid`` on ``node``) dead of ``error``."""
    reason = " ".join(str(error).split())
    if len(reason) > REASON_CHARS:
        reason = reason[:REASON_CHARS] + "..."
    lost = f"Ray worker actor {worker} of {count} (pid {pid} on node {node}) died: {reason}"
    died = WorkerDiedError(
        f"{lost} The iterator stops here; set_state(iterator.get_state()) starts new "
        f"actors at the last delivered element (RayWorkers(restart_lost_workers=N) does it "
        f"by itself). If it ran out of memory, lower num_workers, the buffer size or the "
        f"batch size, or give each actor more memory."
    )
    died.lost_worker = lost  # type: ignore[attr-defined]  # the shell may replace the actors
    return died


def disconnected(error: BaseException | None, why: str = "") -> ClusterConnectionError:
    """The error for a lost connection to the cluster, with ``error``'s text (or ``why``)."""
    if error is not None:
        why = " ".join(str(error).split())[:REASON_CHARS]
    cause = f" ({why})" if why else ""
    return ClusterConnectionError(
        f"The connection to the Ray cluster running this loader's workers was lost{cause}. The "
        f"iterator stops; when the cluster is back, set_state(iterator.get_state()) on a new "
        f"iterator goes on after the last delivered element."
    )


def check_placeable(ray: Any, needs: dict[str, float]) -> None:
    """Raises if no live node of the cluster has ``needs`` (the actors would wait forever)."""
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    for node in nodes:
        have = node.get("Resources", {})
        if all(have.get(name, 0) >= amount for name, amount in needs.items()):
            return
    totals = {
        name: max((n.get("Resources", {}).get(name, 0) for n in nodes), default=0) for name in needs
    }
    raise GrainliteValueError(
        f"No node of the Ray cluster has what each worker asks for ({needs}); the largest "
        f"amounts one node has are {totals}. Start the CPU machines with those resources "
        f"(ray start --resources='{{\"name\": N}}') or ask for less with "
        f"RayWorkers(resources=...)."
    )
