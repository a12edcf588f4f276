"""The parent's driver: the merge order of W worker processes, which equals Grain's.

Worker ``w`` runs the whole pipeline on every W-th record of this host's stream (see
:class:`~grainlite.loader.striding.WorkerSlice`); the parent takes one element from each worker in
turn, skipping only workers that are finished, so the output is the same on every run. A failed
element (a transform raised in the worker) keeps its place in that order and the stream goes on.

The other jobs live next door: starting and ending processes in
:mod:`~grainlite.engine.process_group`, credits and slab reuse in :mod:`~grainlite.engine.flow`,
re-raising a worker's exception in :mod:`~grainlite.engine.remote_errors`, the messages in
:mod:`~grainlite.engine.protocol`.
"""

from __future__ import annotations

import os
import secrets
import weakref
from collections.abc import Callable
from typing import Any

from grainlite import shm
from grainlite.engine import remote_errors
from grainlite.engine.failures import FailedElement
from grainlite.engine.flow import Credits, makes_ahead, release_held, starting_credits
from grainlite.engine.pipeline import WorkerPipeline
from grainlite.engine.position import IteratorPosition
from grainlite.engine.process_group import ProcessGroup, interrupts_held_back
from grainlite.engine.protocol import (
    Ack,
    Announce,
    Element,
    End,
    ErrorReport,
    Init,
    Restart,
    StatsReport,
)
from grainlite.engine.stall import StallWatch
from grainlite.engine.transport import SlabMapper
from grainlite.stats import tracing
from grainlite.stats.counters import ParentCounters, clock


