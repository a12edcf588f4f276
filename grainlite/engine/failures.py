"""A failed element: an exception that travels down the pipeline in the place of the element.

A transform that raises for one record does not end the stream. Its exception is wrapped in a
:class:`FailedElement`, which every later stage passes on untouched, so it reaches the iterator at
exactly the place the element would have had; the iterator raises it there, and the next ``next()``
goes on with the following elements. The same holds in worker processes, where the exception
crosses to the parent first.

Tracebacks keep the user's frames and drop grainlite's own, which only say "the loader called your
transform". ``grain.config.update("py_traceback_filtering", "off")`` (or the environment variable
``GRAINLITE_TRACEBACK_FILTERING=0``) keeps every frame.
"""

from __future__ import annotations

import itertools
import os
from types import TracebackType
from typing import Any

from grainlite import config
from grainlite.errors import GrainliteRuntimeError

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class FailedElement:
    """The exception raised while making one element, in that element's place in the stream."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def fail(error: BaseException, what: str) -> FailedElement:
    """Wraps ``error`` for the stream, with a note saying which part of the pipeline raised it."""
    error.add_note(f"grainlite: raised by {what}.")
    return FailedElement(error)


def stopped_error(cause: BaseException, iterator: str, restart: str) -> GrainliteRuntimeError:
    """What ``next()`` raises after an error the stream could not go on after (a dead worker, a
    failed start, Ctrl-C), until ``set_state`` moves the iterator: it names the cause.

    Args:
      cause: the error that stopped the stream (also the result's ``__cause__``).
      iterator: the iterator, as the message's subject ("This iterator").
      restart: the call that starts a new iterator ("iter(loader)").
    """
    error = GrainliteRuntimeError(
        f"{iterator} stopped at an earlier error ({type(cause).__name__}: {cause}) and cannot "
        f"go on by itself. Call set_state(iterator.get_state()) to go on after the last element "
        f"it delivered, or {restart} to start over."
    )
    error.__cause__ = cause
    return error


def describe_operation(position: int, op: Any) -> str:
    """``operations[2] (Decode)``: how errors name a transform (never by its memory address)."""
    return f"the transform operations[{position}] ({type(op).__qualname__})"


def _is_internal(tb: TracebackType) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR)


def hide_internal_frames(error: BaseException) -> BaseException:
    """Removes grainlite's own frames from ``error``'s traceback (and its causes'); returns it.

    Frames of user code (transforms, sources, samplers) and of other libraries stay.
    """
    if config.get_or_default("py_traceback_filtering") == "off":
        return error
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kept: list[TracebackType] = []
        tb = current.__traceback__
        while tb is not None:
            if not _is_internal(tb):
                kept.append(tb)
            tb = tb.tb_next
        for first, second in itertools.pairwise(kept):
            first.tb_next = second
        if kept:
            kept[-1].tb_next = None
        current.__traceback__ = kept[0] if kept else None
        current = current.__cause__ or current.__context__
    return error
