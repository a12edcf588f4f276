"""``InMemoryDataSource``: plain values in one shared-memory segment, mapped by every worker.

Worker processes get the source by segment name and map the same memory, so a large list is held
once per machine, not once per worker. Unlike Grain's version (a ``ShareableList``) it keeps bytes
with trailing zero bytes intact (CPython #96779), has no 10 MB limit per value, and has a repr
made of the length and a hash of the contents, so a checkpoint restores against a new source with
the same contents.

Lifetime: the process that creates the source owns the segment. ``close()``, garbage collection
of the owner's object and interpreter exit unmap it and remove its name; copies attached in other
processes only unmap. No handler runs when the owner is killed with SIGKILL: the segment name
carries the owner's pid, so ``grainlite.remove_stale_segments()`` (run at loader start) removes
such leftovers. A name the user chose (``InMemoryDataSource(elements, name="...")``) carries no
pid: only closing the source removes it, so a killed owner leaves it behind until someone calls
``InMemoryDataSource(name="...").unlink()`` (or the machine restarts).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import operator
import os
import struct
import sys
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, SupportsIndex

import numpy as np

from grainlite import shm
from grainlite.errors import GrainliteTypeError, GrainliteValueError
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
            segment = _write(_as_list(elements), None if name is None else _check_new_name(name))
            owner_pid: int | None = os.getpid()
        else:
            segment = _attach_segment(name)
            owner_pid = None
        self._name = segment.name
        try:
            self._view = _View(segment)
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

    def _live_view(self) -> _View:
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


def _release(view: _View, owner_pid: int | None) -> None:
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
    if not _is_layout(segment):
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


def _create(name: str, size: int) -> shm.Segment:
    """A new segment called ``name`` (exactly), with its memory reserved, mapped read-write."""
    try:
        return shm.Segment.create_named(name, size, reserve=True)
    except FileExistsError:
        raise FileExistsError(
            errno.EEXIST,
            f"A shared-memory segment named {name!r} already exists in /dev/shm (an "
            f"InMemoryDataSource created under that name and still open, or left by a killed "
            f"process); choose another name, close the source that holds it, or remove a "
            f"leftover with InMemoryDataSource(name={name!r}).unlink()",
        ) from None


# Segment layout, native byte order, every section 8-byte aligned:
#   header   64 bytes: magic, value count, payload size, bitmask of the tags present, sha1 of the
#            contents (which makes the repr; an attached copy reads it instead of rehashing)
#   tags     one byte per value (_NONE ... _BYTES), padded to a multiple of 8
#   values   one 8-byte slot per value: the int, the float's bits, a bool as 0/1; 0 otherwise
#   offsets  count + 1 int64: value i's str/bytes is payload[offsets[i]:offsets[i + 1]]
#   payload  the strs (UTF-8, surrogates kept) and bytes back to back, length stored exactly
_MAGIC = b"GLIMDS\x01\x00"
_HEADER = struct.Struct("=8sQQB7x20s")
_HEADER_SIZE = 64
_NONE, _BOOL, _INT, _FLOAT, _STR, _BYTES = range(6)
_TAG_OF_TYPE = {type(None): _NONE, bool: _BOOL, int: _INT, float: _FLOAT, str: _STR, bytes: _BYTES}


def _sections(count: int, payload_size: int) -> tuple[int, int, int, int]:
    """Start of values, offsets and payload, and the total size, for ``count`` values."""
    values = _HEADER_SIZE + -(-count // 8) * 8
    offsets = values + 8 * count
    payload = offsets + 8 * (count + 1)
    return values, offsets, payload, payload + payload_size


def _type_error(position: int, value: Any) -> GrainliteTypeError:
    kind = type(value)
    kind_name = kind.__qualname__ if kind.__module__ == "builtins" else str(kind)[8:-2]
    return GrainliteTypeError(
        f"InMemoryDataSource elements must be int, float, bool, str, bytes or None (got "
        f"{kind_name} at position {position}); convert it first (e.g. int(x) or x.item() for a "
        f"numpy scalar, pickle.dumps(x) for other objects), or use a list as the data source."
    )


def _write(items: list[Any], name: str | None = None) -> shm.Segment:
    """A new segment holding ``items`` in the layout above, named ``name`` or by grainlite."""
    count = len(items)
    tags = bytearray(count)
    int_at, int_values, float_at, float_values, var_at, chunks = [], [], [], [], [], []
    for position, value in enumerate(items):
        tag = _TAG_OF_TYPE.get(type(value))
        if tag is None:
            raise _type_error(position, value)
        tags[position] = tag
        if tag in (_INT, _BOOL):
            int_at.append(position)
            int_values.append(value)
        elif tag == _FLOAT:
            float_at.append(position)
            float_values.append(value)
        elif tag == _STR:
            var_at.append(position)
            chunks.append(value.encode("utf-8", "surrogatepass"))
        elif tag == _BYTES:
            var_at.append(position)
            chunks.append(value)
    values = np.zeros(count, np.int64)
    try:
        values[int_at] = np.array(int_values, dtype=np.int64)
    except OverflowError:
        position = next(p for p, v in zip(int_at, int_values) if not -(2**63) <= v < 2**63)
        raise GrainliteValueError(
            f"InMemoryDataSource stores ints as int64, but the element at position {position} is "
            f"{items[position]}, outside [-2**63, 2**63 - 1]; store it as str(x) or bytes instead."
        ) from None
    values.view(np.float64)[float_at] = float_values
    lengths = np.zeros(count + 1, np.int64)
    lengths[np.asarray(var_at, dtype=np.int64) + 1] = [len(chunk) for chunk in chunks]
    offsets = np.cumsum(lengths)
    payload = b"".join(chunks)
    kinds = sum(1 << tag for tag in set(tags))
    digest = hashlib.sha1(count.to_bytes(8, "little"))
    for part in (tags, values.data, offsets.data, payload):
        digest.update(part)
    values_at, offsets_at, payload_at, size = _sections(count, len(payload))
    segment = shm.Segment.create(size, "src", reserve=True) if name is None else _create(name, size)
    try:
        buf = segment.buf
        _HEADER.pack_into(buf, 0, _MAGIC, count, len(payload), kinds, digest.digest())
        buf[_HEADER_SIZE : _HEADER_SIZE + count] = tags
        buf[values_at:offsets_at] = values.data.cast("B")
        buf[offsets_at:payload_at] = offsets.data.cast("B")
        buf[payload_at:size] = payload
    except BaseException:
        segment.unlink()
        segment.close()
        raise
    return segment


def _is_layout(segment: shm.Segment) -> bool:
    """Whether ``segment`` holds an InMemoryDataSource written by :func:`_write`."""
    if segment.size < _HEADER_SIZE or bytes(segment.buf[:8]) != _MAGIC:
        return False
    _, count, payload_size, _, _ = _HEADER.unpack_from(segment.buf, 0)
    return segment.size >= _sections(count, payload_size)[3]


class _View:
    """Typed read-only views of one mapped segment; decoding a value touches only its slots."""

    def __init__(self, segment: shm.Segment) -> None:
        buf = segment.buf
        self.segment = segment
        self.name = segment.name
        _, self.count, payload_size, self.kinds, sha1 = _HEADER.unpack_from(buf, 0)
        self.sha1 = sha1.hex()
        values_at, offsets_at, payload_at, size = _sections(self.count, payload_size)
        self.tags = buf[_HEADER_SIZE : _HEADER_SIZE + self.count]
        self.ints = buf[values_at:offsets_at].cast("q")
        self.floats = buf[values_at:offsets_at].cast("d")
        self.offsets = buf[offsets_at:payload_at].cast("q")
        self.payload = buf[payload_at:size]
        self.ints_np = np.frombuffer(self.ints, dtype=np.int64)
        self.floats_np = self.ints_np.view(np.float64)
        self.offsets_np = np.frombuffer(self.offsets, dtype=np.int64)
        self.payload_np = np.frombuffer(self.payload, dtype=np.uint8)

    def value(self, k: int) -> Any:
        """The value at position ``k`` (already checked to be in range)."""
        tag = self.tags[k]
        if tag == _INT:
            return self.ints[k]
        if tag == _FLOAT:
            return self.floats[k]
        if tag == _STR:
            return str(
                self.payload[self.offsets[k] : self.offsets[k + 1]], "utf-8", "surrogatepass"
            )
        if tag == _BYTES:
            return self.payload[self.offsets[k] : self.offsets[k + 1]].tobytes()
        if tag == _BOOL:
            return self.ints[k] != 0
        return None

    def values(self, positions: np.ndarray) -> list[Any]:
        """The values at ``positions``; one numpy gather when all values share one type."""
        kinds = self.kinds
        if kinds == 1 << _INT:
            return self.ints_np[positions].tolist()
        if kinds == 1 << _FLOAT:
            return self.floats_np[positions].tolist()
        if kinds == 1 << _BOOL:
            return (self.ints_np[positions] != 0).tolist()
        if kinds == 1 << _BYTES:
            return self.bytes_at(positions)
        if kinds == 1 << _STR:
            payload = self.payload
            starts, ends = self.offsets_np[positions], self.offsets_np[positions + 1]
            return [
                str(payload[a:b], "utf-8", "surrogatepass")
                for a, b in zip(starts.tolist(), ends.tolist())
            ]
        value = self.value
        return [value(k) for k in positions.tolist()]

    def bytes_at(self, positions: np.ndarray) -> list[bytes]:
        """The bytes values at ``positions`` (every value is bytes).

        Values of one length ``n`` stored at multiples of ``n`` in the payload (a source of
        fixed-size records) are gathered by one numpy read of the payload seen as ``n``-byte
        items, whose ``tolist()`` makes the bytes objects in C (void items keep trailing zero
        bytes); other values are sliced one by one.
        """
        starts, ends = self.offsets_np[positions], self.offsets_np[positions + 1]
        if starts.size:
            size = int(ends[0] - starts[0])
            if size and (ends - starts == size).all() and not (starts % size).any():
                whole = self.payload_np[: self.payload_np.size // size * size]
                return whole.view(f"V{size}")[starts // size].tolist()  # type: ignore[no-any-return]
        payload = self.payload
        return [payload[a:b].tobytes() for a, b in zip(starts.tolist(), ends.tolist())]

    def close(self) -> None:
        """Drops every view, then the mapping (left to GC if a reader still holds a view)."""
        self.ints_np = self.floats_np = self.offsets_np = self.payload_np = None  # type: ignore[assignment]
        for view in (self.tags, self.ints, self.floats, self.offsets, self.payload):
            with contextlib.suppress(BufferError):  # A reader thread still holds it: GC frees it.
                view.release()
        self.segment.close()
