"""The Orbax checkpoint handler for grainlite iterators, and its Save / Restore args.

The handler follows Orbax's legacy ``CheckpointHandler`` interface, as Grain's does, so the same
``CheckpointManager`` calls work with either library and the files are interchangeable: each JAX
process writes ``process_<i>-of-<n>.json`` holding exactly its iterator's ``get_state()``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from grainlite._optional import require
from grainlite.errors import GrainliteValueError

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


class CheckpointHandler(ocp.CheckpointHandler):  # type: ignore[name-defined,misc]
    """Writes and reads one JSON file per JAX process with the iterator's ``get_state()``.

    ``save`` writes the state captured by :class:`CheckpointSave`; ``restore`` reads this process's
    file as bytes, hands it to ``set_state`` (which parses JSON and checks every field, never
    unpickling anything) and returns the same iterator object.
    """

    def save(self, directory: Any, item: Any = None, args: Any = None) -> None:
        """Writes the state captured by ``CheckpointSave`` (or ``item.get_state()`` now)."""
        state = getattr(args, "state", None)
        if state is None:
            state = (item if item is not None else args.item).get_state()
        index, count = process_layout()
        directory.mkdir(parents=True, exist_ok=True)
        (directory / state_file_name(index, count)).write_text(state.decode())

    def restore(self, directory: Any, item: Any = None, args: Any = None) -> Any:
        """Moves the iterator to the saved position and returns it (the same object).

        Raises:
          GrainliteValueError: this process's file is missing (the message says why, e.g. a
            checkpoint written by another number of JAX processes) or is not a valid state.
          CheckpointMismatchError: the state belongs to a loader with another worker count,
            sampler or data source. Either error carries a note naming the file.
        """
        iterator = item if item is not None else args.item
        index, count = process_layout()
        path = directory / state_file_name(index, count)
        if not path.exists():
            raise _missing_file_error(directory, state_file_name(index, count), count)
        try:
            iterator.set_state(path.read_bytes())
        except ValueError as error:
            error.add_note(f"grainlite: while restoring the iterator from {path}")
            raise
        start_prefetch = getattr(iterator, "start_prefetch", None)
        if start_prefetch is not None:
            start_prefetch()  # as Grain does: workers start reading at the restored position
        return iterator

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
        self.state = self.item.get_state()


@ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):  # type: ignore[name-defined,misc]
    """Restore args: the iterator to move to the saved position (it is mutated and returned)."""

    item: Any
