"""Error translation: a worker's exception, re-raised in the parent as the user would expect.

In the worker, :func:`report` packs the exception (cloudpickled, so its type and attributes survive)
with its traceback text, grainlite's own frames left out. In the parent, :func:`rebuild` restores
the exception with its original type and message, and a note names the worker. The worker's
frames become real entries of the exception's own traceback (after the parent's frames), so the
printed traceback, ``traceback.extract_tb`` and debuggers see the user's functions that raised,
as in Grain. Where no frame can be rebuilt, or the worker's exception had a cause or context
(which pickling drops), the worker's traceback text is the exception's ``__cause__`` (printed
above it); with ``py_traceback_filtering="remove_frames"`` the
cause carries the worker's frames as well, as Grain's does. The exception's own notes (for
example which transform raised it) stay on it and are printed once, below it.
"""

from __future__ import annotations

import pickle
import signal
import traceback
from types import TracebackType
from typing import Any

from grainlite import config
from grainlite.engine.failures import hide_internal_frames
from grainlite.engine.protocol import ErrorReport
from grainlite.errors import GrainliteRuntimeError, WorkerDiedError

_MAX_FRAMES = 100  # the innermost frames a rebuilt traceback keeps


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process, as text."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def report(error: BaseException, generation: int, state: Any) -> ErrorReport:
    """Packs ``error`` raised in a worker (``state``: where the stream goes on, None: it cannot)."""
    hide_internal_frames(error)
    summary = traceback.TracebackException.from_exception(error)
    summary.__notes__ = None  # the notes travel on the exception itself, printed once there
    text = "".join(summary.format()).rstrip("\n")
    payload: bytes | None
    import cloudpickle  # here, not at import: a worker's start-up does without it

    try:
        payload = cloudpickle.dumps(error)
        pickle.loads(payload)  # an exception that cannot be rebuilt travels as text only
    except Exception:
        payload = None
    frames = tuple(
        (frame.filename, frame.lineno, frame.name)
        for frame in traceback.extract_tb(error.__traceback__)[-_MAX_FRAMES:]
        if frame.lineno is not None and frame.lineno > 0
    )
    return ErrorReport(generation, state, payload, _type_name(error), str(error), text, frames)


def _chained(text: str) -> bool:
    """True when a worker's traceback text shows more than one exception (a cause or context),
    which only the text carries across (pickling drops them)."""
    return (
        "\nThe above exception was the direct cause of the following exception:\n" in text
        or "\nDuring handling of the above exception, another exception occurred:\n" in text
    )


class _Unwind(Exception):
    """Raised by a stand-in frame so that its frame object can be taken from the traceback."""


def _stand_in_traceback(frames: tuple[tuple[str, int, str], ...]) -> TracebackType | None:
    """Real traceback entries for a worker's ``frames``: each is a frame of a tiny code object
    with that file name, line and function name, so ``traceback.extract_tb`` and the printed
    traceback show the worker's own functions (with their source lines, read from the files)."""
    tb: TracebackType | None = None
    for filename, lineno, name in reversed(frames):
        # Two lines from column 0: a printed traceback then marks no columns with ^^^ (this
        # code's columns are not those of the worker's line).
        code = compile("\n" * (lineno - 1) + "raise _Unwind(\n)", filename, "exec")
        code = code.replace(co_name=name, co_qualname=name)
        try:
            exec(code, {"_Unwind": _Unwind, "__name__": "grainlite_worker_frame"})
        except _Unwind as unwound:
            entry = unwound.__traceback__
            assert entry is not None and entry.tb_next is not None
            frame = entry.tb_next.tb_frame
            tb = TracebackType(tb, frame, entry.tb_next.tb_lasti, lineno)
    return tb


def _type_name(error: BaseException) -> str:
    kind = type(error)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def rebuild(message: ErrorReport, worker: int, pid: int) -> BaseException:
    """The exception of ``message`` with its original type, ready to raise in the parent."""
    error: Any = None
    if message.error is not None:
        try:
            error = pickle.loads(message.error)
        except Exception:
            error = None
    if not isinstance(error, BaseException):
        error = GrainliteRuntimeError(
            f"{message.type_name}: {message.message} (the exception could not be pickled, so "
            f"it arrives as this GrainliteRuntimeError, with its traceback)"
        )
    cause: BaseException | None = RemoteTraceback(message.traceback)
    frames = _stand_in_traceback(tuple(message.frames))
    if frames is not None:
        # The worker's frames are the exception's own (raising it adds the parent's before
        # them), so the text would print them twice: no cause, unless remove_frames asks for
        # the full worker traceback on the cause as well.
        error = error.with_traceback(frames)
        if config.get_or_default("py_traceback_filtering") == "remove_frames":
            assert cause is not None
            cause.__traceback__ = _stand_in_traceback(tuple(message.frames))
        elif not _chained(message.traceback):  # a chain's earlier exceptions live in the text
            cause = None
    error.__cause__ = cause
    error.add_note(f"grainlite: raised in worker process {worker} (pid {pid}); traceback above.")
    return error


def worker_died(worker: int, pid: int, code: int | None) -> WorkerDiedError:
    """The error for a worker that ended without reporting, naming it and how it ended."""
    if code is None:
        how = "an unknown exit code (it did not exit within the time allowed)"
    elif code < 0:
        how = f"exit code {code} (killed by {signal.Signals(-code).name})"
    elif code == 0:
        return WorkerDiedError(
            f"Worker process {worker} (pid {pid}) ended with exit code 0 without reporting "
            f"anything: code in the pipeline ended the process (os._exit(0), or a library that "
            f"exits). Make it raise an exception instead; search the output above for its output."
        )
    else:
        how = f"exit code {code}"
    return WorkerDiedError(
        f"Worker process {worker} (pid {pid}) was terminated unexpectedly with {how}. Search "
        f"the output above for the cause; a kill by SIGKILL is often the out-of-memory killer: "
        f"lower worker_count, worker_buffer_size or the batch size."
    )


def exit_in_pipeline_error(error: BaseException, worker: int) -> GrainliteRuntimeError:
    """The error for a pipeline that tried to end its worker process (``sys.exit()``, ...).

    A worker cannot exit on its own: the parent would only see a process gone with no reason.
    The exception is reported instead, with the worker's traceback, and the stream ends. For
    ``sys.exit(code)`` the message opens with Grain's words for a worker that exited ("Worker
    process was terminated unexpectedly with exit code N"), which code written for Grain matches.
    """
    raised = f"{type(error).__name__}({', '.join(map(repr, error.args))})"
    opening = ""
    if isinstance(error, SystemExit):
        code = error.code
        status = 0 if code is None else code if isinstance(code, int) else 1
        opening = f"Worker process was terminated unexpectedly with exit code {status}. "
    failure = GrainliteRuntimeError(
        f"{opening}The pipeline raised {raised} in worker {worker}: code in a transform or a "
        f"data source called sys.exit() or raised a BaseException, which would end the worker "
        f"process (grainlite reports it here and ends the stream). Raise an ordinary exception "
        f"there instead (the traceback of the call is attached)."
    )
    failure.__cause__ = error
    return failure
