"""One background producer thread: a bounded queue of items made ahead, taken in order.

The device iterators (:mod:`grainlite.device`), the Dataset API's thread prefetch
(:mod:`grainlite.dataset.experimental.thread_prefetch`) and the torch pinning thread
(:mod:`grainlite.torch.tensors`) each read their source ahead on one thread. :class:`Producer` is
that thread, written once.

The thread calls ``step()`` until it is told to stop. Each call returns ``(value, state)``: what
the consumer receives and the source's position after it. What the thread queues, in order, is
one of three items::

    Item(value, state)      what one step made
    Failed(error, state)    the step raised ``error``; ``state`` is ``error_state()`` (None
                            without one, or if it raises too)
    End(state)              the step raised ``StopIteration``; ``state`` is ``final_state()``

The thread ends after a ``Failed`` or an ``End``. The consumer takes the items with :meth:`get`:
an error arrives once, at its place in the stream; whether the stream goes on after it is the
consumer's choice (a device iterator or a thread prefetch starts a new producer on the same
source, the pinning thread ends there). Once a ``Failed`` or an ``End`` was taken, :meth:`get`
returns an ``End`` at once, as often as it is asked: the end is sticky.

:meth:`stop` sets the stop event, empties the queue (which wakes a thread waiting for room) and
joins the thread: it never hangs on a full queue, and returns with no thread left (a step in
progress finishes first; a source that has stop points of its own can end it sooner through
``around``). Called from the thread itself (a garbage collection that runs there can close the
consumer), it only asks the thread to end: a thread cannot wait for itself.

The thread holds the step, the queue and the stop event, never the :class:`Producer` nor its
consumer: a consumer dropped without ``stop()`` is collected, and the producer's finalizer asks
the thread to end.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

# How often a thread waiting for room in the queue, or a stop() waiting for the thread, looks
# again at the stop event (emptying the queue wakes the thread at once; this is the backstop).
POLL_S = 0.05


class Item(NamedTuple):
    """What one step made, and the source's state after it."""

    value: Any
    state: Any


class Failed(NamedTuple):
    """The step raised ``error``; ``state`` is the source's after it (None if unknown)."""

    error: BaseException
    state: Any


class End(NamedTuple):
    """The source is exhausted; ``state`` is its final position (None if unknown)."""

    state: Any


class _Shared:
    """What the thread and its owner share; the thread holds this, never the owner."""

    def __init__(self, depth: int) -> None:
        self.items: queue.Queue[Item | Failed | End] = queue.Queue(maxsize=max(1, depth))
        self.stop = threading.Event()
        self.on_exit: list[Callable[[], None]] = []

    def put(self, item: Item | Failed | End) -> bool:
        """Queues ``item``; False if stop was asked before there was room."""
        while not self.stop.is_set():
            try:
                self.items.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def drain(self) -> None:
        """Drops what is queued (and so wakes a thread waiting for room)."""
        while True:
            try:
                self.items.get_nowait()
            except queue.Empty:
                return

    def ask_stop(self) -> None:
        """Tells the thread to end without waiting for it (the finalizer's part)."""
        self.stop.set()
        self.drain()


class Producer:
    """Runs ``step`` on one daemon thread, keeping up to ``depth`` items queued.

    Args:
      step: called on the thread; returns ``(value, state)`` or raises ``StopIteration`` at the
        end. It owns the source while the thread runs: the consumer touches the source only after
        :meth:`stop` (or after taking a ``Failed`` or an ``End``, when the thread has ended).
      depth: how many items may wait in the queue (0 counts as 1).
      name: the thread's name, for debuggers and leak checks.
      final_state: called on the thread after ``StopIteration``, for the ``End``'s state.
      error_state: called on the thread after an error, for the ``Failed``'s state.
      around: a context the thread runs in, given the stop event (so that a source with stop
        points of its own can end a long step once stop is asked).
    """

    def __init__(
        self,
        step: Callable[[], tuple[Any, Any]],
        depth: int,
        name: str,
        *,
        final_state: Callable[[], Any] | None = None,
        error_state: Callable[[], Any] | None = None,
        around: Callable[[threading.Event], AbstractContextManager[Any]] | None = None,
    ) -> None:
        shared = self._shared = _Shared(depth)
        self._ended: End | None = None
        self._thread = threading.Thread(
            target=_run,
            args=(shared, step, final_state, error_state, around),
            name=name,
            daemon=True,
        )
        weakref.finalize(self, shared.ask_stop)
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        """The thread (alive until the step ends or fails, or :meth:`stop` runs)."""
        return self._thread

    def queued(self) -> int:
        """How many items wait in the queue now."""
        return self._shared.items.qsize()

    def get(self, timeout: float | None = None) -> Item | Failed | End:
        """The next item, waiting for the thread while the queue is empty.

        After a ``Failed`` or an ``End``, an ``End`` with the same state, at once.

        Raises:
          queue.Empty: ``timeout`` seconds passed with nothing queued.
        """
        if self._ended is not None:
            return self._ended
        item = self._shared.items.get(timeout=timeout)
        if not isinstance(item, Item):
            self._ended = End(item.state)
        return item

    def stop(self, then: Callable[[], None] | None = None) -> None:
        """Stops the thread and drops what it queued; returns once the thread has ended.

        ``then`` runs after the thread has left the source (to close it, say). Called from the
        thread itself, this only asks the thread to end, and the thread runs ``then`` as it
        leaves. Idempotent.
        """
        shared = self._shared
        shared.stop.set()
        if threading.current_thread() is self._thread:
            if then is not None:
                shared.on_exit.append(then)
            return
        while self._thread.is_alive():
            shared.drain()
            # The thread may be inside step() (a slow read): it ends after that returns.
            self._thread.join(POLL_S)
        shared.drain()
        if then is not None:
            then()


def value_of(item: Item | Failed | End) -> Any:
    """The consumer's side of the protocol: an ``Item``'s value; raises ``StopIteration`` for an
    ``End`` and the error of a ``Failed``."""
    if isinstance(item, End):
        raise StopIteration
    if isinstance(item, Failed):
        raise item.error
    return item.value


def _run(
    shared: _Shared,
    step: Callable[[], tuple[Any, Any]],
    final_state: Callable[[], Any] | None,
    error_state: Callable[[], Any] | None,
    around: Callable[[threading.Event], AbstractContextManager[Any]] | None,
) -> None:
    try:
        with contextlib.nullcontext() if around is None else around(shared.stop):
            _loop(shared, step, final_state, error_state)
    finally:
        for action in shared.on_exit:
            action()


def _loop(
    shared: _Shared,
    step: Callable[[], tuple[Any, Any]],
    final_state: Callable[[], Any] | None,
    error_state: Callable[[], Any] | None,
) -> None:
    stop = shared.stop
    while not stop.is_set():
        try:
            value, state = step()
        except StopIteration:
            try:
                last: Item | Failed | End = End(None if final_state is None else final_state())
            except BaseException as error:  # handed to the consumer, who raises it
                last = Failed(error, None)
            shared.put(last)
            return
        except BaseException as error:  # handed to the consumer, who raises it
            if stop.is_set():  # told to stop inside the step: nobody waits for this
                return
            shared.put(Failed(error, _state_or_none(error_state)))
            return
        if not shared.put(Item(value, state)):
            return


def _state_or_none(state: Callable[[], Any] | None) -> Any:
    """``state()``, or None if there is none or it cannot say."""
    if state is None:
        return None
    try:
        return state()
    except Exception:
        return None
