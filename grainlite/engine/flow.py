"""Flow control, the parent's side: credits back to the workers, slabs back for reuse.

A worker may have ``worker_buffer_size`` elements sent and not yet taken (its credits; see
:mod:`grainlite.engine.protocol`). When the parent takes an element from worker ``w`` it returns
one credit to ``w``; with any Ack it also returns the slabs whose arrays the user has dropped
since the last one, so each worker keeps writing into the same shared memory.

Where local workers outnumber the CPUs, only as many as there are CPUs start at once
(:func:`starting_credits`): the first element then has a CPU to itself instead of a share of
one, and the others start when it arrives. Where they number more than twice the CPUs, a
worker's credit also waits for the slabs of the element it was earned by (:class:`Credits`), so
that it writes its next element into them instead of new shared memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grainlite.cpus import usable_cpu_count
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


class Credits:
    """The credits the parent owes its workers, and the slabs it gives back with them.

    Taking an element from a worker earns that worker one credit. Where the workers make ahead
    (:func:`makes_ahead`), it goes back at once. Where they do not (more local workers than
    CPUs), it waits for the slabs of the element it was earned by: the worker then writes its
    next element into the same shared memory instead of a second set of slabs (an ``images``
    batch: 18 MB per worker). The user drops a batch one or two ``next()`` calls after taking
    it, long before its worker's turn comes again. A credit never waits past the point where its
    worker is among the next ``lead`` to be taken (a user who keeps batches gets new slabs, as
    before), nor once a worker's stream has ended (the order is no longer a plain round), and
    the parent pays any credit still owed before it waits for that worker. A worker just taken
    is W - 1 takes from its next turn, so credits wait only where W - 1 >= ``lead`` (more than
    twice as many workers as CPUs, by default); with fewer, the next element would have too
    little time to be made, and each worker keeps a second set of slabs.

    Args:
      group: the workers' process group (its ``send_quietly``).
      mappers: each worker's :class:`SlabMapper`.
      defer: whether credits wait for their slabs (``not makes_ahead(...)``).
      lead: how many takes before its turn a waiting credit is paid whatever happens (two per
        usable CPU: that many elements can be in the making while the user waits for none).
    """

    def __init__(
        self, group: Any, mappers: Sequence[SlabMapper], defer: bool, lead: int | None = None
    ) -> None:
        self._group = group
        self._mappers = mappers
        self._defer = defer
        self._lead = max(1, 2 * usable_cpu_count() if lead is None else lead)
        self._owed: dict[int, set[int]] = {}  # worker -> slabs its credit waits for

    def taken(self, worker: int, slabs: Sequence[int], next_worker: int, ended: bool) -> None:
        """Worker ``worker``'s element (in ``slabs``) was taken; ``next_worker`` is taken next,
        ``ended`` whether some worker's stream has ended. Sends every Ack now due: credits and
        the slabs the user dropped since the last take."""
        workers = len(self._mappers)
        if (
            self._defer
            and slabs
            and not ended
            and worker not in self._owed
            and (worker - next_worker) % workers >= self._lead
        ):
            self._owed[worker] = set(slabs)
            credit_now = None
        else:
            credit_now = worker
        for w, mapper in enumerate(self._mappers):
            released = mapper.take_released()
            credit = 1 if w == credit_now else 0
            waiting = self._owed.get(w)
            if waiting is not None and w != worker:
                waiting.difference_update(released)
                if not waiting or ended or (w - next_worker) % workers < self._lead:
                    del self._owed[w]
                    credit = 1
            if credit or released:
                self._group.send_quietly(w, Ack(credit, released))

    def pay(self, worker: int) -> None:
        """Sends ``worker`` the credit it is owed, if any (before the parent waits for it)."""
        if self._owed.pop(worker, None) is not None:
            self._group.send_quietly(worker, Ack(1, []))

    def forget(self) -> None:
        """Drops every owed credit: a Restart gives each worker its credits anew."""
        self._owed.clear()
