"""Error translation: a worker's exception, re-raised in the parent as the user would expect.

In the worker, :func:`report` packs the exception (cloudpickled, so its type and attributes survive)
with its traceback text, grainlite's own frames left out. In the parent, :func:`rebuild` restores
the exception with its original type and message; the worker's traceback becomes its
``__cause__`` (printed once, above it) and a note names the worker. The exception's own notes (for
example which transform raised it) stay on it and are printed once, below it.
"""

from __future__ import annotations

import pickle
import signal
import traceback
from typing import Any

from grainlite.engine.failures import hide_internal_frames
from grainlite.engine.protocol import ErrorReport
from grainlite.errors import GrainliteRuntimeError, WorkerDiedError


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
    return ErrorReport(generation, state, payload, _type_name(error), str(error), text)


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
            f"it arrives as this GrainliteRuntimeError; its traceback is above)"
        )
    error.__cause__ = RemoteTraceback(message.traceback)
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
