"""The multi-process driver: W worker processes, merged round-robin in order, no leaks.

Worker ``w`` runs the whole pipeline on every W-th record of this host's stream (see
:class:`~grainlite.loader.reader.WorkerSlice`); the parent takes one element from each worker in
turn, skipping only workers that are finished, so the output is the same on every run and equals
Grain's. Each worker may have ``worker_buffer_size`` finished elements waiting (credits).

Ownership: the :class:`WorkerStream` owns its processes and their shared memory. ``close()``,
exhaustion, an error, garbage collection and interpreter exit all end them; a worker whose parent
dies (even by SIGKILL) ends itself, see :mod:`grainlite.loader.worker_main`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import secrets
import signal
import socket
import subprocess
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from grainlite.errors import GrainliteRuntimeError, GrainliteTypeError, WorkerDiedError
from grainlite.loader import shm
from grainlite.loader.channel import Channel
from grainlite.loader.pipeline import Pipeline
from grainlite.loader.state import IteratorPosition, Layout
from grainlite.loader.transport import SlabMapper

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_EXIT_WAIT_S = 2.0


def check_picklable(pipeline: Pipeline) -> bytes:
    """Pickles the pipeline for the workers, naming the part that cannot travel if one cannot."""
    try:
        return cloudpickle.dumps(pipeline)
    except Exception as error:
        parts = [("data_source", pipeline.source), ("sampler", pipeline.sampler)]
        parts += [(f"operations[{i}]", op) for i, op in enumerate(pipeline.operations)]
        for name, part in parts:
            try:
                cloudpickle.dumps(part)
            except Exception as part_error:
                raise GrainliteTypeError(
                    f"The DataLoader's {name} ({part!r}) cannot be pickled for the worker "
                    f"processes: {part_error}. Make it picklable with cloudpickle (e.g. open "
                    f"files and locks lazily, not in __init__), or use worker_count=0."
                ) from part_error
        raise GrainliteTypeError(
            f"The DataLoader's pipeline cannot be pickled for the worker processes: {error}."
        ) from error


class RemoteTraceback(Exception):
    """Carries a worker's traceback text as the ``__cause__`` of the re-raised exception."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


@dataclass
class _Handle:
    process: subprocess.Popen[bytes]
    conn: Channel
    mapper: SlabMapper = field(default_factory=SlabMapper)


