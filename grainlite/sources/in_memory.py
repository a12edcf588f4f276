"""``InMemoryDataSource``: plain values in one shared-memory segment, mapped by every worker.

Worker processes get the source by segment name and map the same memory, so a large list is held
once per machine, not once per worker. Unlike Grain's version (a ``ShareableList``) it keeps bytes
with trailing zero bytes intact (CPython #96779), has no 10 MB limit per value, and has a repr
made of the length and a hash of the contents, so a checkpoint restores against a new source with
the same contents. How the values are laid out in the segment, and read back, is
``grainlite.sources.in_memory_layout``.

Lifetime: the process that creates the source owns the segment. ``close()``, garbage collection
of the owner's object and interpreter exit unmap it and remove its name; copies attached in other
processes only unmap. No handler runs when the owner is killed with SIGKILL: the segment name
carries the owner's pid, so ``grainlite.remove_stale_segments()`` (run at loader start) removes
such leftovers. A name the user chose (``InMemoryDataSource(elements, name="...")``) carries no
pid: only closing the source removes it, so a killed owner leaves it behind until someone calls
``InMemoryDataSource(name="...").unlink()`` (or the machine restarts).
"""

from __future__ import annotations

import errno
import operator
import os
import sys
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, SupportsIndex

import numpy as np

from grainlite import shm
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.sources.in_memory_layout import View, is_layout, write
from grainlite.sources.protocol import int64_keys, key_out_of_range


def _attach(name: str) -> InMemoryDataSource:
    """Rebuilds a pickled source in another process by mapping its segment (no data is copied)."""
    return InMemoryDataSource(name=name)


class InMemoryDataSource:
    """A fixed-length sequence of int, float, bool, str, bytes or None values in shared memory.

    ``InMemoryDataSource(elements)`` creates a new segment holding ``elements`` under a name
    grainlite chooses; ``InMemoryDataSource(elements, name="...")`` creates it under ``name``, as
    Grain does, so other processes can attach by a name agreed in advance;
    ``InMemoryDataSource(name=...)`` maps one created elsewhere (that is what unpickling does).

    A name you choose does not record the owner's pid, so ``grainlite.remove_stale_segments()``
    can never remove it: the creating process must close it (``close()``, ``with``, or dropping
    the source; interpreter exit does it too), or, if that process was killed, remove it with
    ``InMemoryDataSource(name=...).unlink()``.
    Reads are thread-safe and return exactly the values stored (ints as int64, floats as float64).
    ``SharedMemoryDataSource`` is the same class, under the name Grain's module uses.

    Args:
      elements: the values to store, any sequence or iterable (a numpy array is converted with
        ``tolist()``).
      name: with ``elements``, the name of the new segment (letters, digits, ``_``, ``-`` and
        ``.``, as POSIX shared memory allows); alone, the segment name of an existing source
        (``source.name``), to attach to it.

    Raises:
      GrainliteValueError: neither ``elements`` nor ``name`` given, an int outside int64, a new
        ``name`` that is empty, contains ``/`` or is longer than the platform allows, or an
        attached ``name`` that is not an InMemoryDataSource segment.
      GrainliteTypeError: an element of another type (its position and type are named), or a
        ``name`` that is not a str.
      FileExistsError: ``elements`` and a ``name`` that another segment already has (as Grain).
      FileNotFoundError: no segment called ``name`` exists.
      SharedMemoryFullError: ``/dev/shm`` has no room for the values.
    """

    def __init__(
        self, elements: Sequence[Any] | Iterable[Any] | None = None, *, name: str | None = None
    ) -> None:
        if elements is None and name is None:
            raise GrainliteValueError(
                "Elements or name must be provided. Pass InMemoryDataSource(elements) to store "
                "values in a new shared-memory segment, or InMemoryDataSource(name=source.name) "
                "to attach to an existing one."
            )
        if elements is not None:
            segment = write(_as_list(elements), None if name is None else _check_new_name(name))
            owner_pid: int | None = os.getpid()
        else:
            segment = _attach_segment(name)
            owner_pid = None
        self._name = segment.name
        try:
            self._view = View(segment)
        except BaseException:
            if owner_pid is not None:
                segment.unlink()
            segment.close()
            raise
        self._len = self._view.count
        self._sha1 = self._view.sha1
        # Backstop for a source that is never closed: runs when the object is collected or at
        # interpreter exit; only the creating process (same pid: not a forked child) unlinks.
        # Nothing runs if the owner is SIGKILLed: remove_stale_segments() finds the segment by
        # the dead pid in its name.
        self._finalizer = weakref.finalize(self, _release, self._view, owner_pid)

    @property
    def name(self) -> str:
        """The shared-memory segment name; ``InMemoryDataSource(name=...)`` attaches to it."""
        return self._name

    def __len__(self) -> int:
        return self._len

    def _live_view(self) -> View:
        if not self._finalizer.alive:
            raise GrainliteValueError(
                f"{self} is closed; read it before calling close(), or attach a new one with "
                f"InMemoryDataSource(name={self._name!r}) while its owner still has it open."
            )
        return self._view

    def __getitem__(self, key: SupportsIndex) -> Any:
        """The value at ``key``; negative keys count from the end, as in a list."""
        view = self._live_view()
        try:
            k = operator.index(key)
        except TypeError:
            raise GrainliteTypeError(
                f"InMemoryDataSource indices must be ints (got {type(key).__name__} {key!r}); "
                f"pass an int or a numpy integer."
            ) from None
        position = k + self._len if k < 0 else k
        if not 0 <= position < self._len:
            raise key_out_of_range("InMemoryDataSource", k, self._len)
        return view.value(position)

    def __getitems__(self, keys: Sequence[SupportsIndex]) -> list[Any]:
        """The values at all ``keys`` (negative ones from the end); vectorized for one type."""
        view = self._live_view()
        array = int64_keys(keys)
        if array is None:
            return [self[key] for key in keys]  # Not int64 keys: reports the first bad one exactly.
        if array.size == 0:
            return []
        low = int(array.min())
        positions = array if low >= 0 else np.where(array < 0, array + self._len, array)
        if low < -self._len or int(array.max()) >= self._len:
            bad = np.flatnonzero((positions < 0) | (positions >= self._len))[0]
            raise key_out_of_range("InMemoryDataSource", int(array[bad]), self._len)
        return view.values(positions)

    def close(self) -> None:
        """Unmaps the segment; the creating process also removes its name. Safe to call twice."""
        self._finalizer()

    def unlink(self) -> None:
        """Removes the segment name now, from any process; mapped copies keep working."""
        shm.unlink(self._name)

    def __enter__(self) -> InMemoryDataSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        self._live_view()
        return _attach, (self._name,)

    def __repr__(self) -> str:
        return f"InMemoryDataSource(len={self._len}, sha1={self._sha1})"

    def __str__(self) -> str:
        return f"InMemoryDataSource(name={self._name}, len={self._len})"


