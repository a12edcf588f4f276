"""Flow control, the parent's side: credits back to the workers, slabs back for reuse.

A worker may have ``worker_buffer_size`` elements sent and not yet taken (its credits; see
:mod:`grainlite.engine.protocol`). When the parent takes an element from worker ``w`` it returns
one credit to ``w``; with any Ack it also returns the slabs whose arrays the user has dropped
since the last one, so each worker keeps writing into the same shared memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from grainlite.engine.process_group import ProcessGroup
from grainlite.engine.protocol import Ack
from grainlite.engine.transport import SlabMapper


def acknowledge(group: ProcessGroup, mappers: Sequence[SlabMapper], taken_from: int) -> None:
    """Returns a credit to worker ``taken_from`` and released slabs to every worker."""
    for worker, mapper in enumerate(mappers):
        credit = 1 if worker == taken_from else 0
        released = mapper.take_released()
        if credit or released:
            group.send_quietly(worker, Ack(credit, released))
