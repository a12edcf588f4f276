"""The training process's side of the fork server (:mod:`grainlite.engine.forkserver`).

A :class:`ForkServer` starts the server interpreter with the worker environment and asks it for
one worker per socket; each worker is then a :class:`ForkedProcess`, which answers what the
process group asks of a :class:`subprocess.Popen` (``pid``, ``poll``, ``wait``, ``kill``). The
workers are the server's children (the training process's grandchildren): their exit statuses
come over the control channel, and a kill goes through the server, the one process that knows
whether a pid is still its worker's.

:func:`use_fork_server` says whether workers start this way: on Linux, unless
``GRAINLITE_WORKER_START=spawn`` asks for one fresh interpreter per worker (the way every
worker started before; ``forkserver`` is the default).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

WORKER_START_ENV = "GRAINLITE_WORKER_START"
"""``spawn``: each worker is a fresh interpreter; ``forkserver`` (default on Linux): forked by
one preloaded server process per group."""

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_CLOSE_S = 5.0  # how long close() waits for the server to reap its workers and exit

# The packages whose modules the server imports ahead of the workers, when a pipeline names them:
# they start no thread when imported (a fork copies only the thread that calls it) and are what
# a worker unpickles a pipeline with. A user's module is left to the workers: its import could
# start a thread or touch an accelerator.
PRELOADED_PACKAGES = ("grainlite", "numpy", "cloudpickle", "array_record")
_SUBMODULES = re.compile(rb"(?:\.[A-Za-z_][A-Za-z_0-9]*)*")


def preloadable_modules(pipeline: bytes) -> list[str]:
    """The modules of :data:`PRELOADED_PACKAGES` whose names appear in the pickled ``pipeline``
    and that this process has imported (so they exist), ordered by package, then by first
    appearance.

    A scan of the bytes, not of the pickle's opcodes: a name that only looks like a module's is
    harmless, as only imported modules are kept. Each package's name is found with
    ``bytes.find`` (about 7 ms per package for a pipeline of 15 MB here), and the dotted rest
    matched where it is: one regular expression over the whole pipeline took 0.1 s of the
    training process's CPU before the workers could be forked.
    """
    names: dict[str, None] = {}
    for package in PRELOADED_PACKAGES:
        literal = package.encode()
        at = pipeline.find(literal)
        while at >= 0:
            end = _SUBMODULES.match(pipeline, at + len(literal)).end()  # type: ignore[union-attr]
            names[pipeline[at:end].decode()] = None
            at = pipeline.find(literal, end)
    return [name for name in names if name in sys.modules]


def use_fork_server() -> bool:
    """True where workers are forked by a fork server (Linux, unless the variable says spawn)."""
    choice = os.environ.get(WORKER_START_ENV, "forkserver").strip().lower()
    return choice != "spawn" and sys.platform.startswith("linux") and hasattr(os, "fork")


class ForkServer:
    """One server process that forks the workers of one process group, tagged ``tag`` (the
    group's tag, which starts its workers' slab names: the server removes those left as it
    ends)."""

    def __init__(self, env: Mapping[str, str], tag: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "grainlite.engine.forkserver",
                    str(theirs.fileno()),
                    str(os.getpid()),
                    tag,
                ],
                pass_fds=(theirs.fileno(),),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                process_group=0,  # Ctrl-C reaches only the training process (see process_group)
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._conn: socket.socket | None = ours
        self._lock = threading.Lock()
        self._pids: dict[int, int] = {}  # worker -> pid
        self._failures: dict[int, OSError] = {}  # worker -> why its fork failed
        self._codes: dict[int, int] = {}  # pid -> return code
        self._gone = False  # the server ended (its channel closed)

    def preload(self, modules: list[str], pipeline: bytes) -> bool:
        """Asks the server to import ``modules`` before it forks (an import that fails is left
        to the worker, which reports it where it unpickles) and to keep ``pipeline``, which the
        workers forked after it inherit (:func:`grainlite.engine.child.inherited_pipeline`);
        True if the server has it.

        The pipeline travels once, through a memory file whose descriptor goes with the
        request, instead of in every worker's Init: on a pipeline of 15 MB, pickling and
        writing it to 16 workers took the training process 0.5 s before their first element,
        and each worker kept its own copy."""
        assert self._conn is not None
        request = pickle.dumps(("import", modules), _PROTOCOL)
        fd = _memory_file(pipeline)  # None: each Init carries the pipeline
        try:
            if fd is None:
                self._conn.send(request)
            else:
                socket.send_fds(self._conn, [request], [fd])
        except OSError:
            self._gone = True
            return False
        finally:
            if fd is not None:
                os.close(fd)
        return fd is not None

    def fork(self, worker: int, fd: int) -> ForkedProcess:
        """Asks the server to fork ``worker`` on the socket ``fd`` (the caller then closes its
        copy); returns at once."""
        assert self._conn is not None
        try:
            socket.send_fds(self._conn, [pickle.dumps(("fork", worker), _PROTOCOL)], [fd])
        except OSError:
            self._gone = True
        return ForkedProcess(self, worker)

    # Reading the server's reports ------------------------------------------------------------
    def _read(self, timeout: float | None) -> bool:
        """Reads one report if one comes within ``timeout`` s; False when none came or the
        server is gone. Call with the lock held."""
        if self._gone or self._conn is None:
            return False
        readable, _, _ = select.select([self._conn], [], [], timeout)
        if not readable:
            return False
        try:
            data = self._conn.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self._gone = True
            return False
        message = pickle.loads(data)
        if message[0] == "started":
            self._pids[message[1]] = message[2]
        elif message[0] == "failed":
            self._failures[message[1]] = OSError(message[2], message[3])
        elif message[0] == "exited":
            self._codes[message[1]] = message[2]
        return True

    def pid(self, worker: int) -> int | None:
        """The pid of ``worker``, once the server said it; None if its fork failed or the
        server ended first."""
        with self._lock:
            while worker not in self._pids and worker not in self._failures:
                if not self._read(None):
                    return None
            return self._pids.get(worker)

    def failure(self, worker: int) -> OSError | None:
        """Why the server could not fork ``worker``, or None."""
        self.pid(worker)
        return self._failures.get(worker)

    def returncode(self, pid: int, timeout: float | None) -> int | None:
        """The return code of worker ``pid``, waiting up to ``timeout`` s (None: no limit);
        None if it has not ended by then. Once the server has ended (it ends the workers left
        as it ends; a worker whose server is killed exits as it sees its parent change), a
        worker that is gone without a report counts as killed (-9)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while pid not in self._codes:
                if self._gone:
                    if not _alive(pid):
                        return self._codes.setdefault(pid, -9)
                    if deadline is not None and time.monotonic() >= deadline:
                        return None
                    time.sleep(0.02)
                    continue
                if deadline is None:
                    self._read(None)
                    continue
                left = max(0.0, deadline - time.monotonic())
                if not self._read(left) and not self._gone and time.monotonic() >= deadline:
                    return None
            return self._codes[pid]

    def kill(self, pid: int) -> None:
        """SIGKILLs worker ``pid`` through the server (directly if the server is gone).

        A SIGKILLed worker cannot unlink its slabs: the group's close removes them (the server
        as it ends, and the process group after it)."""
        if pid in self._codes:
            return
        if not self._gone and self._conn is not None:
            try:
                self._conn.send(pickle.dumps(("kill", pid), _PROTOCOL))
                return
            except OSError:
                self._gone = True
        with contextlib.suppress(OSError):
            os.kill(pid, 9)

    def close(self) -> None:
        """Closes the channel and waits for the server, which ends and reaps any worker left,
        removes the group's segments left and exits (see :mod:`grainlite.engine.forkserver`); a
        server that has not exited after :data:`_CLOSE_S` is killed (its workers then see their
        parent gone and exit)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._gone = True
        try:
            self.process.wait(_CLOSE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _memory_file(data: bytes) -> int | None:
    """A descriptor of an anonymous memory file holding ``data``, or None where memory files
    cannot be made or filled here (no ``memfd_create``, or no memory for it)."""
    try:
        fd = os.memfd_create("grainlite-pipeline", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None
    try:
        with open(fd, "wb", closefd=False) as memory_file:
            memory_file.write(data)
    except OSError:
        os.close(fd)
        return None
    return fd


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class ForkedProcess:
    """A worker forked by a :class:`ForkServer`, seen through the Popen methods the group uses."""

    def __init__(self, server: ForkServer, worker: int) -> None:
        self._server = server
        self._worker = worker

    @property
    def pid(self) -> int:
        """The worker's pid (waits for the server's answer); -1 if it never started."""
        pid = self._server.pid(self._worker)
        return -1 if pid is None else pid

    def failure(self) -> OSError | None:
        """Why the server could not fork this worker, or None."""
        return self._server.failure(self._worker)

    def poll(self) -> int | None:
        pid = self.pid
        return 0 if pid < 0 else self._server.returncode(pid, 0.0)

    def wait(self, timeout: float | None = None) -> int:
        pid = self.pid
        if pid < 0:
            return 0
        code = self._server.returncode(pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"worker {self._worker}", timeout or 0.0)
        return code

    def kill(self) -> None:
        pid = self.pid
        if pid >= 0:
            self._server.kill(pid)
