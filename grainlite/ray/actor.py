"""The worker side of :class:`grainlite.ray.RayWorkers`: grainlite's worker loop in a Ray actor.

A :class:`WorkerActor` runs :class:`grainlite.engine.child.Worker` in a thread, speaking the same
protocol as a local worker process. On the training process's host it speaks it over a socket
to the training process (:mod:`grainlite.ray.direct`), as a local worker does, with no Ray call
per element. Elsewhere (or where it cannot connect) it has two queues instead: ``post(seq,
data)`` puts the parent's messages in (in the parent's order, whatever order Ray runs the calls
in) and ``take()`` returns the messages the worker has sent since the last call (waiting for
one).

How an element's arrays travel depends on where the actor runs:

- **On the training process's host** (its shared-memory key, :func:`grainlite.shm.memory_key`,
  is the one the parent sent; ``RayWorkers(shared_memory=True)``, the default): as a local
  worker's, written once into the worker's shared-memory slabs, named with the parent's pid
  (which owns their lifetime) and mapped by the parent; the reply carries the small pickle that
  describes them. No copy into Ray's object store (measured here on ``images``: about 4 ms of the
  actors' CPU and 1.4 ms of Ray's own per batch of 128). If the training process dies, Ray ends
  the actor at once (by SIGKILL): a small process of its own (:mod:`grainlite.ray.janitor`)
  then removes the slabs the training process had not mapped yet.
- **Elsewhere**: as the pickle with the arrays' bytes out of band
  (:func:`~grainlite.engine.transport.dumps_out_of_band`): as uint8 arrays, which Ray puts in its
  object store without pickling them and the parent maps without a copy on the same node; or,
  when they hold at most ``INLINE_BYTES`` in all, as ``bytes`` inside the reply (Ray inlines
  small replies anyway, and serializes ``bytes`` at less CPU than arrays: the actors' CPU per
  batch of 16 small records fell by about a fifth).

The actor is ended by the parent (``ray.kill``); the worker loop never ends the process.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import queue
import subprocess
import sys
import threading
from typing import Any, NoReturn

import numpy as np

from grainlite import shm
from grainlite.engine.child import Worker
from grainlite.engine.protocol import Element, Init
from grainlite.engine.transport import dumps_out_of_band
from grainlite.ray import direct, janitor
from grainlite.tree import map_leaves_keeping_order

# An element whose arrays hold at most this many bytes travels inside the reply as bytes (Ray
# inlines replies below 100 KiB anyway); larger ones as uint8 arrays that Ray puts in its object
# store without pickling them.
INLINE_BYTES = 64 * 1024
_TAKE_AT_MOST = 64  # messages per take(): a worker far ahead sends its read-ahead in one reply
TAKES_IN_FLIGHT = 2  # the parent's take() calls waiting on one actor: replies overlap round trips


class HeapPool:
    """The arrays of an element in this process's memory (Ray copies them to its object store).

    Has the :class:`~grainlite.engine.transport.SlabPool` methods the worker loop uses. A
    shareable array that is not C-contiguous is copied to C order, as a slab copy makes it, so
    the parent gets the same arrays as from a local worker and every array's bytes go out of band.
    """

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def export(self, element: Any) -> Any:
        def contiguous(leaf: Any) -> Any:
            if (
                type(leaf) is np.ndarray
                and leaf.size > 0
                and not leaf.dtype.hasobject
                and not leaf.flags.c_contiguous
            ):
                return np.ascontiguousarray(leaf)
            return leaf

        return map_leaves_keeping_order(contiguous, element)

    def finish_element(self) -> tuple[list[int], list[tuple[int, str]]]:
        return [], []

    def release(self, slabs: list[int]) -> None:
        pass

    def close(self) -> None:
        pass


class _Queues:
    """The worker loop's channel: the parent's messages in, the worker's out."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def recv_bytes(self) -> bytes:
        return self.inbox.get()

    def send_bytes(self, data: Any) -> None:
        self.outbox.put(data)

    def poll(self) -> bool:
        return not self.inbox.empty()


def pack_for_object_store(message: Element) -> Any:
    """An element as its pickle and its arrays' bytes out of band, for Ray's object store (an
    actor that does not share the training process's memory)."""
    data, buffers = dumps_out_of_band(message)
    raws = [buffer.raw() for buffer in buffers]
    if sum(raw.nbytes for raw in raws) <= INLINE_BYTES:  # Ray copies these into its reply
        return data, [bytes(raw) for raw in raws]  # bytes: cheaper for Ray than arrays
    return data, [np.frombuffer(raw, np.uint8) for raw in raws]


class RayWorker(Worker):
    """The worker loop in an actor: elements in shared-memory slabs where ``shared`` (the actor
    shares the training process's memory), else packed for Ray's object store."""

    def __init__(self, conn: Any, shared: bool = False) -> None:
        super().__init__(conn)
        self.shared = shared

    def make_pool(self, init: Init) -> Any:
        if self.shared:
            return super().make_pool(init)
        return HeapPool()

    def pack(self, message: Element) -> Any:
        if self.shared:
            return super().pack(message)
        return pack_for_object_store(message)

    def exit(self, code: int) -> NoReturn:
        # Only a Stop gets here (the queues never close): wait for the parent's ray.kill.
        threading.Event().wait()
        raise AssertionError("unreachable")


