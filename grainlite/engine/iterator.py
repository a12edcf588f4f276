"""The parent's iterator over a stream: the shell ``DataLoaderIterator`` and ``mp_prefetch``'s
iterator share.

Both drive one stream object (:class:`~grainlite.engine.parent.WorkerStream` for worker
processes, :class:`~grainlite.engine.in_process.InProcessStream` for the DataLoader's
``worker_count=0``) the same way, and :class:`IteratorShell` is that way written once:

- the stream starts at the first ``next()`` (or earlier, at ``start_prefetch()``) from
  ``_position``, and ``_position`` takes the stream's position whenever the stream goes;
- an element that failed in the pipeline (a :class:`~grainlite.engine.failures.FailedElement`)
  is raised at its place and the stream goes on after it;
- any other error from the stream (a dead worker, a failed start, Ctrl-C) stops it: the stream is
  released and every later ``next()`` raises :func:`~grainlite.engine.failures.stopped_error`
  naming the cause, until a move to a saved position (:meth:`IteratorShell._move_to`);
- a lost Ray actor (a WorkerDiedError its group marked ``lost_worker``) is replaced when the
  backend allows it (``RayWorkers(restart_lost_workers=N)``): the stream is released at its
  position after the last element returned, and a new one starts there, at most N times between
  two moves to a position (:meth:`IteratorShell._replaced_lost_worker`);
- ``close()`` releases the stream; ``next()`` then raises the subclass's closed error, until a
  move to a saved position reopens the iterator.

What differs between the two iterators is left to hooks a subclass overrides, each named for the
moment it runs at: :meth:`~IteratorShell._before_start`, :meth:`~IteratorShell._at_end`,
:meth:`~IteratorShell._after_error` and :meth:`~IteratorShell._ended`.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Protocol, Self

from grainlite.engine.failures import FailedElement, hide_internal_frames, stopped_error
from grainlite.engine.position import IteratorPosition
from grainlite.errors import WorkerDiedError
from grainlite.stats import tracing

LOGGER = logging.getLogger("grainlite")


class Stream(Protocol):
    """What the shell asks of a stream (``WorkerStream`` and ``InProcessStream`` provide it)."""

    @property
    def alive(self) -> bool:
        """True while :meth:`restart` can move the running stream."""
        ...

    def start(self) -> None:
        """Starts the work behind the stream now (closes the stream if it raises)."""
        ...

    def next(self) -> Any:
        """The next element or FailedElement; StopIteration at the end."""
        ...

    def restart(self, position: IteratorPosition) -> bool:
        """Moves the running stream to ``position``; False if it cannot (it is then closed or
        to be closed, and a new stream starts there)."""
        ...

    def position(self) -> IteratorPosition:
        """Where the stream stands after its last element."""
        ...

    def close(self) -> None:
        """Stops the work behind the stream and releases its resources; idempotent."""
        ...


class IteratorShell:
    """Drives a stream: ``next()``, the errors that stop it, moves to a position, ``close()``.

    A subclass calls :meth:`_init_shell` from its ``__init__``, makes streams in :meth:`_start`,
    names itself for the stopped error (``_stopped_name``, ``_restart_hint``) and says what
    ``next()`` raises after ``close()`` (:meth:`_closed_error`).

    The attributes, shared with the subclass: ``_position`` (where the next stream starts),
    ``_stream`` (None until one starts; None again after ``close()`` or an error),
    ``_stopped_by`` (the error that stopped the stream) and ``_closed``. Whenever ``_stopped_by``
    or ``_closed`` is set the stream is released, so a live stream always belongs to an iterator
    that is open and not stopped.
    """

    # For stopped_error: the iterator as the message's subject ("This iterator"), and the call
    # that starts anew ("iter(loader)"). Each subclass sets both.
    _stopped_name: ClassVar[str]
    _restart_hint: ClassVar[str]

    _position: IteratorPosition
    _stream: Any
    _stopped_by: BaseException | None
    _closed: bool

    def _init_shell(self, position: IteratorPosition) -> None:
        self._position = position
        self._stream = None
        self._stopped_by = None  # an error the stream cannot go on after
        self._closed = False
        # Why the workers could not start at iter() (a pipeline that cannot be pickled): kept
        # for the first next(), where Grain raises it.
        self._start_error: Exception | None = None
        self._lost_worker_restarts = 0  # since the last move to a position

    # What a subclass provides -----------------------------------------------------------------
    def _start(self) -> Stream:
        """A new stream at ``_position`` (not started: ``next()`` or ``start()`` starts it)."""
        raise NotImplementedError

    def _closed_error(self) -> BaseException:
        """What ``next()`` raises after ``close()``."""
        raise NotImplementedError

    # Hooks, each a no-op or the common case by default ----------------------------------------
    def _before_start(self) -> None:
        """Runs at a ``next()`` that finds no stream, just before :meth:`_start`; may raise
        (``StopIteration`` when nothing is left to read, an error kept from ``iter()``)."""

    def _at_end(self) -> None:
        """Runs when the stream raises ``StopIteration``, before it reaches the caller."""

    def _after_error(self) -> None:
        """Runs when the stream raised an error it cannot go on after (``_stopped_by`` is set):
        releases the stream."""
        self._release()

    def _ended(self) -> None:
        """Runs first in :meth:`close` (stops counters and profilers)."""

    def _worker_backend(self) -> Any:
        """The worker backend (a RayWorkers) or None; it says how many lost workers to replace."""
        return None

    # The shell --------------------------------------------------------------------------------
    def __next__(self) -> Any:
        if tracing.active():  # a jax.profiler trace records: this next() is a span
            element = tracing.traced_next(
                self._take, lambda: getattr(self._stream, "counters", None)
            )
        else:
            element = self._take()
        if element.__class__ is FailedElement:  # raised in the pipeline: the stream goes on
            raise hide_internal_frames(element.error)
        return element

    def _take(self) -> Any:
        """The next element or FailedElement, starting the stream if there is none."""
        stream = self._stream
        if stream is None:
            if self._stopped_by is not None:
                raise stopped_error(self._stopped_by, self._stopped_name, self._restart_hint)
            if self._closed:
                raise self._closed_error()
            if self._start_error is not None:
                error, self._start_error = self._start_error, None
                raise error
            self._before_start()
            tracing.arm_timeline()  # the timeline_seconds option, read once per stream
            stream = self._stream = self._start()
        try:
            element = stream.next()
        except StopIteration:
            self._at_end()
            raise
        except BaseException as error:
            stop = self._replaced_lost_worker(error)
            if stop is None:  # new workers at the element after the last one returned
                return self._take()
            # A dead worker, a failed read or start, Ctrl-C: the stream cannot go on. It never
            # ends silently: every later next() says why, until a move to a position.
            self._stopped_by = stop
            self._after_error()
            if stop is error:
                raise
            raise stop from error
        return element

    def _replaced_lost_worker(self, error: BaseException) -> BaseException | None:
        """None if ``error`` was a lost Ray actor and the stream was released to start anew at
        its position (the element after the last one returned: elements received but not
        returned are made again by the new workers); else the error that stops the stream.

        Only a :class:`WorkerDiedError` whose group marked it ``lost_worker`` counts, and only
        while the backend's ``restart_lost_workers`` is not spent; once spent, the error says so.
        """
        lost = getattr(error, "lost_worker", None)
        allowed = getattr(self._worker_backend(), "restart_lost_workers", 0)
        if lost is None or not allowed or not isinstance(error, WorkerDiedError):
            return error
        if self._lost_worker_restarts >= allowed:
            return WorkerDiedError(
                f"{error} The restart budget is spent: this iterator already replaced its lost "
                f"workers {self._lost_worker_restarts} time(s) of restart_lost_workers={allowed} "
                f"(counted since it was made or last moved with set_state); raise "
                f"RayWorkers(restart_lost_workers=...) to allow more."
            )
        self._lost_worker_restarts += 1
        LOGGER.warning(
            "%s Starting new workers after the last element returned (restart %d of "
            "restart_lost_workers=%d).",
            lost,
            self._lost_worker_restarts,
            allowed,
        )
        self._release()  # the stream's position: after the last element returned
        return None

    def start_prefetch(self) -> None:
        """Starts the workers before the first ``next()``; each subclass says when it may."""
        raise NotImplementedError

    def _start_early(self) -> None:
        """``start_prefetch()`` for ``iter()``: an error is kept for the first ``next()``."""
        tracing.arm_timeline()  # the timeline_seconds option, read once per stream
        try:
            self.start_prefetch()
        except Exception as error:
            self._start_error = error

    def _move_to(self, position: IteratorPosition) -> None:
        """Moves to ``position``: the next element is the one after it.

        A running stream moves its workers there when it can (no new processes); otherwise it
        is closed and the next ``next()`` starts a new one at ``position``. A stop or a close
        is forgotten: the iterator goes on from ``position``. (The flags are cleared first; the
        order does not matter, since a live stream never coexists with a stop or a close.)
        """
        self._position = position
        self._stopped_by = None
        self._closed = False
        self._lost_worker_restarts = 0
        stream = self._stream
        if stream is not None:
            if stream.alive and stream.restart(position):
                return  # the running workers moved: no new processes
            stream.close()
            self._stream = None

    def _release(self) -> None:
        """Closes the stream, if any, keeping its position for the next one."""
        stream = self._stream
        if stream is not None:
            self._position = stream.position()
            stream.close()
            self._stream = None

    def close(self) -> None:
        """Stops all background work now and releases its resources. Safe to call twice."""
        self._start_error = None
        self._ended()
        self._release()
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
