"""The worker process: runs one worker's share of the pipeline and ships elements to the parent.

Started as ``python -m grainlite.loader.worker_main FD`` with FD one end of a socket pair. It is a
fresh interpreter that never imports the user's ``__main__`` (the pipeline arrives cloudpickled), so
scripts need no ``if __name__ == "__main__"`` guard for the workers' sake, and nothing in them
(``jax.distributed.initialize()`` for one) runs twice. JAX_PLATFORMS is set to ``cpu`` so a
transform that imports JAX never takes an accelerator.

It exits when told to stop, when the socket closes (the parent is gone, even by SIGKILL) and, as a
backstop for a worker busy in a long transform, when its parent pid changes.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import traceback
from typing import Any

import cloudpickle

from grainlite.loader.channel import Channel
from grainlite.loader.transport import SlabPool
from grainlite.transforms.base import classify

_PROTOCOL = pickle.HIGHEST_PROTOCOL


class _Restart(Exception):
    """Raised inside the worker loop when the parent moved the iterator (set_state)."""


class _Worker:
    def __init__(self, conn: Channel) -> None:
        self.conn = conn
        self.credits = 0
        self.generation = 0
        self.restart: tuple[int, Any, int] | None = None
        self.pool: SlabPool | None = None

    # Parent messages -------------------------------------------------------------------------
    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ack":
            self.credits += message[1]
            if self.pool is not None and message[2]:
                self.pool.release(message[2])
        elif kind == "restart":
            self.restart = (message[1], message[2], message[3])
        elif kind == "stop":
            self.exit(0)

    def receive(self) -> None:
        try:
            data = self.conn.recv_bytes()
        except (EOFError, OSError):
            self.exit(0)  # the parent is gone
        self.handle(pickle.loads(data))

    def send(self, message: tuple[Any, ...]) -> None:
        try:
            self.conn.send_bytes(pickle.dumps(message, _PROTOCOL))
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.exit(0)

    def exit(self, code: int) -> None:
        if self.pool is not None:
            self.pool.close()
        os._exit(code)

    # Producing -------------------------------------------------------------------------------
    def report_error(self, error: BaseException) -> None:
        text = "".join(traceback.format_exception(error))
        try:
            payload = cloudpickle.dumps(error)
            pickle.loads(payload)
        except Exception:
            payload = None
        message = str(error)
        self.send(("error", self.generation, payload, type(error).__qualname__, message, text))

    def run(self, pipeline: Any, worker: int, workers: int, state: Any) -> None:
        assert self.pool is not None
        operations = pipeline.operations
        batch_last = bool(operations) and classify(operations[-1]) == "batch"
        allocate = self.pool.allocate if batch_last and operations[-1].batch_fn is None else None
        while True:
            try:
                self.produce(pipeline.iterate(worker, workers, state, allocate))
            except _Restart:
                pass
            except Exception as error:
                slabs, announced = self.pool.finish_element()
                self.pool.release(slabs)
                if announced:
                    self.send(("announce", self.generation, announced))
                self.report_error(error)
            while self.restart is None:
                self.receive()
            self.generation, state, self.credits = self.restart
            self.restart = None

    def produce(self, elements: Any) -> None:
        pool = self.pool
        assert pool is not None
        with _closing(elements):
            for element, state in elements:
                try:
                    payload = pool.export(element)
                    slabs, announced = pool.finish_element()
                    data = pickle.dumps(
                        ("element", self.generation, state, payload, slabs, announced), _PROTOCOL
                    )
                except Exception as error:
                    raise TypeError(
                        f"An element of type {type(element).__name__} could not be sent to the "
                        f"parent process ({error}); transforms run in workers must return "
                        f"picklable values (numpy arrays, numbers, strings, dicts, lists, tuples)."
                    ) from error
                while self.credits == 0 and self.restart is None:
                    self.receive()
                if self.restart is not None:
                    pool.release(slabs)
                    self.send(("announce", self.generation, announced))
                    raise _Restart
                self.conn.send_bytes(data)
                self.credits -= 1
                while self.conn.poll():
                    self.receive()
                if self.restart is not None:
                    raise _Restart
        self.send(("end", self.generation, None))


class _closing:
    def __init__(self, generator: Any) -> None:
        self.generator = generator

    def __enter__(self) -> Any:
        return self.generator

    def __exit__(self, *exc: object) -> None:
        self.generator.close()


def _watch_parent(worker: _Worker, parent: int) -> None:
    """Ends the process if the parent dies while the main thread is busy in a transform."""
    event = threading.Event()
    while not event.wait(0.5):
        if os.getppid() != parent:
            worker.exit(1)


def main() -> None:
    """Entry point: ``python -m grainlite.loader.worker_main FD``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Channel(int(sys.argv[1]))
    worker = _Worker(conn)
    threading.Thread(target=_watch_parent, args=(worker, os.getppid()), daemon=True).start()
    try:
        init = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        os._exit(0)
    _, blob, index, workers, state, owner, kind, credits = init
    worker.credits = credits
    worker.pool = SlabPool(kind, owner)
    try:
        pipeline = cloudpickle.loads(blob)
    except Exception as error:
        worker.report_error(error)
        while True:
            worker.receive()
    worker.run(pipeline, index, workers, state)


if __name__ == "__main__":
    main()
