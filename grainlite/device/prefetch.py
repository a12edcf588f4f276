"""The read-ahead thread behind the device iterators: a bounded queue of placed batches.

One :class:`Prefetcher` owns one background thread and one queue. The thread repeats: take the
next host element from the source iterator, read the source's ``get_state()`` (the position
*after* that element), run ``place`` (the host-to-device copy and the device transforms, which JAX
dispatches asynchronously) and put ``(element, state)`` in the queue. The consumer takes items in
order, so the state that comes with the item it hands to the user is exactly the position after
the last batch the user received, however many batches wait in the queue.

The protocol, thread to consumer, is three kinds of item::

    Item(value, state)       a placed element and the source's position after it
    Failed(error, state)     the source (or ``place``) raised; the thread ends after sending it
    End(state)               the source is exhausted; the thread ends after sending it

:meth:`Prefetcher.stop` sets the stop event, empties the queue (the thread may be blocked putting
into it) and joins the thread; it returns with no thread left. The thread only ever touches the
source; the consumer touches it only while no thread runs.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

# How often a thread blocked on a full queue looks at the stop event.
_POLL_S = 0.05


class Item(NamedTuple):
    """A placed element and the source's state after it."""

    value: Any
    state: Any


class Failed(NamedTuple):
    """The source or the placement raised ``error``; ``state`` is the source's after it."""

    error: BaseException
    state: Any


class End(NamedTuple):
    """The source is exhausted; ``state`` is its final position."""

    state: Any


class Prefetcher:
    """Reads ``source`` ahead on one thread, keeping up to ``depth`` placed elements queued.

    Args:
      source: an iterator with ``get_state()``; owned by the thread while it runs.
      place: called on each host element in the thread, with the element's index in the stream
        (counted from ``first_index``); returns what the consumer receives.
      depth: the queue's size (at least 1).
      first_index: the index of the next element the source yields.
      name: the thread's name, for debuggers and leak checks.
    """

    def __init__(
        self,
        source: Any,
        place: Callable[[Any, int], Any],
        depth: int,
        first_index: int,
        name: str,
    ) -> None:
        self._source = source
        self._place = place
        self._queue: queue.Queue[Item | Failed | End] = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._close_source_on_exit = False
        self._thread = threading.Thread(
            target=self._run, args=(first_index,), name=name, daemon=True
        )
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        """The read-ahead thread (alive until the source ends, fails or :meth:`stop` runs)."""
        return self._thread

    def _put(self, item: Item | Failed | End) -> bool:
        """Queues ``item``; False if stop was asked while waiting for room."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, index: int) -> None:
        try:
            self._loop(index)
        finally:
            if self._close_source_on_exit:
                close_if_closable(self._source)

    def _loop(self, index: int) -> None:
        source, place = self._source, self._place
        while not self._stop.is_set():
            try:
                element = next(source)
            except StopIteration:
                self._put(End(source.get_state()))
                return
            except BaseException as error:  # handed to the consumer, who raises it
                self._put(Failed(error, _state_or_none(source)))
                return
            state = source.get_state()
            try:
                value = place(element, index)
            except BaseException as error:
                self._put(Failed(error, state))
                return
            index += 1
            if not self._put(Item(value, state)):
                return

    def get(self) -> Item | Failed | End:
        """The next item, waiting for the thread when the queue is empty."""
        return self._queue.get()

    def stop(self, close_source: bool = False) -> None:
        """Stops the thread and drops what it queued; returns once the thread has ended.

        With ``close_source``, the source is closed too, after the thread has left it. Called
        from the thread itself (a garbage collection that runs there can close the iterator), it
        only asks the thread to end, and the thread closes the source as it leaves: a thread
        cannot wait for itself.
        """
        self._stop.set()
        if threading.current_thread() is self._thread:
            self._close_source_on_exit = close_source
            return
        while self._thread.is_alive():
            self._drain()
            # The thread may be inside next(source) (a slow read): it ends after that returns.
            self._thread.join(_POLL_S)
        self._drain()
        if close_source:
            close_if_closable(self._source)

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return


def value_of(item: Item | Failed | End) -> Any:
    """The consumer's side of the protocol: an ``Item``'s value; raises ``StopIteration`` for an
    ``End`` and the error of a ``Failed``. (After either, the thread has ended: the consumer stops
    its :class:`Prefetcher` and keeps the item's state first.)"""
    if isinstance(item, End):
        raise StopIteration
    if isinstance(item, Failed):
        raise item.error
    return item.value


def close_if_closable(source: Any) -> None:
    """Calls ``source.close()`` if the source has one (a plain iterator may not)."""
    close = getattr(source, "close", None)
    if callable(close):
        close()


def _state_or_none(source: Any) -> Any:
    """The source's state after a failure, or None if it cannot say."""
    try:
        return source.get_state()
    except Exception:
        return None
