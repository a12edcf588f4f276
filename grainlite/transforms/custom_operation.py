"""Running a custom Grain ``Operation`` (records in, records out) one record at a time.

The loader pushes records through its stages one by one, while an ``Operation`` pulls them from an
iterator it is given. :class:`OperationRunner` joins the two: the operation runs in a helper
thread that strictly alternates with the loader's thread, so the loader hands over one record and
gets back whatever the operation yielded before asking for the next one. The rules the loader
applies to the outputs are in :mod:`grainlite.transforms.legacy`.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from grainlite.errors import GrainliteTypeError

_WANTS_INPUT = object()  # the operation asked for its next record
_END = object()  # no more records: the operation's input iterator ends


class _Finished:
    """The operation's iterator ended, normally (``error`` None) or by raising ``error``."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


def _run_operation(operation: Any, inbox: queue.SimpleQueue, outbox: queue.SimpleQueue) -> None:
    def inputs() -> Iterator[Any]:
        while True:
            outbox.put(_WANTS_INPUT)
            record = inbox.get()
            if record is _END:
                return
            yield record

    try:
        for output in operation(inputs()):
            outbox.put(output)
    except BaseException as error:  # reported in the stream by the loader's thread
        outbox.put(_Finished(error))
        return
    outbox.put(_Finished(None))


class OperationRunner:
    """Runs a custom Operation (``op(iterator of Records) -> iterator of Records``) one record at
    a time, for the loader's push stages.

    The operation's iterator runs in a helper thread, strictly alternating with the caller: the
    caller hands one record over and waits until the operation asks for the next one (or ends),
    collecting what it yielded meanwhile; the two never run at the same time. If the runner is
    dropped mid-stream (an iterator abandoned early), its finalizer ends the operation's input,
    so the thread finishes instead of waiting forever.
    """

    def __init__(self, operation: Any) -> None:
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.finished = False
        thread = threading.Thread(
            target=_run_operation,
            args=(operation, self._inbox, self._outbox),
            name=f"grainlite-operation-{type(operation).__name__}",
            daemon=True,  # a thread blocked in a user's operation cannot hold the process open
        )
        thread.start()
        weakref.finalize(self, self._inbox.put, _END)
        self.pending, self.error = self._collect()  # what it yields before taking any input

    def _collect(self) -> tuple[list[Any], BaseException | None]:
        outputs: list[Any] = []
        while True:
            item = self._outbox.get()
            if item is _WANTS_INPUT:
                return outputs, None
            if item.__class__ is _Finished:
                self.finished = True
                return outputs, item.error
            outputs.append(item)

    def feed(self, record: Any) -> tuple[list[Any], BaseException | None]:
        """Gives the operation ``record``; returns what it yielded and the error it raised, if
        any, before asking for the next one. After it finished, records are dropped."""
        if self.finished:
            return [], None
        self._inbox.put(record)
        return self._collect()

    def finish(self) -> tuple[list[Any], BaseException | None]:
        """Ends the operation's input; returns what it yielded until it finished."""
        if self.finished:
            return [], None
        self._inbox.put(_END)
        return self._collect()


def custom_output(output: Any, operation: Any) -> tuple[Any, Any]:
    """``(data, rng)`` of a record a custom operation yielded; a clear error for anything else."""
    try:
        return output.data, output.metadata.rng
    except AttributeError:
        raise GrainliteTypeError(
            f"A custom Operation must yield Records, but {type(operation).__qualname__} yielded "
            f"{output!r} of type {type(output).__name__}; yield grainlite.Record(metadata, data), "
            f"e.g. dataclasses.replace(record, data=new_data)."
        ) from None