def _worker_tag(stream_tag: str, worker: int) -> str:
    """The slab name tag of one worker: the stream's tag and the worker in base 36."""
    digits = ""
    while True:
        worker, digit = divmod(worker, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
        if not worker:
            return stream_tag + digits[-2:]


class WorkerStream:
    """Runs the pipeline in ``workers`` processes and merges their elements in order.

    ``pipeline`` is a :class:`~grainlite.engine.pipeline.WorkerPipeline`: the DataLoader's
    :class:`~grainlite.loader.pipeline.Pipeline` or a Dataset API
    :class:`~grainlite.dataset.mp.pipeline.DatasetPipeline`. ``buffer`` is each worker's
    element credit (the options' ``per_worker_buffer_size``; at least 1 is used). ``counters``
    (kept by the iterator across streams) receives the consumer's wait, the parent's transport
    time and the workers' reports.

    ``backend`` (None: local worker processes, a :class:`ProcessGroup`) runs the workers
    elsewhere: its ``group(count, tag)`` returns an object with the ProcessGroup's methods (start,
    started, pid, dump_stacks, send, send_quietly, ready, receive, close) that exchanges the same
    protocol messages, e.g. :class:`grainlite.ray.RayWorkers`. Nothing else here changes: the
    merge order, the states and the credits are the same whatever runs the workers.
    """

    # At the end of the stream the workers stop, unless this is True: then they wait for a
    # restart() until close() (grainlite.torch moves them to its next epoch this way).
    linger_at_end = False

    def __init__(
        self,
        pipeline: WorkerPipeline,
        workers: int,
        position: IteratorPosition,
        buffer: int,
        counters: ParentCounters | None = None,
        backend: Any = None,
    ) -> None:
        self._pipeline = pipeline
        self.counters = counters if counters is not None else ParentCounters(workers)
        self._workers = workers
        self._states = list(position.states)
        self._next = position.next_worker
        self._exhausted = list(position.exhausted)
        self._credits = max(1, buffer)
        self._generation = 0
        self._tag = secrets.token_hex(2)
        self._group: Any = (
            ProcessGroup(self._workers, self._tag)
            if backend is None
            else backend.group(self._workers, self._tag)
        )
        self._mappers = [SlabMapper() for _ in range(self._workers)]
        self._flow = Credits(
            self._group, self._mappers, not makes_ahead(self._group, self._workers)
        )
        self._finished = False
        # Workers registered for jax.profiler traces (jax_profile_workers): what unregisters each.
        self._profiled: dict[int, Any] = {}
        self._await_ports = tracing.workers_switched_on()
        self._held: list[Any] = [None] * workers  # a message taken early, for _receive
        self._held_back: list[int] = []  # workers given no credit yet (flow.starting_credits)
        # The watch holds this stream weakly: a stream dropped without close() (``del it``) is
        # then freed at once by reference counting, and its finalizers end the workers and
        # remove their segments then, not at the next cyclic garbage collection.
        self._stall = StallWatch(
            self._group.ready, self._group.pid, _weakly(self._describe), self._group.dump_stacks
        )

    # Lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Starts the worker processes; the pipeline is pickled while their interpreters start.

        Every element is made in a worker, with the worker environment; this process only
        merges. Idempotent; an iterator calls it at ``iter()`` (``start_prefetch()``), so the
        interpreters start before the first ``next()``.
        """
        if self._group.started or self._finished:
            return
        try:
            # A Ctrl-C while the processes start waits until they all have their Init: it is
            # then raised here, the except below stops them, and no start-up step can lose it.
            with interrupts_held_back():
                self._start_workers()
        except BaseException:
            self.close()
            raise

    def _start_workers(self) -> None:
        """Starts the interpreters, then sends each its Init (the pipeline, pickled once)."""
        self._group.start()
        shm.remove_stale_segments_automatically()
        blob = self._pipeline.pickled()
        self._pipeline.release_readers()  # only the workers read
        preload = getattr(self._group, "preload", None)  # a fork server imports ahead
        if preload is not None and preload(blob):
            blob = b""  # the forked workers have it (child.inherited_pipeline)
        ahead = makes_ahead(self._group, self._workers)
        credits = self._starting_credits()
        for w in range(self._workers):
            tag = _worker_tag(self._tag, w)
            init = Init(
                blob, w, self._workers, self._states[w], os.getpid(), tag, credits[w], ahead
            )
            self._group.send(w, init)

    def _starting_credits(self) -> list[int]:
        """Each worker's credits as it starts (or restarts) at the current position; those
        given none are held back until the first element comes (flow.starting_credits)."""
        workers = self._workers
        order = [
            w % workers
            for w in range(self._next, self._next + workers)
            if not self._exhausted[w % workers]
        ]
        credits = starting_credits(self._group, workers, self._credits, order)
        self._held_back = [w for w in range(workers) if not credits[w]]
        return credits

    def close(self) -> None:
        """Stops the workers, removes every shared-memory name they made and drops this
        stream's mappings of their slabs (each holds a file descriptor). Arrays the caller still
        holds keep their own slab mapped until they are garbage-collected. Idempotent."""
        self._finished = True
        for unregister in self._profiled.values():  # before the processes go
            if unregister is not None:
                unregister()
        self._profiled.clear()
        self._group.close()
        for mapper in self._mappers:
            mapper.close()

    def restart(self, position: IteratorPosition) -> bool:
        """Moves the running workers to ``position`` without restarting the processes.

        Returns False (and closes this stream) if a worker has died since the last element: the
        caller then starts a new stream at ``position``.
        """
        self._states = list(position.states)
        self._next = position.next_worker
        self._exhausted = list(position.exhausted)
        if not self._group.started:
            return True
        if any(self._group.ended(w) for w in range(self._workers)):
            self.close()  # a worker is gone (killed, out of memory): new processes will do
            return False
        self._generation += 1
        self._flow.forget()
        credits = self._starting_credits()
        try:
            for w in range(self._workers):
                self._group.send(w, Restart(self._generation, self._states[w], credits[w]))
        except OSError:  # a worker is gone (killed, out of memory): new processes will do
            self.close()
            return False
        return True

    @property
    def alive(self) -> bool:
        """True while the workers run and can be moved with :meth:`restart`."""
        return self._group.started and not self._finished

    def pids(self) -> list[int]:
        """The process ids of the running workers (empty before start and after close)."""
        return [self._group.pid(w) for w in range(self._workers)] if self.alive else []

    def position(self) -> IteratorPosition:
        return IteratorPosition(list(self._states), self._next, list(self._exhausted))

    # Merging ---------------------------------------------------------------------------------
    def next(self) -> Any:
        """The next element (or FailedElement) in Grain's order; StopIteration at the end.

        Anything else raised here (a worker died, a read failed, Ctrl-C) ends the stream.
        """
        if self._finished:
            raise StopIteration
        if not self._group.started:
            self.start()
        if not self.counters.started_ns:  # started before the first next(): count from here
            self.counters.start()
        try:
            if self._await_ports:
                self._register_profiled()
            return self._next_element()
        except StopIteration:
            if not self.linger_at_end:
                self.close()
            raise
        except BaseException:
            self.close()
            raise

    def _next_element(self) -> Any:
        workers = self._workers
        while True:
            if all(self._exhausted):
                raise StopIteration
            w = self._next
            if self._exhausted[w]:
                self._next = (w + 1) % workers
                continue
            begin = clock()
            self._flow.pay(w)
            message = self._receive(w)
            received = clock()
            if self._held_back:  # the first element came: the workers held back start
                release_held(self._group, self._held_back, self._credits)
            counters = self.counters
            counters.wait_ns += received - begin
            if isinstance(message, End):
                self._exhausted[w] = True
                self._next = (w + 1) % workers
                continue
            element: Any
            slabs: list[int] = []
            if isinstance(message, ErrorReport):
                error = remote_errors.rebuild(message, w, self._group.pid(w))
                if message.state is None:
                    raise error  # the worker's stream cannot go on (a failed read)
                element = FailedElement(error)
            else:
                mapper = self._mappers[w]
                mapper.announce(message.announced)
                element = mapper.materialize(message.payload, message.slabs)
                slabs = message.slabs
            self._states[w] = message.state
            self._next = (w + 1) % workers
            self._flow.taken(w, slabs, self._next, any(self._exhausted))
            counters.transport_ns += clock() - received
            counters.delivered += 1
            if not counters.warm_ns:
                counters.warm()
            return element

    def _describe(self, w: int) -> str:
        """Where worker ``w`` stands, in words, for a report that it is silent."""
        return str(self._pipeline.describe_position(w, self._workers, self._states[w]))

    def _note_stats(self, w: int, message: StatsReport) -> None:
        """Keeps worker ``w``'s counters; registers its profiler server when it reports one."""
        spans = message.stats.pop("spans", None)  # timeline_seconds: its spans since the last
        if spans:
            self.counters.keep_spans(w, self._group.pid(w), spans)
        self.counters.workers[w] = message.stats
        if message.stats.get("profiler_port") and w not in self._profiled:
            self._profiled[w] = tracing.register_worker(
                w, self._group.pid(w), message.stats["profiler_port"]
            )

    def _register_profiled(self) -> None:
        """``jax_profile_workers``: takes each worker's first message, the report of its
        profiler server, so that every worker is in the traces that start from now on (one
        registered later would miss a trace already running). Anything else that comes first
        is held for :meth:`_receive`."""
        self._await_ports = False
        for w in range(self._workers):
            if self._exhausted[w] or w in self._profiled or self._held[w] is not None:
                continue
            self._stall.wait(w)
            message = self._group.receive(w)
            if isinstance(message, StatsReport):
                self._note_stats(w, message)
            else:
                self._held[w] = message

    def _receive(self, w: int) -> Element | ErrorReport | End:
        while True:
            message = self._held[w]
            if message is not None:
                self._held[w] = None
            else:
                self._stall.wait(w)
                message = self._group.receive(w)
            if isinstance(message, Announce):
                self._mappers[w].announce(message.announced)
                continue
            if isinstance(message, StatsReport):
                self._note_stats(w, message)
                continue
            if message.generation == self._generation:
                return message
            if isinstance(message, Element):  # produced before a set_state: drop, reuse its memory
                self._mappers[w].announce(message.announced)
                self._group.send_quietly(w, Ack(0, message.slabs))


def _weakly(method: Callable[[int], str]) -> Callable[[int], str]:
    """``method`` (bound) called through a weak reference to its object: an empty string once
    that object is gone."""
    ref = weakref.WeakMethod(method)

    def call(worker: int) -> str:
        bound = ref()
        return "" if bound is None else bound(worker)

    return call
