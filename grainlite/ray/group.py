"""The parent's side of :class:`grainlite.ray.RayWorkers`: actors that speak the engine protocol.

:class:`RayGroup` has the methods of :class:`grainlite.engine.process_group.ProcessGroup` that
:class:`grainlite.engine.parent.WorkerStream` uses, so the merge, the credits and the states are
the engine's own. An actor on this host (one that shares this process's shared memory) connects
to a socket of this process (:mod:`grainlite.ray.direct`) as it starts, and its messages travel
there as a local worker's do, with no Ray call per element; until its ``hello`` says whether it
connected, the messages for it wait here. With the others the messages travel as Ray calls:
each such actor has ``TAKES_IN_FLIGHT`` ``take()`` calls outstanding, numbered so it
answers them in order; a reply (the worker's next messages) waits in Ray's object store until the
merge reads it, and the parent's next message to that worker (the element's credit) makes the
next call, so the round trips overlap and an element costs one call. Other messages go out as
``post(seq, ...)`` calls, numbered so the actor applies them in order.

Ownership: a group owns its actors and nothing else; :meth:`RayGroup.close`, garbage collection
and interpreter exit end them and the shared memory they leave (:mod:`grainlite.ray.teardown`).
A dead actor, a lost cluster and workers no node can place surface as grainlite's errors
(:mod:`grainlite.ray.failures`).
"""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import select
import time
import weakref
from typing import Any

from grainlite import _optional, shm
from grainlite.engine.channel import Channel
from grainlite.engine.process_group import hidden_accelerators, import_path
from grainlite.engine.protocol import Ack, ToParent, ToWorker
from grainlite.engine.stall import StackRequest
from grainlite.errors import WorkerDiedError
from grainlite.ray.actor import TAKES_IN_FLIGHT, WorkerActor, unpack
from grainlite.ray.connect import connect
from grainlite.ray.direct import DirectListener
from grainlite.ray.failures import actor_gone, check_placeable, disconnected, worker_died
from grainlite.ray.health import ClusterHealth
from grainlite.ray.teardown import kill_actors

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_POLL_S = 1.0  # a blocking read checks the cluster connection this often
_DEATH_WAIT_S = 10.0  # how long Ray may take to report why an actor's socket closed

_remote_class: Any = None


def _ray() -> Any:
    return _optional.require("ray", "ray", "Running workers on Ray (grainlite.ray.RayWorkers)")


def _actor_class(ray: Any) -> Any:
    global _remote_class
    if _remote_class is None:
        # Threads: take() waits for the worker while post() delivers the parent's messages.
        _remote_class = ray.remote(max_concurrency=4 + TAKES_IN_FLIGHT)(WorkerActor)
    return _remote_class


