"""The Orbax checkpoint handler for grainlite iterators, and its Save / Restore args.

The handler follows Orbax's legacy ``CheckpointHandler`` interface, as Grain's does, so the same
``CheckpointManager`` calls work with either library and the files are interchangeable: each JAX
process writes ``process_<i>-of-<n>.json`` holding exactly its iterator's ``get_state()``.

Both iterator kinds go through it. A ``DataLoader`` iterator's state is already JSON bytes and is
written as it is; a Dataset-API iterator's state is a dict, written as JSON with a four-space
indent (the text Grain writes) and read back with ``json.loads``: nothing is ever unpickled.

Restoring a ``DataLoader`` iterator onto another number of JAX processes reads every process's
file (the folder must be shared) and gives this process its part of what the saving processes had
not delivered (see :mod:`grainlite.loader.state.elastic`, and
:mod:`grainlite.loader.state.resharding` for a sampler sharded by itself); another worker count
needs only this process's file (``set_state`` handles it). A Dataset-API iterator restores only with
the process count that saved it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import time
from typing import Any

from grainlite._optional import require
from grainlite.checks import invalid_state
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.errors import GrainliteTypeError, GrainliteValueError, StateNotJSONError
from grainlite.loader.state.saved_state import MAX_STATE_BYTES

ocp = require("orbax.checkpoint", "orbax", "Checkpointing a grainlite iterator with Orbax")

_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")


def process_layout() -> tuple[int, int]:
    """(this process's index, the process count) from JAX, or (0, 1) without JAX."""
    try:
        import jax
    except ImportError:
        return 0, 1
    return jax.process_index(), jax.process_count()


def state_file_name(index: int, count: int) -> str:
    """The file one process writes: ``process_<index>-of-<count>.json``."""
    return f"process_{index}-of-{count}.json"


def _missing_file_error(directory: Any, name: str, count: int) -> GrainliteValueError:
    """Says which file is missing and, from the files that are there, the likely reason."""
    found = sorted(p.name for p in directory.iterdir()) if directory.exists() else []
    state_files = [f for f in found if _FILE.fullmatch(f)]
    counts = sorted({int(m.group(2)) for f in state_files if (m := _FILE.fullmatch(f))})
    message = f"File {directory / name} does not exist."
    if counts and count not in counts:
        message += (
            f" The checkpoint holds {state_files}, written by {counts[0]} JAX process(es); this "
            f"run has {count}. Restore with {counts[0]} JAX process(es): each process restores "
            f"the file it wrote."
        )
    elif state_files:
        message += (
            f" The folder holds {state_files}; restore with the process layout that wrote them."
        )
    else:
        message += (
            " The folder holds no process_<i>-of-<n>.json file: pass the folder of the iterator "
            "item, and restore a step whose save finished (mngr.wait_until_finished())."
        )
    return GrainliteValueError(message)


def encode_state(iterator: Any) -> bytes:
    """The bytes to write for ``iterator``: its ``get_state()``, as JSON text.

    Raises:
      GrainliteTypeError: a Dataset-API iterator's state holds a value JSON cannot write (e.g. a
        numpy integer from a user's ``get_state``).
    """
    state = iterator.get_state()
    if not isinstance(state, dict):
        return bytes(state)  # the DataLoader's state: JSON bytes already
    try:
        return json.dumps(state, indent=4).encode()
    except (TypeError, ValueError) as error:
        raise GrainliteTypeError(
            f"{type(iterator).__name__}.get_state() returned {state!r}, which is not JSON "
            f"({error}). A dataset iterator's state must hold only dicts, lists, str, int, "
            f"float, bool and None: convert numpy values with int() / float() / .tolist()."
        ) from None


def decode_dataset_state(raw: bytes) -> dict[str, Any]:
    """The state dict a Dataset-API iterator's file holds (parsed as JSON only).

    Raises:
      StateNotJSONError: the file is not JSON (a pickle, say; it is never executed).
      GrainliteValueError: the file is not UTF-8 text, or its JSON is not an object.
    """
    fix = "Restore a step written by CheckpointSave of a dataset iterator (grainlite or Grain)."
    subject = "Invalid dataset iterator state"
    try:
        text = raw.decode()
    except UnicodeDecodeError as error:
        raise invalid_state(f"it is not UTF-8 text ({error})", fix, subject=subject) from None
    try:
        state = json.loads(text)
    except json.JSONDecodeError as error:
        message = str(invalid_state(f"it is not valid JSON ({error})", fix, subject=subject))
        raise StateNotJSONError(message, error) from None
    except (RecursionError, ValueError) as error:  # thousands of levels deep; huge integers
        reason = "it nests thousands of levels deep" if isinstance(error, RecursionError) else error
        raise invalid_state(f"it cannot be read ({reason})", fix, subject=subject) from None
    if not isinstance(state, dict):
        what = f"expected a JSON object, got {type(state).__name__} {text[:60]!r}"
        raise invalid_state(what, fix, subject=subject)
    return state


def _started(iterator: Any) -> Any:
    start_prefetch = getattr(iterator, "start_prefetch", None)
    if start_prefetch is not None:
        start_prefetch()  # as Grain does: workers start reading at the restored position
    return iterator


def _other_process_count(directory: Any, count: int) -> int | None:
    """N if the folder holds exactly the files of N != ``count`` processes, else None."""
    if not directory.exists():
        return None
    found = [m for p in directory.iterdir() if (m := _FILE.fullmatch(p.name))]
    counts = {int(m.group(2)) for m in found}
    if len(counts) != 1 or count in counts:
        return None
    saved = counts.pop()
    indices = sorted(int(m.group(1)) for m in found)
    return saved if indices == list(range(saved)) else None


def read_state_file(path: Any) -> bytes:
    """The bytes of a state file: a regular file of at most ``MAX_STATE_BYTES``, else an error.

    A FIFO would block the restore forever and a device (``/dev/zero``) never ends: both are
    refused from ``stat`` before anything is opened, as is a file too large to be a state.
    """
    info = os.stat(path)  # follows symbolic links: what would be read is what is checked
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "not a regular file"
        raise GrainliteValueError(
            f"{path} is {kind}, so it is not an iterator state; restore a folder written by "
            f"CheckpointSave, whose states are small JSON files."
        )
    with open(path, "rb") as file:
        raw = file.read(MAX_STATE_BYTES + 1)
    if len(raw) > MAX_STATE_BYTES:
        raise GrainliteValueError(
            f"{path} is larger than {MAX_STATE_BYTES} bytes, so it is not an iterator state "
            f"(those are a few hundred bytes); restore a folder written by CheckpointSave."
        )
    return raw


def _restore_from_every_file(iterator: Any, directory: Any, saved: int) -> None:
    """Gives ``iterator`` its part of the remainder of the ``saved`` processes' states."""
    from grainlite.loader.state.saved_state import load

    restore_hosts = getattr(iterator, "restore_hosts", None)
    if restore_hosts is None:
        raise GrainliteTypeError(
            f"The checkpoint in {directory} was written by {saved} JAX process(es) and this run "
            f"has another count; only a grainlite DataLoader iterator can be restored onto "
            f"another process count, got {type(iterator).__name__}."
        )
    documents = {}
    for i in range(saved):
        path = directory / state_file_name(i, saved)
        try:
            documents[i] = load(read_state_file(path))
        except ValueError as error:
            error.add_note(f"grainlite: while reading {path}")
            raise
    try:
        restore_hosts(documents, saved)
    except (ValueError, KeyError, TypeError) as error:
        error.add_note(
            f"grainlite: while restoring the iterator from the {saved} files in {directory}"
        )
        raise


# How long a save waits for Orbax to create the item's folder before it says so.
_FOLDER_WAIT_S = 120.0


def _await_folder(directory: Any) -> None:
    """Returns once ``directory`` exists; the handler never creates it.

    Orbax creates an item's temporary folder itself, by default in the background
    (``create_directories_asynchronously``), and removes a folder it finds already there before
    it makes its own. A handler that made the folder could write its file into one that Orbax
    then replaces: with two JAX processes on a busy machine the save committed without the file
    (a lost checkpoint, found only at restore). Grain's handler does not create it either (its
    write fails instead). The wait is a poll, 1 ms growing to 50 ms between looks.
    """
    deadline = time.monotonic() + _FOLDER_WAIT_S
    pause = 0.001
    while not directory.exists():
        if time.monotonic() > deadline:
            raise GrainliteValueError(
                f"The checkpoint folder {str(directory)[:200]} did not appear within "
                f"{_FOLDER_WAIT_S:.0f} s: Orbax creates it before the handler writes. Save "
                f"through an Orbax Checkpointer or CheckpointManager, or create the folder "
                f"first when calling the handler yourself."
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class CheckpointHandler(ocp.CheckpointHandler):  # type: ignore[name-defined,misc]
    """Writes and reads one JSON file per JAX process with the iterator's ``get_state()``.

    ``save`` writes the state captured by :class:`CheckpointSave`; ``restore`` reads this process's
    file and returns the same iterator object, moved there. A ``DataLoader`` iterator gets the
    bytes (its ``set_state`` parses JSON and checks every field); a Dataset-API iterator (any
    :class:`~grainlite.DatasetIterator`) gets the dict ``json.loads`` makes of them. Nothing is
    ever unpickled.
    """

    def save(self, directory: Any, item: Any = None, args: Any = None) -> None:
        """Writes the state captured by ``CheckpointSave`` (or ``item.get_state()`` now)."""
        state = getattr(args, "state", None)
        if state is None:
            state = encode_state(item if item is not None else args.item)
        index, count = process_layout()
        _await_folder(directory)
        (directory / state_file_name(index, count)).write_text(state.decode())

    def restore(self, directory: Any, item: Any = None, args: Any = None) -> Any:
        """Moves the iterator to the saved position and returns it (the same object).

        A ``DataLoader`` iterator can restore a checkpoint written by another number of JAX
        processes when the folder holds every process's file: it takes its part of what they had
        not delivered (every record exactly once across all processes).

        Raises:
          GrainliteValueError: this process's file is missing and the folder does not hold
            every file of another process count (the message says why), or a file is not a
            valid state.
          CheckpointMismatchError: the state belongs to a loader with another sampler or data
            source. Every error carries a note naming the file.
          StateNotJSONError: a Dataset-API iterator's file is not JSON.
        """
        iterator = item if item is not None else args.item
        index, count = process_layout()
        path = directory / state_file_name(index, count)
        if not path.exists():
            saved = _other_process_count(directory, count)
            if saved is None or isinstance(iterator, DatasetIterator):
                raise _missing_file_error(directory, state_file_name(index, count), count)
            _restore_from_every_file(iterator, directory, saved)
            return _started(iterator)
        try:
            raw = read_state_file(path)
            if isinstance(iterator, DatasetIterator):
                iterator.set_state(decode_dataset_state(raw))
            else:
                iterator.set_state(raw)
        except (ValueError, KeyError, TypeError) as error:
            error.add_note(f"grainlite: while restoring the iterator from {path}")
            raise
        return _started(iterator)

    def metadata(self, directory: Any) -> None:
        """None: the state file is its own description."""
        return None

    def structure(self) -> None:
        """None, as Grain's handler returns."""
        return None

    def finalize(self, directory: Any) -> None:
        """Nothing to do: the file is complete when ``save`` returns."""

    def close(self) -> None:
        """Nothing to release."""


@ocp.args.register_with_handler(CheckpointHandler, for_save=True)
@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):  # type: ignore[name-defined,misc]
    """Save args: the iterator. Its state is taken when these args are made, so an async save
    stores the position of the ``mngr.save`` call even while the loader keeps producing."""

    item: Any
    state: bytes | None = dataclasses.field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.state = encode_state(self.item)


@ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):  # type: ignore[name-defined,misc]
    """Restore args: the iterator to move to the saved position (it is mutated and returned)."""

    item: Any
