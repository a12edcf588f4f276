"""The bytes of an ``InMemoryDataSource`` segment: writing plain values into one, reading them back.

``write`` lays a list of int, float, bool, str, bytes and None values out in a new shared-memory
segment (tags, 8-byte slots, offsets and a payload, plus a header holding a sha1 of the contents);
``View`` maps those sections as typed views, so decoding a value touches only its own slots and a
batch of one type is a single numpy gather. Kept apart from the source class so the format can be
read and changed in one place, without the source's lifetime, naming and indexing rules around it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import struct
from typing import Any

import numpy as np

from grainlite import shm
from grainlite.errors import GrainliteTypeError, GrainliteValueError


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


def write(items: list[Any], name: str | None = None) -> shm.Segment:
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


def is_layout(segment: shm.Segment) -> bool:
    """Whether ``segment`` holds an InMemoryDataSource written by :func:`write`."""
    if segment.size < _HEADER_SIZE or bytes(segment.buf[:8]) != _MAGIC:
        return False
    _, count, payload_size, _, _ = _HEADER.unpack_from(segment.buf, 0)
    return segment.size >= _sections(count, payload_size)[3]


class View:
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
