"""The fork server: one preloaded, single-threaded process that forks a process group's workers.

Started as ``python -m grainlite.engine.forkserver FD PARENT_PID TAG`` by
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
  share them instead of each importing them. A memory file holding the pickled pipeline may be
  attached: the server reads it once, and the workers forked after inherit it (their Init then
  carries no pipeline);
- ``("kill", pid)``: SIGKILLs that worker if the server has not reaped it yet (the server is the
  only process that can say the pid is still the worker's). The group asks this only of a worker
  that did not exit within its deadline after Stop, and then closes the channel: the segments
  such a worker could not unlink are removed as the server ends (below).

Each worker that ends is answered by ``("exited", pid, returncode)`` (``returncode`` as
:class:`subprocess.Popen` gives it: negative for a signal).

**Ending.** When the control channel closes (the group closed, or the training process died,
even by SIGKILL or SIGTERM) or its parent changes, the group is over and the server ends it:

1. it sends SIGTERM to every worker left: a worker unlinks its slabs and exits on SIGTERM
   (:mod:`grainlite.engine.child`). A worker of this server cannot see the training process die
   by its parent pid (its parent is the server), and one busy in a transform does not read its
   closed channel, so without this it would never end by itself;
2. it waits up to :data:`_END_S` for them, then SIGKILLs those left and reaps every one: it never
   leaves a worker without a parent that waits for it;
3. with no worker of the group left, it removes the group's segments that remain (those of a
   worker SIGKILLed, or interrupted as it made one): every segment named with the group's TAG and
   the training process's pid as owner (:func:`grainlite.shm.remove_tagged`), and exits.

A worker whose server dies (SIGKILLed itself) sees its parent change and exits too, unlinking its
slabs (:mod:`grainlite.engine.child`); the training process, if it lives, removes the group's
segments as it closes the group (:mod:`grainlite.engine.process_group`).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import importlib
import os
import pickle
import select
import signal
import socket
import sys
import time
from typing import Any, NoReturn

from grainlite import shm

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_WATCH_S = 0.5  # how often the server checks its parent while nothing happens
# How long the workers get to exit after SIGTERM as the server ends (they unlink their slabs and
# exit in milliseconds; one deaf to it, in a C call that blocks signals, is then SIGKILLed and
# its slabs removed by the server). Well under the client's close() wait (forkserver_client).
_END_S = 1.0


class Server:
    """The server's loop: forks workers, reaps them, reports their exits."""

    def __init__(self, control: socket.socket, parent: int, tag: str) -> None:
        self.control = control
        self.parent = parent
        self.tag = tag  # the group's tag: its workers' slab names start with it
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
            if fds:
                keep_pipeline(fds[0])
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
        """Ends the group: SIGTERM to the workers left, SIGKILL to those still running after
        :data:`_END_S`, every one reaped, then the group's segments left removed; exits.

        Never reports over the channel (it is closed, or its reader is gone)."""
        for pid in self.workers:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + _END_S
        while self.workers and time.monotonic() < deadline:
            for pid in list(self.workers):
                if waited(pid, os.WNOHANG):
                    del self.workers[pid]
            time.sleep(0.01)
        for pid in self.workers:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.workers:
            waited(pid, 0)
        # Every worker is reaped: none can make a segment any more. The group's segments are the
        # training process's by name (Init.owner_pid), of this group's tag.
        shm.remove_tagged(self.tag, self.parent)
        os._exit(0)


def keep_pipeline(fd: int) -> None:
    """Reads the pickled pipeline from the memory file ``fd`` (then closed) into this process,
    where the workers forked after find it (:func:`grainlite.engine.child.inherited_pipeline`):
    one copy, its pages shared by them all."""
    from grainlite.engine import child

    try:
        with open(fd, "rb") as memory_file:  # closes fd
            memory_file.seek(0)  # the sender's offset: the description is shared
            child.INHERITED_PIPELINE = memory_file.read()
    except OSError:  # the workers are then told it is missing (an empty pipeline)
        child.INHERITED_PIPELINE = b""


def waited(pid: int, options: int) -> bool:
    """``os.waitpid(pid, options)``; True once ``pid`` is reaped (or is no child any more)."""
    try:
        return os.waitpid(pid, options)[0] == pid
    except ChildProcessError:
        return True


def fresh_random_state() -> None:
    """Seeds NumPy's global random state afresh in a forked worker, as a fresh interpreter's is.

    A module the server preloaded may have imported ``numpy.random``, whose global state a fork
    copies: every worker would then draw the same ``np.random.rand()`` sequence. (Python's
    ``random`` module reseeds itself after a fork.)"""
    module = sys.modules.get("numpy.random")
    if module is not None:
        module.seed()


def main() -> None:
    """Entry point: ``python -m grainlite.engine.forkserver FD PARENT_PID TAG``.

    PARENT_PID is the training process, the owner its workers record in their slab names; TAG
    is the group's tag, which starts the name tag of each of its workers' slabs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training process's to handle
    # A stalled worker is asked for its stacks with SIGUSR1 (grainlite.engine.stall), whose
    # default action ends a process. Registered here, the handler is in every worker from the
    # instant it is forked: a SIGUSR1 sent to a worker still starting prints its stacks.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parent, tag = int(sys.argv[2]), sys.argv[3]
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
    Server(control, parent, tag).serve()


if __name__ == "__main__":
    main()