def _worker_environment() -> dict[str, str]:
    env = dict(os.environ)
    paths = [p if p else os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["JAX_PLATFORMS"] = "cpu"  # a transform that imports JAX must not take an accelerator
    return env


def _shutdown(handles: list[_Handle], segment_prefix: str) -> None:
    """Stops every worker (kills those that do not exit in time) and removes their segments."""
    for handle in handles:
        with contextlib.suppress(OSError):
            handle.conn.send_bytes(pickle.dumps(("stop",), _PROTOCOL))
    for handle in handles:
        try:
            handle.process.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            handle.process.kill()
            handle.process.wait()
        handle.conn.close()
    handles.clear()
    for name in shm.list_segments():
        if name.startswith(segment_prefix):
            shm.unlink(name)


class WorkerStream:
    """Runs the pipeline in ``layout.worker_count`` processes and merges their elements in order."""

    def __init__(
        self, pipeline: Pipeline, layout: Layout, position: IteratorPosition, loader: Any
    ) -> None:
        self._pipeline = pipeline
        self._workers = layout.worker_count
        self._states = list(position.states)
        self._next = position.next_worker
        self._exhausted = list(position.exhausted)
        self._credits = max(1, loader.multiprocessing_options.per_worker_buffer_size)
        self._generation = 0
        self._handles: list[_Handle] = []
        self._token = secrets.token_hex(4)
        self._kind = f"s{self._token}"
        self._prefix = f"{shm.PREFIX}{os.getpid()}_{self._kind}"
        self._finalizer = weakref.finalize(self, _shutdown, self._handles, self._prefix)
        self._finished = False

    # Lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Starts the worker processes (all at once, so their start-up overlaps)."""
        if self._handles or self._finished:
            return
        env = _worker_environment()
        # Interpreters start first: the rest of this method runs while they import.
        for _ in range(self._workers):
            parent_end, child_end = socket.socketpair()
            try:
                process = subprocess.Popen(
                    [sys.executable, "-m", "grainlite.loader.worker_main", str(child_end.fileno())],
                    pass_fds=(child_end.fileno(),),
                    env=env,
                    stdin=subprocess.DEVNULL,
                )
            finally:
                child_end.close()
            self._handles.append(_Handle(process, Channel(parent_end.detach())))
        try:
            shm.remove_stale_segments()
            blob = check_picklable(self._pipeline)
        except BaseException:
            self.close()
            raise
        for w in range(self._workers):
            init = (
                "init",
                blob,
                w,
                self._workers,
                self._states[w],
                os.getpid(),
                f"{self._kind}w{w}",
                self._credits,
            )
            self._handles[w].conn.send_bytes(pickle.dumps(init, _PROTOCOL))

    def close(self) -> None:
        """Stops the workers and removes every shared-memory name they made. Idempotent."""
        self._finished = True
        self._finalizer()

    def restart(self, position: IteratorPosition) -> None:
        """Moves the running workers to ``position`` without restarting the processes."""
        self._states = list(position.states)
        self._next = position.next_worker
        self._exhausted = list(position.exhausted)
        if not self._handles:
            return
        self._generation += 1
        for w, handle in enumerate(self._handles):
            message = ("restart", self._generation, self._states[w], self._credits)
            handle.conn.send_bytes(pickle.dumps(message, _PROTOCOL))

    @property
    def alive(self) -> bool:
        """True while the workers run and can be moved with :meth:`restart`."""
        return bool(self._handles) and not self._finished

    def position(self) -> IteratorPosition:
        return IteratorPosition(list(self._states), self._next, list(self._exhausted))

    # Merging ---------------------------------------------------------------------------------
    def next(self) -> Any:
        if self._finished:
            raise StopIteration
        if not self._handles:
            self.start()
        try:
            return self._next_element()
        except StopIteration:
            self.close()
            raise
        except BaseException:
            # A worker error, a dead worker or Ctrl-C: nothing more can come from this stream.
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
            message = self._receive(w)
            kind = message[0]
            if kind == "end":
                self._exhausted[w] = True
                self._next = (w + 1) % workers
                continue
            if kind == "error":
                self._raise_worker_error(w, message)
            _, _, state, payload, slabs, announced = message
            handle = self._handles[w]
            handle.mapper.announce(announced)
            element = handle.mapper.materialize(payload, slabs)
            self._states[w] = state
            self._next = (w + 1) % workers
            self._acknowledge(w)
            return element

    def _acknowledge(self, consumed_from: int) -> None:
        for w, handle in enumerate(self._handles):
            credit = 1 if w == consumed_from else 0
            released = handle.mapper.take_released()
            if credit or released:
                # A dead worker is reported when it is read from.
                with contextlib.suppress(OSError):
                    handle.conn.send_bytes(pickle.dumps(("ack", credit, released), _PROTOCOL))

    def _receive(self, w: int) -> tuple[Any, ...]:
        handle = self._handles[w]
        while True:
            try:
                data = handle.conn.recv_bytes()
            except (EOFError, OSError):
                self._raise_worker_died(w)
            message = pickle.loads(data)
            if message[0] == "announce":
                handle.mapper.announce(message[2])
                continue
            if message[1] == self._generation:
                return message
            if message[0] == "element":  # produced before a set_state: drop, reuse its memory
                handle.mapper.announce(message[5])
                handle.conn.send_bytes(pickle.dumps(("ack", 0, message[4]), _PROTOCOL))

    def _raise_worker_died(self, w: int) -> None:
        process = self._handles[w].process
        try:
            code = process.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            how = f"exit code {code} (killed by {signal.Signals(-code).name})"
        else:
            how = f"exit code {code}"
        raise WorkerDiedError(
            f"Worker process {w} (pid {process.pid}) was terminated unexpectedly with {how}. "
            f"Search the output above for the cause; a kill by SIGKILL is often the out-of-memory "
            f"killer: lower worker_count, worker_buffer_size or the batch size."
        )

    def _raise_worker_error(self, w: int, message: tuple[Any, ...]) -> None:
        _, _, blob, type_name, text, trace = message
        error: BaseException | None = None
        if blob is not None:
            try:
                error = pickle.loads(blob)
            except Exception:
                error = None
        if not isinstance(error, BaseException):
            error = GrainliteRuntimeError(f"{type_name}: {text}")
        error.add_note(f"grainlite: raised in worker process {w}; its traceback:\n{trace}")
        raise error from RemoteTraceback(trace)
