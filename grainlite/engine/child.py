"""The worker process: runs one worker's share of the pipeline and ships elements to the parent.

Started as ``python -m grainlite.engine.child FD PARENT_PID`` with FD one end of a socket pair
and PARENT_PID the pid of the process that started it. It is a fresh interpreter that never
imports the user's ``__main__`` (the pipeline arrives cloudpickled), so scripts need no
``if __name__ == "__main__"`` guard for the workers' sake, and nothing in them
(``jax.distributed.initialize()`` for one) runs twice. JAX_PLATFORMS is set to ``cpu`` so a
transform that imports JAX never takes an accelerator.

It speaks the protocol of :mod:`grainlite.engine.protocol`. It exits when told to stop, when the
socket closes (the parent is gone, even by SIGKILL) and, as a backstop for a worker busy in a long
transform, when its parent pid changes. Each way unlinks its slabs' names first
(:meth:`Worker.exit`), and so does SIGTERM, which then ends the process as its default action
would: it is how the fork server ends its workers when the training process is gone (their
parent, the server, lives on, so the parent watch cannot see it), and how Slurm or Kubernetes end
a job's processes.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import sys
import threading
from typing import Any, NoReturn

from grainlite.engine import transport
from grainlite.engine.channel import Channel
from grainlite.engine.failures import FailedElement
from grainlite.engine.malloc import limit_arenas
from grainlite.engine.packed_records import read_records_in_place
from grainlite.engine.pipeline import WorkerPipeline
from grainlite.engine.protocol import (
    REPORT_EVERY_S,
    REPORT_WHEN_BLOCKED_S,
    Ack,
    Announce,
    Element,
    End,
    Init,
    Restart,
    StatsReport,
    Stop,
    ToWorker,
)
from grainlite.engine.remote_errors import exit_in_pipeline_error, report
from grainlite.engine.transport import SlabPool
from grainlite.errors import GrainliteRuntimeError
from grainlite.stats import tracing
from grainlite.stats.counters import WorkerCounters, clock

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_REPORT_WHEN_BLOCKED_NS = int(REPORT_WHEN_BLOCKED_S * 1e9)


class _Restart(Exception):
    """Raised inside the worker loop when the parent moved the iterator (set_state)."""


class Worker:
    """One worker's loop: produces elements under the parent's credits, answers its messages.

    ``conn`` needs ``recv_bytes()``, ``send_bytes(data)`` and ``poll()`` (a
    :class:`~grainlite.engine.channel.Channel` here; a queue pair in another backend's worker).
    A backend whose transport is not shared memory overrides :meth:`make_pool` and :meth:`pack`.
    """

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.credits = 0
        self.ahead = True  # makes its next element while it waits for a credit (Init.ahead)
        self.generation = 0
        self.restart: Restart | None = None
        self.pool: SlabPool | None = None
        self.counters = WorkerCounters(0)
        self.next_report = self.last_report = 0

    # Parent messages -------------------------------------------------------------------------
    def handle(self, message: ToWorker) -> None:
        if isinstance(message, Ack):
            if self.restart is not None:  # sent after the Restart: the new generation's credit
                self.restart = self.restart._replace(credits=self.restart.credits + message.credit)
            else:
                self.credits += message.credit
            if not self.counters.buffer:  # held back at the start: its first credits
                self.counters.buffer = message.credit
            if self.pool is not None and message.released:
                self.pool.release(message.released)
        elif isinstance(message, Restart):
            self.restart = message
            self.counters.buffer = message.credits
        elif isinstance(message, Stop):
            self.exit(0)

    def receive(self) -> None:
        try:
            data = self.conn.recv_bytes()
        except (EOFError, OSError):
            self.exit(0)  # the parent is gone
        self.handle(pickle.loads(data))

    def send(self, message: Any) -> None:
        self.send_bytes(pickle.dumps(message, _PROTOCOL))

    def send_bytes(self, data: Any) -> None:
        try:
            self.conn.send_bytes(data)
        except OSError:
            self.exit(0)  # the parent is gone

    def exit(self, code: int) -> NoReturn:
        if self.pool is not None:
            self.pool.close()
        os._exit(code)

    def terminate(self, signum: int, frame: Any) -> None:
        """SIGTERM's handler: unlinks the slabs' names, then ends by SIGTERM's default action
        (the exit status still says "killed by SIGTERM").

        A slab made while the signal came, not yet in the pool, is left: the fork server removes
        what its workers left once they are all gone, and the process group as it closes."""
        if self.pool is not None:
            self.pool.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        os._exit(128 + signal.SIGTERM)  # not reached: the signal ends the process

    # Producing -------------------------------------------------------------------------------
    def run(self, pipeline: WorkerPipeline, worker: int, workers: int, state: Any) -> None:
        assert self.pool is not None
        allocate = self.pool.allocate if pipeline.batches_last else None
        stats = self.counters.pipeline = pipeline.make_stats()
        extra = {} if stats is None else {"stats": stats}
        self.next_report = 0  # the first report goes with the first element
        self.counters.started_ns = clock()  # worker time counts from here, start-up left out
        while True:
            try:
                self.produce(pipeline.iterate(worker, workers, state, allocate, **extra))
            except _Restart:
                pass
            except Exception as error:  # a read failed: this worker's stream cannot go on
                self.drop_element()
                self.send(report(error, self.generation, None))
            except BaseException as error:  # sys.exit() or KeyboardInterrupt from user code
                self.drop_element()
                self.send(report(exit_in_pipeline_error(error, worker), self.generation, None))
            while self.restart is None:
                self.receive()
            self.generation, state, self.credits = self.restart
            self.restart = None
            state = self.hold_until_credit(state)

    def hold_until_credit(self, state: Any) -> Any:
        """Waits for a first credit where the parent gave none (it held this worker back until
        the first element came, see flow.starting_credits); returns the state to start from
        (a Restart meanwhile moves it)."""
        while not self.credits:
            self.wait_for_credit()
            if self.restart is not None:
                self.generation, state, self.credits = self.restart
                self.restart = None
        return state

    def drop_element(self) -> None:
        """Gives the slabs of an element that will not be sent back to the pool."""
        assert self.pool is not None
        slabs, announced = self.pool.finish_element()
        self.pool.release(slabs)
        if announced:
            self.send(Announce(self.generation, announced))

    def make_pool(self, init: Init) -> Any:
        """Where this worker writes its elements' arrays: its shared-memory slabs."""
        return SlabPool(init.tag, init.owner_pid)

    def pack(self, message: Element) -> Any:
        """What :meth:`send_bytes` sends for an element: the pickled message, placeholders in it."""
        return transport.dumps(message)

    def serve(self, init: Init) -> None:
        """Runs the pipeline of ``init`` until the parent stops this worker."""
        self.credits = self.counters.buffer = init.credits
        self.ahead = init.ahead
        self.pool = self.make_pool(init)
        tracing.arm_timeline()  # timeline_seconds: this worker records its spans
        if tracing.workers_switched_on():  # jax_profile_workers: the first message is the port
            self.counters.profiler_port = tracing.start_worker_server(init.worker) or 0
            self.report_stats()  # the parent registers the server before the first next()
        state = self.hold_until_credit(init.state)  # held back: nothing unpickled before
        try:
            # cloudpickle's output is plain pickle: loading it imports cloudpickle only if it must.
            pipeline = pickle.loads(init.pipeline or inherited_pipeline())
        except Exception as error:
            self.send(report(error, self.generation, None))
            while True:
                self.receive()
        self.run(pipeline, init.worker, init.workers, state)

    def encode(self, element: Any, state: Any) -> tuple[Any, list[int], list[tuple[int, str]]]:
        """The message for one element, with the slabs it uses and the slabs made for it."""
        pool = self.pool
        assert pool is not None
        if element.__class__ is FailedElement:
            self.drop_element()  # a Batch may have allocated before a failure
            return pickle.dumps(report(element.error, self.generation, state), _PROTOCOL), [], []
        payload = pool.export(element)  # a full /dev/shm raises here and ends the stream
        slabs, announced = pool.finish_element()
        try:
            return (
                self.pack(Element(self.generation, state, payload, slabs, announced)),
                slabs,
                announced,
            )
        except Exception as error:
            pool.release(slabs)
            if announced:
                self.send(Announce(self.generation, announced))
            failure = transport.unsendable_element_error(element, error)
            failure.__cause__ = error
            return pickle.dumps(report(failure, self.generation, state), _PROTOCOL), [], []

    def wait_for_credit(self) -> int:
        """Reads the parent's messages until a credit (or a Restart) comes; the nanoseconds it
        waited, counted as blocked."""
        began = clock()
        while self.credits == 0 and self.restart is None:
            self.receive()
        waited = clock() - began
        self.counters.blocked_ns += waited
        return waited

    def report_stats(self) -> None:
        """Sends the counters to the parent (see the protocol's Stats paragraph)."""
        self.send(StatsReport(self.counters.snapshot()))
        self.last_report = clock()
        self.next_report = self.last_report + int(REPORT_EVERY_S * 1e9)

    def produce(self, elements: Any) -> None:
        pool = self.pool
        assert pool is not None
        counters = self.counters
        waited_before = 0  # the wait for a credit before this element was made (not ahead)
        try:
            for element, state in elements:
                begin = clock()
                waited = 0
                if tracing.EVERY_ELEMENT:  # this worker's spans go into jax.profiler traces
                    with tracing.span("transport"):
                        data, slabs, announced = self.encode(element, state)
                else:
                    data, slabs, announced = self.encode(element, state)
                if self.credits == 0 and self.restart is None:  # the buffer is full: wait
                    waited = self.wait_for_credit()
                if self.restart is not None:
                    pool.release(slabs)
                    if announced:
                        self.send(Announce(self.generation, announced))
                    raise _Restart
                self.send_bytes(data)
                counters.in_flight += counters.buffer - self.credits  # sent, not yet taken
                counters.sent += 1
                self.credits -= 1
                end = clock()
                counters.encode_ns += end - begin - waited
                if end >= self.next_report or (
                    (waited or waited_before) and end - self.last_report >= _REPORT_WHEN_BLOCKED_NS
                ):
                    self.report_stats()
                while self.conn.poll():
                    self.receive()
                waited_before = 0
                if not self.ahead and self.credits == 0 and self.restart is None:
                    waited_before = self.wait_for_credit()  # the next element only with a credit
                if self.restart is not None:
                    raise _Restart
        finally:
            elements.close()
        self.report_stats()
        self.send(End(self.generation))


INHERITED_PIPELINE: bytes | None = None
"""The pickled pipeline a fork server read before forking this worker (None: not forked so)."""


def inherited_pipeline() -> bytes:
    """The pipeline this worker inherited from its fork server, for an Init that carries none."""
    if not INHERITED_PIPELINE:
        raise GrainliteRuntimeError(
            "grainlite: this worker's Init carries no pipeline and its fork server passed none "
            "on; set GRAINLITE_WORKER_START=spawn to start each worker as its own interpreter, "
            "and report this as a bug."
        )
    return INHERITED_PIPELINE


def _watch_parent(worker: Worker, parent: int) -> None:
    """Ends the process if the parent dies while the main thread is busy in a transform."""
    event = threading.Event()
    while not event.wait(0.5):
        if os.getppid() != parent:
            worker.exit(1)


def main() -> None:
    """Entry point: ``python -m grainlite.engine.child FD PARENT_PID``.

    The parent's pid comes from the parent: read here with ``os.getppid()``, a parent that died
    while this interpreter started would already read as pid 1, and the worker would never see
    it go."""
    start(int(sys.argv[1]), int(sys.argv[2]))


def start(fd: int, parent: int) -> None:
    """Runs a worker on the socket ``fd`` until it is told to stop or ``parent`` is gone.

    ``parent`` is the pid of the process that started this one: the training process, or the
    fork server (:mod:`grainlite.engine.forkserver`) that forked it."""
    limit_arenas()  # before any thread starts (see grainlite.engine.malloc)
    read_records_in_place()  # a large list of records stays one buffer (see packed_records)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # The parent sends SIGUSR1 when this worker is silent for long: print every thread's stack.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    conn = Channel(fd)
    worker = Worker(conn)
    signal.signal(signal.SIGTERM, worker.terminate)  # before Init: no slab exists until then
    if os.getppid() != parent:  # the parent died while this interpreter started
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(worker, parent), daemon=True).start()
    try:
        init: Init = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        os._exit(0)
    if not isinstance(init, Init):  # told to stop before it was given work (a failed start)
        os._exit(0)
    worker.serve(init)


if __name__ == "__main__":
    main()