SharedMemoryDataSource = InMemoryDataSource


def _release(view: View, owner_pid: int | None) -> None:
    if owner_pid is not None and owner_pid == os.getpid():
        shm.unlink(view.name)
    view.close()


def _as_list(elements: Any) -> list[Any]:
    if isinstance(elements, np.ndarray):
        return elements.tolist()
    try:
        return list(elements)
    except TypeError:
        raise GrainliteTypeError(
            f"InMemoryDataSource elements must be a sequence of values (got "
            f"{type(elements).__name__}); pass a list, e.g. InMemoryDataSource([1, 2, 3])."
        ) from None


def _attach_segment(name: Any) -> shm.Segment:
    if not isinstance(name, str) or not name:
        raise GrainliteTypeError(
            f"InMemoryDataSource name must be a segment name str (got {type(name).__name__} "
            f"{name!r}); pass source.name of an existing InMemoryDataSource."
        )
    try:
        segment = shm.Segment.attach(name)
    except FileNotFoundError:
        raise FileNotFoundError(
            errno.ENOENT,
            f"No InMemoryDataSource segment named {name!r} in /dev/shm: the process that created "
            f"it closed it or exited; keep the creating source open while others attach",
        ) from None
    if not is_layout(segment):
        segment.close()
        raise GrainliteValueError(
            f"The shared-memory segment {name!r} does not hold an InMemoryDataSource (no "
            f"grainlite header); pass the name of a grainlite InMemoryDataSource (source.name)."
        )
    return segment


# POSIX limits a shared-memory name (without its leading "/") to NAME_MAX bytes on Linux; macOS
# allows 31 bytes including the "/".
_MAX_NAME_BYTES = 30 if sys.platform == "darwin" else 255


def _check_new_name(name: Any) -> str:
    if not isinstance(name, str):
        raise GrainliteTypeError(
            f"InMemoryDataSource name must be a str (got {type(name).__name__} {name!r}); pass "
            f"a name such as 'my_dataset', or leave name out to let grainlite choose one."
        )
    size = len(name.encode("utf-8", "surrogatepass"))
    if not name or "/" in name or "\x00" in name or size > _MAX_NAME_BYTES:
        raise GrainliteValueError(
            f"InMemoryDataSource name must be 1 to {_MAX_NAME_BYTES} bytes without '/' or NUL "
            f"on this platform ({sys.platform}); got {name!r} ({size} bytes). Pass a shorter "
            f"name such as 'my_dataset', or leave name out to let grainlite choose one."
        )
    return name
