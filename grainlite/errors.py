"""The one exception tree of grainlite.

Every error grainlite raises on purpose derives from :class:`GrainliteError` *and* from the builtin
exception users of Grain already catch, so ``except ValueError`` keeps working after a switch::

    GrainliteError
    ├── GrainliteValueError (ValueError)      bad arguments, bad values
    │   ├── CheckpointMismatchError           a state that does not fit this loader
    │   ├── StateNotJSONError                 a state that is not JSON (json.JSONDecodeError)
    │   └── ...OutOfRange, ...Argument errors  also an IndexError or AssertionError, as in Grain
    ├── GrainliteTypeError (TypeError)        wrong kinds of objects (UnknownLengthError)
    ├── GrainliteRuntimeError (RuntimeError)  the pipeline could not go on
    │   ├── WorkerDiedError                   a worker process ended without reporting
    │   └── LoaderClosedError                 use after close()
    ├── SharedMemoryFullError (OSError)       /dev/shm has no room for a buffer
    ├── RemoteObjectNotFoundError (FileNotFoundError), RemoteAccessDeniedError (PermissionError),
    │   RemoteReadError (RuntimeError, ConnectionError)   object storage (s3://, gs://)
    ├── MissingExtraError (ImportError)       an optional dependency is not installed
    └── ... (NotImplementedError, IndexError, AttributeError, OverflowError, AssertionError)
                                              where Grain raises that builtin

Messages follow one rule: name the thing, show the value received, state the rule, say the fix.
Every class here is also importable from ``grainlite`` (``except grain.GrainliteError:``).
"""

from __future__ import annotations

import json


class GrainliteError(Exception):
    """Base class of every error grainlite raises deliberately."""


class GrainliteValueError(GrainliteError, ValueError):
    """An argument or value breaks a documented rule."""


class GrainliteTypeError(GrainliteError, TypeError):
    """An object of the wrong kind was passed."""


class GrainliteRuntimeError(GrainliteError, RuntimeError):
    """The pipeline cannot continue."""


class CheckpointMismatchError(GrainliteValueError):
    """A saved iterator state does not belong to this loader."""


class StateNotJSONError(GrainliteValueError, json.JSONDecodeError):
    """A saved iterator state is not JSON; a ``json.JSONDecodeError``, as Grain raises there."""

    def __init__(self, message: str, cause: json.JSONDecodeError) -> None:
        json.JSONDecodeError.__init__(self, cause.msg, cause.doc, cause.pos)
        self.args = (message,)


class WorkerDiedError(GrainliteRuntimeError):
    """A worker process ended without reporting an error (killed, out of memory, ``os._exit``)."""


class ClusterConnectionError(GrainliteRuntimeError, ConnectionError):
    """This process lost its connection to the Ray cluster running its workers, or found no Ray
    cluster answering at the address it was to connect to (grainlite.ray)."""


class WorkerTimeoutError(GrainliteRuntimeError, TimeoutError):
    """A worker sent nothing for ``worker_timeout_s`` seconds (``grain.config``): it hangs."""


class LoaderClosedError(GrainliteRuntimeError):
    """An iterator was used after ``close()``."""


class CorruptedDataError(GrainliteRuntimeError, ValueError):
    """Stored data cannot be read back: a damaged (truncated, overwritten) file; names it.

    A RuntimeError, as array_record raises for a bad chunk, and a ValueError, as grainlite raises
    for a file it cannot open, so existing ``except`` clauses of either kind keep working.
    """


class RemoteObjectNotFoundError(GrainliteError, FileNotFoundError):
    """An ``s3://`` or ``gs://`` URL names no object (or no bucket); names the URL and the fix."""


class RemoteAccessDeniedError(GrainliteError, PermissionError):
    """Object storage refused the credentials for a URL; names the URL and where credentials come
    from."""


class RemoteReadError(GrainliteRuntimeError, ConnectionError):
    """A request to object storage kept failing (resets, 5xx, stalls) after every retry."""


class SharedMemoryError(GrainliteError, OSError):
    """Shared memory (``/dev/shm``) cannot be used: missing, read-only, or out of descriptors."""


class SharedMemoryFullError(SharedMemoryError):
    """Shared memory (``/dev/shm``) has no room for another buffer."""


class ResourceLimitError(GrainliteError, OSError):
    """The system refused the loader a file descriptor or a process; names the limit to raise."""


class MissingExtraError(GrainliteError, ImportError):
    """An optional dependency is missing; the message names the pip extra that installs it."""


# Errors raised where Grain raises a builtin of another kind (IndexError, AssertionError,
# NotImplementedError...): each derives from that builtin too, so Grain users' except clauses hold.
# Each is raised by one module, and defined here with the rest of the tree.


class RecordKeyOutOfRangeError(GrainliteValueError, IndexError):
    """A record key outside a source's ``[0, len)``.

    It is an IndexError, as a list raises, and a ValueError, as array_record's own
    ``ArrayRecordDataSource`` raises, so code written against either keeps catching it.
    """


class RangeArgumentError(GrainliteValueError, AssertionError):
    """Impossible ``RangeDataSource`` arguments.

    An AssertionError because that is what Grain raises here; a ValueError because that is what
    the problem is.
    """


class StateOutOfRangeError(GrainliteValueError, IndexError):
    """A ``next_index`` outside ``[0, len(dataset)]``: an IndexError, as Grain raises."""


class InterleaveArgumentError(GrainliteValueError, IndexError):
    """A ``cycle_length`` below 1 or no datasets (Grain fails there with an IndexError)."""


class MissingOutputSpecError(GrainliteValueError):
    """A transform whose output spec is asked for but that has no ``output_spec`` method."""


class UnknownLengthError(GrainliteTypeError):
    """``len(loader)`` is not known in advance; the message says why."""


class UnsupportedTransformationError(GrainliteError, NotImplementedError):
    """``apply`` got something that is not a transformation it can apply (Grain's type)."""


class ElementSpecNotKnownError(GrainliteError, NotImplementedError):
    """A node whose element spec cannot be known without reading data."""


class NoNextIndexError(GrainliteError, NotImplementedError):
    """The iterator's position is not one element index (a filter, packing, a mix...)."""


class SelectionIndexError(GrainliteError, IndexError):
    """A selection map named a dataset that does not exist (an IndexError, as in Grain)."""


class MissingFanOutError(GrainliteError, AttributeError):
    """A transform without ``max_fan_out`` given to ``FlatMapMapDataset`` (AttributeError)."""


class NegativeRngIndexError(GrainliteError, OverflowError):
    """A random node read at a negative index (an OverflowError, as Grain raises there)."""


class NotSequentialSliceError(GrainliteError, AssertionError):
    """``set_slice`` on a source was asked for a strided slice (it takes sequential ones)."""


SHOWN_CHARS = 200  # how much of a bad value an error message quotes


def shown(value: object) -> str:
    """``repr(value)`` cut to a readable length, for messages about values from outside.

    A checkpoint or an argument may hold megabytes; an error quotes its start and its size.
    """
    return clipped(repr(value))


def shown_text(value: object) -> str:
    """A string as written where it is short (a checkpoint's identity), else :func:`shown`."""
    return value if isinstance(value, str) and len(value) <= SHOWN_CHARS else shown(value)


def clipped(text: str) -> str:
    """``text`` cut to the length an error message quotes (a dataset's ``str``, a structure)."""
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"
