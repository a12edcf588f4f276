"""Flow control, the parent's side: credits back to the workers, slabs back for reuse.

A worker may have ``worker_buffer_size`` elements sent and not yet taken (its credits; see
:mod:`grainlite.engine.protocol`). When the parent takes an element from worker ``w`` it returns
one credit to ``w``; with any Ack it also returns the slabs whose arrays the user has dropped
since the last one, so each worker keeps writing into the same shared memory.

Where local workers outnumber the CPUs, only as many as there are CPUs start at once
(:func:`starting_credits`): the first element then has a CPU to itself instead of a share of
one, and the others start when it arrives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grainlite.cpus import usable_cpu_count
from grainlite.engine.process_group import ProcessGroup
from grainlite.engine.protocol import Ack
from grainlite.engine.transport import SlabMapper


def makes_ahead(group: Any, workers: int) -> bool:
    """Whether ``group``'s ``workers`` make their next element while they wait for a credit.

    Local worker processes do only where each has a CPU (``workers`` <= this process's usable
    CPUs): more workers than CPUs compute no sooner for it, and each element made ahead holds
    its slabs (an ``images`` batch: 18 MB per worker, 290 MB at 16 workers). A backend whose
    workers run elsewhere (Ray actors: ``runs_on_this_host`` false) always does.
    """
    if not getattr(group, "runs_on_this_host", False):
        return True
    return workers <= usable_cpu_count()


def starting_credits(group: Any, workers: int, credits: int, order: Sequence[int]) -> list[int]:
    """The credits each of ``group``'s ``workers`` starts with: ``credits``, or none for a
    worker held back until the first element arrives (:func:`release_held`). ``order`` lists
    the workers whose streams go on, in the order the parent takes their elements.

    Where the workers do not make ahead (:func:`makes_ahead`: local workers outnumbering the
    usable CPUs), only the first of ``order``, one per CPU, start at once. Started together, W
    workers on fewer CPUs would each make their first element on a share of a CPU, and the
    first element, the one the training loop waits for, would come about W / CPUs times later;
    held back, the others add to their start only the wait for that first element (for a
    pipeline that mostly waits on I/O, one element's time)."""
    if makes_ahead(group, workers):
        return [credits] * workers
    starting = set(order[: max(1, usable_cpu_count())])
    return [credits if w in starting else 0 for w in range(workers)]


def release_held(group: Any, held: list[int], credits: int) -> None:
    """Gives the workers held back at the start (:func:`starting_credits`) their ``credits``."""
    for worker in held:
        group.send_quietly(worker, Ack(credits, []))
    held.clear()


def acknowledge(group: ProcessGroup, mappers: Sequence[SlabMapper], taken_from: int) -> None:
    """Returns a credit to worker ``taken_from`` and released slabs to every worker."""
    for worker, mapper in enumerate(mappers):
        credit = 1 if worker == taken_from else 0
        released = mapper.take_released()
        if credit or released:
            group.send_quietly(worker, Ack(credit, released))
