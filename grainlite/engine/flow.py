"""Flow control, the parent's side: credits back to the workers, slabs back for reuse.

A worker may have ``worker_buffer_size`` elements sent and not yet taken (its credits; see
:mod:`grainlite.engine.protocol`). When the parent takes an element from worker ``w`` it returns
one credit to ``w``; with any Ack it also returns the slabs whose arrays the user has dropped
since the last one, so each worker keeps writing into the same shared memory.
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


def acknowledge(group: ProcessGroup, mappers: Sequence[SlabMapper], taken_from: int) -> None:
    """Returns a credit to worker ``taken_from`` and released slabs to every worker."""
    for worker, mapper in enumerate(mappers):
        credit = 1 if worker == taken_from else 0
        released = mapper.take_released()
        if credit or released:
            group.send_quietly(worker, Ack(credit, released))
