"""The messages between the parent and its worker processes, and the rules of their exchange.

Every message is one of the named tuples below, pickled (never cloudpickled, except the pipeline and
a worker's exception, which travel as opaque bytes inside them) and sent whole over the worker's
:class:`~grainlite.engine.channel.Channel`.

One worker's life, as the parent sees it::

    parent                                worker
      | ── (interpreter starts) ──────────▶ |   imports only the engine
      | ── Init(pipeline, slice, state) ──▶ |   unpickles the pipeline, starts producing
      | ◀──────── Element(gen, state, ...) ─ |   one per finished element, while it has credit
      | ◀──────── ErrorReport(gen, state, ..)|   a transform raised: in that element's place
      | ── Ack(credit, released slabs) ───▶ |   the parent took an element / arrays were freed
      | ◀──────── Announce(gen, slabs) ───── |   new slabs made for an element that was dropped
      | ◀──────── StatsReport(numbers) ───── |   its counters, every ~0.5 s of work and before End
      | ◀──────── End(gen) ───────────────── |   its share of the stream is done
      | ── Restart(gen, state, credit) ───▶ |   set_state(): start over from ``state``
      | ── Stop() ────────────────────────▶ |   close(): exit now

**Every element is made in a worker.** The parent never runs the pipeline: it starts the
interpreters (at ``iter()``, before the first ``next()``), sends each its Init, and merges.

**Credits (flow control).** A worker may have at most ``credits`` elements sent and not yet taken
by the parent (``worker_buffer_size``). Each Element or ErrorReport spends one; the parent returns
one with an Ack once it took that worker's element: at once where the workers make ahead, else
once the user dropped the element's arrays (its slabs come back in the same Ack, for the next
element to reuse) or the worker's turn is near (:class:`~grainlite.engine.flow.Credits`), and
always before the parent waits for that worker. A worker with no credit blocks reading
its channel, so a slow consumer never makes workers fill memory. While it waits, it holds the
next element already made, where Init's ``ahead`` says so (:func:`~grainlite.engine.flow.
makes_ahead`: local workers that have a CPU each); else it makes the next element only once it
has a credit, and holds no element beyond its credits. A worker whose Init or Restart gives it
no credit (:func:`~grainlite.engine.flow.starting_credits`: more local workers than CPUs, and it
is not among the first, one per CPU, in the order the parent takes elements) makes nothing (and,
after Init, unpickles nothing) until its first Ack, which comes once the first element has.

**Slabs (shared memory).** A worker writes an element's arrays into its slabs (reusable shared
memory, see :mod:`grainlite.engine.transport`). An Element lists the slabs it uses and announces
the names of slabs made for it; the parent maps a slab once and removes its name. A slab goes back
to the worker (in an Ack's ``released``) when the user has dropped every array of the element.

**Generations.** ``Restart`` moves a running worker to a new position (a ``set_state`` on a live
iterator) without a new process. Each restart increases the generation; messages carry the
generation they were produced in, and the parent drops those of older generations (returning their
slabs at once). Announcements are never dropped: a slab exists whatever the generation.

**Stats.** A worker's counters (:class:`~grainlite.stats.counters.WorkerCounters`) are cumulative;
it sends them with its first element, then when, after sending an element, ``REPORT_EVERY_S`` have
passed on its own clock since the last report (``REPORT_WHEN_BLOCKED_S`` if it had waited on a
full buffer), and once more before End. The parent keeps the latest per worker, whatever the
generation. Nothing waits for a report: the element path never blocks on stats.

**Ending.** A worker exits on Stop, when its channel closes (the parent is gone, even killed by
SIGKILL), on SIGTERM (how a fork server ends the workers of a training process that is gone) and,
for a worker busy in a long transform, when its parent pid changes; each way, it unlinks its slabs'
names first. The parent stops all workers against one shared deadline and kills those that have
not exited by then.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from grainlite.stats.counters import REPORT_EVERY_S as REPORT_EVERY_S
from grainlite.stats.counters import REPORT_WHEN_BLOCKED_S as REPORT_WHEN_BLOCKED_S

# Parent -> worker --------------------------------------------------------------------------------


class Init(NamedTuple):
    """The first message: what to run and from where."""

    pipeline: bytes  # the cloudpickled Pipeline; empty: the one its fork server passed on
    worker: int  # this worker's index, 0 <= worker < workers
    workers: int  # how many workers share this host's stream
    state: Any  # where to start (a pipeline state)
    owner_pid: int  # the parent's pid, recorded in slab names (it owns their lifetime)
    tag: str  # slab name tag of this worker
    credits: int  # elements it may send before the first Ack (0: wait for one to start)
    ahead: bool = True  # make the next element while waiting for a credit (flow.makes_ahead)


class Ack(NamedTuple):
    """The parent took ``credit`` elements and no longer uses the slabs ``released``."""

    credit: int
    released: list[int]


class Restart(NamedTuple):
    """Drop what is in flight and produce again from ``state``, in generation ``generation``."""

    generation: int
    state: Any
    credits: int


class Stop(NamedTuple):
    """Exit now."""


# Worker -> parent --------------------------------------------------------------------------------


class Element(NamedTuple):
    """One finished element: ``payload`` with its arrays replaced by slab placeholders."""

    generation: int
    state: Any  # the worker's position after this element
    payload: Any
    slabs: list[int]  # the slabs holding its arrays
    announced: list[tuple[int, str]]  # slabs made since the last message: (slab, segment name)


class ErrorReport(NamedTuple):
    """A transform or a read raised for one element; it takes that element's place."""

    generation: int
    state: Any  # the worker's position after the failed element: the stream goes on from there
    error: bytes | None  # the exception, cloudpickled; None if it could not be pickled
    type_name: str
    message: str
    traceback: str  # the worker's traceback text, grainlite's own frames left out
    # The same frames as (file name, line, function), rebuilt as real frames in the parent.
    frames: tuple[tuple[str, int, str], ...] = ()


class Announce(NamedTuple):
    """Slabs were made for an element that was never sent (dropped by a restart, or failed)."""

    generation: int
    announced: list[tuple[int, str]]


class End(NamedTuple):
    """This worker's share of the stream is done."""

    generation: int


class StatsReport(NamedTuple):
    """The worker's cumulative counters (:meth:`WorkerCounters.snapshot`'s JSON-able dict)."""

    stats: dict[str, Any]


ToWorker = Init | Ack | Restart | Stop
ToParent = Element | ErrorReport | Announce | End | StatsReport
