"""The process group: starts the worker interpreters, talks to them, and ends them all.

Ownership: a :class:`ProcessGroup` owns its processes, their channels and every shared-memory
segment its workers made (named with the group's tag). :meth:`ProcessGroup.close`, garbage
collection and interpreter exit all run :func:`_shutdown`: every worker is told to stop, all of
them get one shared deadline to exit, the rest are killed, and the group's segments are removed.
A Ctrl-C during that wait is held back until the shutdown is complete, then raised.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from grainlite import shm
from grainlite.engine.channel import Channel
from grainlite.engine.forkserver_client import (
    ForkedProcess,
    ForkServer,
    preloadable_modules,
    use_fork_server,
)
from grainlite.engine.protocol import Stop, ToParent, ToWorker
from grainlite.engine.remote_errors import worker_died
from grainlite.engine.stall import StackRequest
from grainlite.errors import ResourceLimitError, WorkerDiedError

_PROTOCOL = pickle.HIGHEST_PROTOCOL
# All workers together get this long to exit after Stop; then the rest are killed.
_EXIT_DEADLINE_S = 1.0


@dataclass
class _Handle:
    process: subprocess.Popen[bytes] | ForkedProcess
    conn: Channel


# Set in workers unless grain.config's hide_accelerators_in_workers is False: a transform that
# imports JAX, PyTorch or TensorFlow must not take GPU memory or a TPU from the training process.
# -1 is an invalid device index: CUDA shows only the devices listed before the first invalid one,
# so none; the ROCm variables are documented to work alike (no GPU here checks either). TensorFlow
# has no variable that hides a TPU; JAX (JAX_PLATFORMS) and PyTorch/XLA (PJRT_DEVICE) do.
HIDDEN_ACCELERATORS = {
    "CUDA_VISIBLE_DEVICES": "-1",
    "HIP_VISIBLE_DEVICES": "-1",
    "ROCR_VISIBLE_DEVICES": "-1",
    "JAX_PLATFORMS": "cpu",
    "PJRT_DEVICE": "CPU",
}


def hidden_accelerators() -> dict[str, str]:
    """The variables that hide accelerators from a worker ({} when the config keeps them)."""
    from grainlite import config

    return (
        dict(HIDDEN_ACCELERATORS) if config.get_or_default("hide_accelerators_in_workers") else {}
    )


# The variables OpenBLAS (numpy's BLAS) reads for its thread count, in its order of precedence.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def single_threaded_blas(environ: Mapping[str, str]) -> dict[str, str]:
    """``OPENBLAS_NUM_THREADS=1``, or {} where ``environ`` already sets a BLAS thread count.

    numpy's OpenBLAS starts a thread per CPU as numpy is imported, in every worker: W workers
    bring W x CPUs threads, and on 2 CPUs the start-up alone cost each worker 0.07 s more CPU
    and the first batch 0.07 s more wall time (``benchmarks.startup``'s probe). A worker runs
    one pipeline in its main thread, so its BLAS runs on one thread, as PyTorch's DataLoader
    runs its workers' own operations; a count set in the environment is kept.
    """
    if any(name in environ for name in BLAS_THREAD_VARIABLES):
        return {}
    return {"OPENBLAS_NUM_THREADS": "1"}


def worker_environment() -> dict[str, str]:
    """The environment of a worker: the parent's, its import path, accelerators hidden and BLAS
    on one thread (:func:`single_threaded_blas`).

    Accelerators stay visible when ``grain.config.update("hide_accelerators_in_workers", False)``
    was called (or ``GRAINLITE_HIDE_ACCELERATORS_IN_WORKERS=0`` is set).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = import_path()
    env.update(hidden_accelerators())
    env.update(single_threaded_blas(os.environ))
    return env


def import_path() -> str:
    """This process's ``sys.path`` as a PYTHONPATH value (workers import what the parent can)."""
    return os.pathsep.join(p if p else os.getcwd() for p in sys.path)


def _start_error(worker: int, count: int, error: OSError) -> ResourceLimitError:
    """The error for a worker the system would not start, with the limit to look at."""
    if error.errno in (errno.EMFILE, errno.ENFILE):
        fix = (
            "this process has too many open files: close loaders you no longer use, or raise the "
            "limit (`ulimit -n`)"
        )
    elif error.errno == errno.EAGAIN:
        fix = "the user's process limit is reached: raise `ulimit -u`, or use fewer workers"
    else:
        fix = "use fewer workers, or worker_count=0"
    return ResourceLimitError(
        error.errno or 0,
        f"Could not start worker process {worker} of {count} ({error.strerror}): {fix}.",
    )


class ProcessGroup:
    """``count`` worker processes running :mod:`grainlite.engine.child`, tagged ``tag``."""

    runs_on_this_host = True  # its workers share this host's CPUs (see flow.makes_ahead)

    def __init__(self, count: int, tag: str) -> None:
        self.count = count
        self.tag = tag
        self._handles: list[_Handle] = []
        self._servers: list[ForkServer] = []  # the fork server, where workers are forked
        self._finalizer = weakref.finalize(
            self, _shutdown, self._handles, tag, os.getpid(), self._servers
        )

    @property
    def started(self) -> bool:
        """True while the processes run."""
        return bool(self._handles) or bool(self._servers)

    def start(self) -> None:
        """Starts every worker at once, so their start-up overlaps; returns before they run.

        Where :func:`~grainlite.engine.forkserver_client.use_fork_server` (Linux, by default),
        one fork server process (a fresh interpreter with the worker environment that imported
        the engine) forks every worker; elsewhere each worker is a fresh interpreter."""
        env = worker_environment()
        if use_fork_server():
            self._start_forked(env)
            return
        for worker in range(self.count):
            parent_end, child_end = self._socket_pair(worker)
            try:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "grainlite.engine.child",
                        str(child_end.fileno()),
                        str(os.getpid()),
                    ],
                    pass_fds=(child_end.fileno(),),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    # Its own process group: a Ctrl-C at the terminal (or a notebook kernel's
                    # interrupt) reaches only the parent, which stops the workers; a worker still
                    # importing would otherwise die with a KeyboardInterrupt traceback.
                    process_group=0,
                )
            except BaseException as error:
                parent_end.close()
                if isinstance(error, OSError):
                    raise _start_error(worker, self.count, error) from error
                raise
            finally:
                child_end.close()
            self._handles.append(_Handle(process, Channel(parent_end.detach())))

    def _socket_pair(self, worker: int) -> tuple[socket.socket, socket.socket]:
        try:
            return socket.socketpair()
        except OSError as error:
            raise _start_error(worker, self.count, error) from error

    def _start_forked(self, env: dict[str, str]) -> None:
        """Starts the fork server (see :mod:`grainlite.engine.forkserver`); the workers are
        forked at :meth:`preload` or at the first message, whichever comes first, so the server
        imports what the pipeline needs while the parent pickles it."""
        try:
            server = ForkServer(env, self.tag)
        except OSError as error:
            raise _start_error(0, self.count, error) from error
        self._servers.append(server)

    def preload(self, pipeline: bytes) -> bool:
        """Has the fork server import the modules the pickled ``pipeline`` names (those of
        :func:`~grainlite.engine.forkserver_client.preloadable_modules`) and keep the pipeline,
        then forks the workers: each worker finds them imported, and the pipeline in its
        memory. True when the workers have the pipeline that way (their Init then need not carry
        it); False where workers are not forked, or were forked before."""
        inherited = False
        if self._servers and not self._handles:
            inherited = self._servers[0].preload(preloadable_modules(pipeline), pipeline)
        self._fork_workers()
        return inherited

    def _fork_workers(self) -> None:
        """Asks the fork server for every worker, once."""
        if not self._servers or self._handles:
            return
        server = self._servers[0]
        for worker in range(self.count):
            parent_end, child_end = self._socket_pair(worker)
            try:
                process = server.fork(worker, child_end.fileno())
            except BaseException:
                parent_end.close()
                raise
            finally:
                child_end.close()
            self._handles.append(_Handle(process, Channel(parent_end.detach())))

    def _handle(self, worker: int) -> _Handle:
        self._fork_workers()
        return self._handles[worker]

    def pid(self, worker: int) -> int:
        """The process id of ``worker``."""
        return self._handle(worker).process.pid

    def dump_stacks(self, worker: int) -> StackRequest:
        """Asks ``worker`` to print its threads' Python stacks to its standard error, unless it
        does not handle the signal yet (a worker started as a fresh interpreter that has not
        reached its handler: the signal would end it) or has ended; says which."""
        pid = self.pid(worker)
        state = _signal_state(pid, signal.SIGUSR1)
        if state != "caught":
            return StackRequest.STARTING if state == "default" else StackRequest.ENDED
        try:
            os.kill(pid, signal.SIGUSR1)  # faulthandler in the worker
        except OSError:
            return StackRequest.ENDED
        return StackRequest.ASKED

    def ended(self, worker: int) -> bool:
        """True once ``worker`` has ended, reaped or not: a message sent to it would not be
        read, even where its socket is still open (a send then succeeds)."""
        process = self._handle(worker).process
        if process.poll() is not None:
            return True
        return _signal_state(process.pid, signal.SIGTERM) == "ended"

    def send(self, worker: int, message: ToWorker) -> None:
        """Sends a message; raises OSError if the worker is gone."""
        self._handle(worker).conn.send_bytes(pickle.dumps(message, _PROTOCOL))

    def send_quietly(self, worker: int, message: ToWorker) -> None:
        """Sends a message if the worker is still there (a dead one is reported when read)."""
        with contextlib.suppress(OSError):
            self.send(worker, message)

    def ready(self, worker: int, timeout: float | None) -> bool:
        """True once ``worker`` has a message waiting (or has ended), within ``timeout`` s."""
        if timeout is None:
            return True  # the read that follows blocks as long as it takes
        readable, _, _ = select.select([self._handle(worker).conn], [], [], timeout)
        return bool(readable)

    def receive(self, worker: int) -> ToParent:
        """The next message of ``worker``; raises WorkerDiedError if it ended without one."""
        handle = self._handle(worker)
        try:
            data = handle.conn.recv_bytes()
        except (EOFError, OSError):
            raise self._died(worker) from None
        message: ToParent = pickle.loads(data)
        return message

    def _died(self, worker: int) -> WorkerDiedError | ResourceLimitError:
        process = self._handle(worker).process
        failure = process.failure() if isinstance(process, ForkedProcess) else None
        if failure is not None:  # the fork server could not fork it
            return _start_error(worker, self.count, failure)
        try:
            code = process.wait(_EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            code = None
        return worker_died(worker, process.pid, code)

    def close(self) -> None:
        """Stops every worker and removes the group's shared memory. Idempotent."""
        self._finalizer()


def _shutdown(handles: list[_Handle], tag: str, creator: int, servers: list[ForkServer]) -> None:
    if os.getpid() != creator:
        # A child made by os.fork() inherited this group: the workers and their shared memory
        # belong to the parent, which still uses them. The child leaves them alone.
        return
    with interrupts_held_back():
        try:
            for handle in handles:
                with contextlib.suppress(OSError):
                    handle.conn.send_bytes(pickle.dumps(Stop(), _PROTOCOL))
            deadline = time.monotonic() + _EXIT_DEADLINE_S
            for handle in handles:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    handle.process.wait(max(0.0, deadline - time.monotonic()))
        finally:
            for handle in handles:
                if handle.process.poll() is None:
                    handle.process.kill()
            for handle in handles:
                handle.process.wait()
                handle.conn.close()
            handles.clear()
            for server in servers:
                server.close()  # it has reaped every worker; now it exits
            servers.clear()
            shm.remove_tagged(tag)


@contextlib.contextmanager
def interrupts_held_back() -> Iterator[None]:
    """Defers SIGINT (Ctrl-C) until the block is done, where that is possible (main thread).

    A Ctrl-C that arrived meanwhile is raised (the previous handler is called) when the block
    ends, so it is never lost: not even in code that would swallow it (a C extension's import,
    a subprocess half-started), and the block's clean-up always runs whole.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is None
    ):  # not the main thread, or a handler set outside Python that could not be put back
        yield
        return
    received: list[int] = []
    try:
        previous: Any = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    except (ValueError, OSError):  # not the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and callable(previous):
            previous(signal.SIGINT, None)
        elif received and previous == signal.SIG_DFL:
            raise KeyboardInterrupt


def _signal_state(pid: int, signum: int) -> str:
    """How process ``pid`` would take ``signum`` (Linux: the state and the caught-signals mask in
    ``/proc/PID/status``): ``"caught"`` (it has a handler), ``"default"`` (not yet) or
    ``"ended"`` (gone, or ended and not yet reaped). ``"caught"`` where that cannot be read for
    another reason than the process being gone (no ``/proc``): the signal is sent as before."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                    return "ended"
                if line.startswith("SigCgt:"):
                    caught = int(line.split()[1], 16) >> (signum - 1) & 1
                    return "caught" if caught else "default"
    except FileNotFoundError:
        return "ended" if os.path.isdir("/proc/self") else "caught"
    except OSError:
        pass
    return "caught"