class RayGroup:
    """``count`` worker actors of one stream, placed as ``spec`` (a RayWorkers) says."""

    def __init__(self, count: int, spec: Any, tag: str) -> None:
        self.count = count
        self._spec = spec
        self._tag = tag
        # Actors on this host hand elements over in shared memory (they compare this key).
        self._memory_key = shm.memory_key() if spec.shared_memory else None
        self._actors: list[Any] = []
        self._pending: list[collections.deque[Any]] = []  # each worker's take() calls in flight
        self._takes: list[int] = []  # take() calls made to each worker
        self._hello: list[Any] = []
        self._known: dict[int, tuple[int, str]] = {}
        self._buffered: list[collections.deque[Any]] = []
        self._seq: list[int] = []
        # Slabs the user freed, per worker, not sent yet: they go with the next message to it.
        self._released: list[list[int]] = []
        # Where each worker's messages travel: its socket, or Ray calls (None) once resolved.
        self._channels: list[Channel | None] = []
        self._resolved: list[bool] = []
        self._unsent: list[list[ToWorker]] = []  # messages held until a worker is resolved
        self._readable: list[bool] = []  # a select() said the worker's socket has a message
        self._listeners: list[DirectListener] = []
        self._health = ClusterHealth()
        self._finalizer = weakref.finalize(
            self,
            kill_actors,
            self._actors,
            os.getpid(),
            self._health,
            self._hello,
            tag,
            self._channels,
            self._listeners,
        )

    @property
    def started(self) -> bool:
        """True while the actors run."""
        return bool(self._actors)

    def start(self) -> None:
        """Connects to Ray (``ray.init`` if needed, bounded: see :mod:`grainlite.ray.connect`) and
        creates the actors; returns at once."""
        ray = _ray()
        connect(ray, self._spec.address, self._spec.connect_timeout_s)
        needs = dict(self._spec.resources)
        check_placeable(ray, needs)
        runtime_env = dict(self._spec.runtime_env)
        env = {**hidden_accelerators(), "PYTHONPATH": import_path()}
        runtime_env["env_vars"] = {**env, **dict(runtime_env.get("env_vars", {}))}
        options: dict[str, Any] = {"num_cpus": needs.pop("CPU"), "runtime_env": runtime_env}
        if needs:
            options["resources"] = needs
        cls = _actor_class(ray).options(**options)
        listener = DirectListener.open(self.count) if self._memory_key is not None else None
        if listener is not None:
            self._listeners.append(listener)
        for worker in range(self.count):
            address = None if listener is None else listener.address(worker)
            self._actors.append(cls.remote(self._memory_key, address))
        self._hello[:] = [actor.hello.remote() for actor in self._actors]
        self._channels[:] = [None] * self.count
        self._resolved = [listener is None] * self.count  # no listener: every one by Ray calls
        self._unsent = [[] for _ in self._actors]
        self._readable = [False] * self.count
        self._pending = [collections.deque() for _ in self._actors]  # the first send() asks
        self._takes = [0] * self.count
        self._buffered = [collections.deque() for _ in self._actors]
        self._seq = [0] * self.count
        self._released = [[] for _ in self._actors]

    def pid(self, worker: int) -> int:
        """The process id of ``worker``'s actor (-1 while not known)."""
        return self._where(worker)[0]

    def _where(self, worker: int) -> tuple[int, str]:
        if worker not in self._known:
            ray = _ray()
            if not ray.is_initialized():  # a Ray call would start a new local instance
                return -1, "an unknown node"
            try:
                # A dead actor answers at once (an error); a live one under load may take seconds.
                pid, node, _ = ray.get(self._hello[worker], timeout=10.0)
                self._known[worker] = (pid, node)
            except Exception:
                return -1, "an unknown node"
        return self._known[worker]

    def dump_stacks(self, worker: int) -> StackRequest:
        """Asks ``worker``'s actor to print its stacks to its standard error (Ray's log);
        UNREACHABLE where Ray is no longer connected or the call could not be made."""
        if not _ray().is_initialized():
            return StackRequest.UNREACHABLE
        try:
            self._actors[worker].dump_stacks.remote()
        except Exception:
            return StackRequest.UNREACHABLE
        return StackRequest.ASKED

    def ended(self, worker: int) -> bool:
        """False: a Ray actor's end is seen when a send or a receive fails (its
        ``ProcessGroup`` twin also asks the process table)."""
        return False

    def send(self, worker: int, message: ToWorker) -> None:
        """Sends a message (on the worker's socket, or as a Ray call; a dead actor is reported
        when read).

        Raises OSError where the worker's socket is closed, and ClusterConnectionError (an
        OSError, as a local worker's closed socket gives) when this process is no longer
        connected to Ray.
        """
        channel = self._channels[worker]
        if channel is not None:
            channel.send_bytes(pickle.dumps(message, _PROTOCOL))
            return
        ray = _ray()
        if not ray.is_initialized():
            raise disconnected(None)
        if not self._resolved[worker]:
            self._unsent[worker].append(message)
            self._resolve(ray, 0.0)
            return
        self._send_by_call(worker, message)

    def _send_by_call(self, worker: int, message: ToWorker) -> None:
        released = self._released[worker]
        if type(message) is Ack:
            if not message.credit:  # freed slabs only: each Ray call costs; they wait for one
                released.extend(message.released)
                return
            if released:
                message = Ack(message.credit, released + message.released)
                self._released[worker] = []
        elif released:  # a Restart or Stop: the freed slabs go first
            self._released[worker] = []
            self._call(worker, Ack(0, released))
        self._call(worker, message)

    def _resolve(self, ray: Any, timeout: float) -> None:
        """Learns, of each actor whose ``hello`` lands within ``timeout`` s, whether it connected
        to this process's socket, and sends it the messages held for it there or by Ray calls.

        An actor that died before its ``hello`` goes to Ray calls, which report its death."""
        waiting = {self._hello[w]: w for w in range(self.count) if not self._resolved[w]}
        if not waiting:
            return
        refs = list(waiting)
        landed, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if landed:
            landed, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in landed:
            worker = waiting[ref]
            try:
                pid, node, connected = ray.get(ref, timeout=0)
                self._known[worker] = (pid, node)
            except Exception:
                connected = False
            channel = self._listeners[0].channel(worker) if connected else None
            if connected and channel is None:
                raise self._died(worker, ConnectionError("its socket sent no handshake"))
            self._resolved[worker] = True
            self._channels[worker] = channel
            unsent, self._unsent[worker] = self._unsent[worker], []
            for message in unsent:
                if channel is None:
                    self._send_by_call(worker, message)
                else:
                    with contextlib.suppress(OSError):  # reported when read
                        channel.send_bytes(pickle.dumps(message, _PROTOCOL))
        if all(self._resolved):
            for listener in self._listeners:
                listener.close()

    def _call(self, worker: int, message: ToWorker) -> None:
        """One Ray call with ``message`` (and a take() where fewer than TAKES_IN_FLIGHT wait)."""
        seq = self._seq[worker]
        self._seq[worker] = seq + 1
        data = pickle.dumps(message, _PROTOCOL)
        actor = self._actors[worker]
        pending = self._pending[worker]
        if len(pending) < TAKES_IN_FLIGHT:  # one call delivers the message and asks for a reply
            pending.append(actor.take.remote(self._take_number(worker), seq, data))
            while len(pending) < TAKES_IN_FLIGHT:
                pending.append(actor.take.remote(self._take_number(worker)))
        else:
            actor.post.remote(seq, data)

    def send_quietly(self, worker: int, message: ToWorker) -> None:
        """Sends a message if the cluster is still there (a dead actor is reported when read)."""
        with contextlib.suppress(OSError):
            self.send(worker, message)

    def ready(self, worker: int, timeout: float | None) -> bool:
        """True once ``worker`` has a message here, within ``timeout`` s.

        Waits in steps of at most ``_POLL_S`` seconds, checking the cluster connection between
        them, so a lost head is reported even while every worker is silent. The wait is the
        read itself (one ``ray.get`` with a timeout): a reply that lands is kept for
        :meth:`receive`, so an element costs one Ray call here, not a wait and a get. Raises
        WorkerDiedError if the actor died.
        """
        if timeout is None or self._buffered[worker] or self._readable[worker]:
            return True
        ray = _ray()
        deadline = time.monotonic() + timeout
        while True:
            self._check_connected(ray)
            left = deadline - time.monotonic()
            step = max(0.0, min(_POLL_S, left))
            if not self._resolved[worker]:
                if not ray.is_initialized():
                    raise disconnected(None)
                self._resolve(ray, step)
                if self._resolved[worker]:
                    continue
            elif self._landed(ray, worker, step):
                return True
            if left <= _POLL_S:
                return False

    def _landed(self, ray: Any, worker: int, timeout: float) -> bool:
        """True if a message of ``worker`` is here or lands within ``timeout`` s."""
        channel = self._channels[worker]
        if channel is None:
            return self._fetch(ray, worker, timeout)
        if not ray.is_initialized():
            raise disconnected(None)
        readable, _, _ = select.select([channel], [], [], timeout)
        self._readable[worker] = bool(readable)
        return self._readable[worker]

    def receive(self, worker: int) -> ToParent:
        """The next message of ``worker``; raises WorkerDiedError if its actor died."""
        if not (self._buffered[worker] or self._readable[worker]):
            self.ready(worker, float("inf"))
        channel = self._channels[worker]
        message: ToParent
        if channel is None:
            message = unpack(self._buffered[worker].popleft())
            return message
        self._readable[worker] = False
        try:
            data = channel.recv_bytes()
        except (EOFError, OSError):
            raise self._socket_closed(worker) from None
        message = pickle.loads(data)
        return message

    def _socket_closed(self, worker: int) -> Exception:
        """The error for ``worker``'s socket closing: Ray's reason where the actor died."""
        ray = _ray()
        if not ray.is_initialized():
            return disconnected(None)
        try:
            ray.get(self._actors[worker].hello.remote(), timeout=_DEATH_WAIT_S)
        except actor_gone(ray) as error:
            return self._died(worker, error)
        except ray.exceptions.GetTimeoutError:
            why = f"its socket closed, and it did not answer for {_DEATH_WAIT_S:g} s"
            return self._died(worker, TimeoutError(why))
        except (ray.exceptions.RayError, ValueError) as error:
            return disconnected(error)
        return self._died(worker, ConnectionError("its socket to this process closed"))

    def _fetch(self, ray: Any, worker: int, timeout: float) -> bool:
        """Reads ``worker``'s oldest reply into its buffer if it lands within ``timeout`` s."""
        if not ray.is_initialized():
            raise disconnected(None)
        pending = self._pending_reply(worker)
        try:
            items = ray.get(pending, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            return False
        except actor_gone(ray) as error:
            raise self._died(worker, error) from None
        except (ray.exceptions.RayError, ValueError) as error:  # ValueError: Ray was shut down
            raise disconnected(error) from error
        # The next take() goes with the credit for this element (send), in one call.
        self._pending[worker].popleft()
        self._buffered[worker].extend(items)
        return True

    def _pending_reply(self, worker: int) -> Any:
        """``worker``'s oldest take() call, made now if the parent had nothing to send."""
        pending = self._pending[worker]
        if not pending:
            pending.append(self._actors[worker].take.remote(self._take_number(worker)))
        return pending[0]

    def _take_number(self, worker: int) -> int:
        number = self._takes[worker]
        self._takes[worker] = number + 1
        return number

    def _check_connected(self, ray: Any) -> None:
        """Raises ClusterConnectionError once the head of the cluster has been silent too long."""
        silent = self._health.lost(ray)
        if silent is not None:
            raise disconnected(None, f"the head of the cluster has not answered for {silent:.0f} s")

    def _died(self, worker: int, error: BaseException) -> WorkerDiedError:
        pid, node = self._where(worker)
        return worker_died(worker, self.count, pid, node, error)

    def close(self) -> None:
        """Kills this group's actors (and nothing else). Idempotent."""
        self._finalizer()
