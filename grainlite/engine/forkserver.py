"""The fork server: one preloaded, single-threaded process that forks a process group's workers.

Started as ``python -m grainlite.engine.forkserver FD PARENT_PID`` by
:class:`~grainlite.engine.forkserver_client.ForkServer`, with the worker environment (the one a
worker started on its own would get: accelerators hidden, BLAS on one thread). It is a fresh
interpreter, never a fork of the training process: nothing of the training process (its threads,
its JAX state, its accelerator handles, its ``__main__``) is in it, so nothing of it reaches a
worker. It imports what every worker imports (the engine and NumPy), freezes those objects out of
the garbage collector's reach, and then forks one worker per request: each worker starts in
milliseconds instead of a fresh interpreter's 0.1 s of CPU, and the pages of the interpreter and
its imports stay shared between the workers instead of being copied W times.

Why a server and not ``os.fork()`` of the training process: the training process has threads
(JAX's, the user's, a device prefetch) and accelerator state, which a fork copies in a broken
state. Why not ``multiprocessing``'s forkserver: it runs the user's ``__main__`` again and needs
the ``if __name__ == "__main__"`` guard, which grainlite's workers never need.

FD is one end of a ``SOCK_SEQPACKET`` socket pair, the control channel. The parent's requests
(pickled tuples):

- ``("fork", worker)`` with one file descriptor (the worker's end of its socket pair) attached:
  forks a worker on it; answered by ``("started", worker, pid)`` or
  ``("failed", worker, errno, strerror)``;
- ``("import", [module, ...])``: imports the modules a pipeline names (of the packages
  :data:`~grainlite.engine.forkserver_client.PRELOADED_PACKAGES`), so the workers forked after
  share them instead of each importing them;
- ``("kill", pid)``: SIGKILLs that worker if the server has not reaped it yet (the server is the
  only process that can say the pid is still the worker's).

Each worker that ends is answered by ``("exited", pid, returncode)`` (``returncode`` as
:class:`subprocess.Popen` gives it: negative for a signal). When the control channel closes
(the group closed, or the training process died, even by SIGKILL) or its parent changes, the
server SIGKILLs the workers left, reaps them and exits: it never leaves a worker without a
parent that waits for it. A worker whose server dies sees its parent change and exits too
(:mod:`grainlite.engine.child`).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import pickle
import select
import signal
import socket
import sys
from typing import Any, NoReturn

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_WATCH_S = 0.5  # how often the server checks its parent while nothing happens


class Server:
    """The server's loop: forks workers, reaps them, reports their exits."""

    def __init__(self, control: socket.socket, parent: int) -> None:
        self.control = control
        self.parent = parent
        self.pid = os.getpid()
        self.workers: dict[int, int] = {}  # pid -> worker index, until reaped
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wake_write)

    def send(self, message: tuple[Any, ...]) -> None:
        try:
            self.control.send(pickle.dumps(message, _PROTOCOL))
        except OSError:
            self.end()  # the parent is gone

    def serve(self) -> NoReturn:
        while True:
            readable, _, _ = select.select(
                [self.control.fileno(), self.wake_read], [], [], _WATCH_S
            )
            if os.getppid() != self.parent:
                self.end()
            if self.wake_read in readable:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self.wake_read, 512):
                        pass
            self.reap()
            if self.control.fileno() in readable:
                self.request()

    def request(self) -> None:
        try:
            data, fds, _flags, _address = socket.recv_fds(self.control, 1 << 16, 1)
        except OSError:
            data, fds = b"", []
        if not data:
            for fd in fds:
                os.close(fd)
            self.end()
        message = pickle.loads(data)
        if message[0] == "fork":
            self.fork(message[1], fds[0])
        elif message[0] == "import":
            self.preload(message[1])
        elif message[0] == "kill" and message[1] in self.workers:
            with contextlib.suppress(OSError):
                os.kill(message[1], signal.SIGKILL)

    def preload(self, modules: list[str]) -> None:
        """Imports ``modules`` (a failure is left to the workers' unpickling to report), then
        freezes what they made, so its pages stay shared."""
        for name in modules:
            try:
                importlib.import_module(name)
            except BaseException:  # the worker reports it where it unpickles
                continue
        gc.collect()
        gc.freeze()

    def fork(self, worker: int, fd: int) -> None:
        try:
            pid = os.fork()
        except OSError as error:
            os.close(fd)
            self.send(("failed", worker, error.errno, error.strerror))
            return
        if pid == 0:
            self.become_worker(fd)
        os.close(fd)
        self.workers[pid] = worker
        self.send(("started", worker, pid))

    def become_worker(self, fd: int) -> NoReturn:
        """In the forked child: drop the server's channel and handlers, run the worker."""
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.control.close()
            os.close(self.wake_read)
            os.close(self.wake_write)
            fresh_random_state()
            from grainlite.engine import child  # imported by main() before any fork

            child.start(fd, self.pid)
        finally:
            os._exit(1)

    def reap(self) -> None:
        while self.workers:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.workers.pop(pid, None) is not None:
                self.send(("exited", pid, os.waitstatus_to_exitcode(status)))

    def end(self) -> NoReturn:
        """Kills the workers left, reaps them, exits."""
        for pid in list(self.workers):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in list(self.workers):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        os._exit(0)


def fresh_random_state() -> None:
    """Seeds NumPy's global random state afresh in a forked worker, as a fresh interpreter's is.

    A module the server preloaded may have imported ``numpy.random``, whose global state a fork
    copies: every worker would then draw the same ``np.random.rand()`` sequence. (Python's
    ``random`` module reseeds itself after a fork.)"""
    module = sys.modules.get("numpy.random")
    if module is not None:
        module.seed()


def main() -> None:
    """Entry point: ``python -m grainlite.engine.forkserver FD PARENT_PID``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training process's to handle
    parent = int(sys.argv[2])
    if os.getppid() != parent:  # the parent died while this interpreter started
        os._exit(1)
    # Imported only now that the parent is known alive (a parent killed while this interpreter
    # started is noticed before the imports), and before any fork, so every worker shares them.
    import numpy  # noqa: F401

    from grainlite.engine import child  # noqa: F401
    from grainlite.engine.malloc import limit_arenas
    from grainlite.engine.packed_records import read_records_in_place

    if os.getppid() != parent:
        os._exit(1)
    control = socket.socket(fileno=int(sys.argv[1]))
    limit_arenas()  # the workers inherit it (see grainlite.engine.malloc)
    read_records_in_place()
    gc.collect()
    gc.freeze()  # the imports' objects stay out of the collector's reach: their pages stay shared
    Server(control, parent).serve()


if __name__ == "__main__":
    main()