def _start_janitor(owner: int, tag: str) -> None:
    """Starts :mod:`grainlite.ray.janitor` for this actor's slabs (``tag``, named with the
    training process's pid ``owner``); it leaves this process's tree at once (Ray ends a
    worker's children with it). In a thread: the worker starts meanwhile."""
    command = [
        sys.executable, "-I", "-S", janitor.__file__, str(owner), str(os.getpid()),
        shm.owned_prefix(owner, tag),
    ]  # fmt: skip

    def start() -> None:
        subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=False)

    threading.Thread(target=start, name="grainlite-janitor-start", daemon=True).start()


def _serve_channel(channel: Any) -> None:
    """Runs the worker loop over the socket to the training process (its first message is the
    Init); the worker writes its elements into shared-memory slabs."""
    try:
        init = pickle.loads(channel.recv_bytes())
    except (EOFError, OSError):
        return  # the group closed before it sent the work
    if not isinstance(init, Init):
        return  # stopped before it had work
    _start_janitor(init.owner_pid, init.tag)
    RayWorker(channel, shared=True).serve(init)


def unpack(item: Any) -> Any:
    """The parent's side of :meth:`RayWorker.pack` (and of the plain pickled messages)."""
    if type(item) is tuple:
        data, buffers = item
        return pickle.loads(data, buffers=buffers)
    return pickle.loads(item)


class WorkerActor:
    """One worker as a Ray actor (made remote by :mod:`grainlite.ray.group`)."""

    def __init__(
        self, memory_key: str | None = None, address: direct.Address | None = None
    ) -> None:
        # The training process's shared-memory key (None: it asked for the object store).
        self._shared = memory_key is not None and memory_key == shm.memory_key()
        # On its host, the actor speaks to the training process over a socket of its own
        # (grainlite.ray.direct), where it can connect; else through Ray calls (post, take).
        self._channel = direct.connect(address) if self._shared and address else None
        if self._channel is not None:
            threading.Thread(
                target=_serve_channel, args=(self._channel,), name="grainlite-worker", daemon=True
            ).start()
        self._queues = _Queues()
        self._lock = threading.Lock()
        self._next = 0
        self._early: dict[int, bytes] = {}
        self._thread: threading.Thread | None = None
        self._turn = threading.Condition()
        self._next_take = 0

    def transport(self) -> str:
        """How this actor's elements reach the training process: ``"shared memory"`` or
        ``"object store"``."""
        return "shared memory" if self._shared else "object store"

    def messages_travel(self) -> str:
        """How the protocol's messages travel: ``"socket"`` (grainlite's own, on the training
        process's host) or ``"ray calls"``."""
        return "socket" if self._channel is not None else "ray calls"

    def hello(self) -> tuple[int, str, bool]:
        """This actor's process id and node address (for messages about it), and whether it
        connected to the training process's socket (then every message goes there)."""
        import ray

        return os.getpid(), ray.util.get_node_ip_address(), self._channel is not None

    def post(self, seq: int, data: bytes) -> None:
        """Delivers the parent's message number ``seq``; messages reach the worker in order."""
        with self._lock:
            self._early[seq] = data
            while self._next in self._early:
                message = self._early.pop(self._next)
                self._next += 1
                if self._thread is None:
                    init = pickle.loads(message)
                    if not isinstance(init, Init):
                        continue  # stopped before it had work
                    worker = RayWorker(self._queues, self._shared)
                    self._thread = threading.Thread(
                        target=worker.serve, args=(init,), name="grainlite-worker", daemon=True
                    )
                    self._thread.start()
                    if self._shared:
                        _start_janitor(init.owner_pid, init.tag)
                else:
                    self._queues.inbox.put(message)

    def take(self, number: int, seq: int | None = None, data: bytes | None = None) -> list[Any]:
        """The worker's next messages: waits for one, then adds those already waiting.

        ``number`` counts the parent's take() calls from 0: with several in flight, call ``n``
        takes its messages only after call ``n - 1`` took its own, so the replies keep the
        worker's order. With ``seq`` and ``data``, first delivers that parent message (as
        :meth:`post`): the parent sends an element's credit and asks for a reply in one call.
        """
        if seq is not None and data is not None:
            self.post(seq, data)
        with self._turn:
            self._turn.wait_for(lambda: self._next_take == number)
        outbox = self._queues.outbox
        try:
            items = [outbox.get()]
            while len(items) < _TAKE_AT_MOST:
                try:
                    items.append(outbox.get_nowait())
                except queue.Empty:
                    break
        finally:
            with self._turn:
                self._next_take = number + 1
                self._turn.notify_all()
        return items

    def quit(self) -> None:
        """Ends this actor's process at once (when the head is gone, ray.kill cannot)."""
        os._exit(0)

    def dump_stacks(self) -> None:
        """Prints every thread's Python stack to this actor's standard error (Ray's log)."""
        faulthandler.dump_traceback(sys.stderr, all_threads=True)
