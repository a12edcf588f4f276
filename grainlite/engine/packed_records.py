"""A large in-memory list of ``bytes`` records travels to the workers as one buffer.

A plain ``list`` of records (``MapDataset.source(records)``, ``DataLoader(data_source=records)``)
is pickled into every worker. Pickle writes and memoizes each record as its own object: for a
million 16-byte records that took about 0.3 s of CPU in the parent and 0.1 s in each worker, at
every start. :func:`packed` stands in for such a list while it is pickled: the records go as one
joined buffer plus their lengths. Unpickling rebuilds a ``list`` of equal ``bytes``, except in a
worker process (:func:`read_records_in_place`), where records of one length stay in their buffer
(:class:`FixedSizeRecords`) and each is cut as it is read: the worker starts without building a
million objects (70 ms for a million 16-byte records) and holds 16 MB instead of about 65 MB.
Either way the records read are equal ``bytes``; only object identity is lost, which ``bytes``
never exposes.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, ClassVar, overload

import numpy as np

# Shorter lists pickle quickly enough as they are.
MIN_RECORDS = 4096

_in_place = False  # True in a worker process: see read_records_in_place


def read_records_in_place() -> None:
    """Makes this process unpickle records of one length as a :class:`FixedSizeRecords` view.

    A worker process calls it before it unpickles its pipeline. Other processes (the training
    process, ``copy.deepcopy``, a Ray actor) keep getting a ``list``.
    """
    global _in_place
    _in_place = True


def packed(source: Any) -> Any:
    """``source`` itself, or a stand-in that pickles it as one buffer when it is a ``list`` of at
    least :data:`MIN_RECORDS` records that are all ``bytes`` (subclasses excluded)."""
    if type(source) is not list or len(source) < MIN_RECORDS:
        return source
    if set(map(type, source)) != {bytes}:  # one pass in C: a third faster than all(...)
        return source
    return _PackedBytes(source)


class PicklesRecordsPacked:
    """Pickles the attribute named by ``_packed_attribute`` through :func:`packed`.

    Mixed into what carries a user's records to the workers (the DataLoader's pipeline and
    ``MapDataset.source``), so both send a large list of ``bytes`` the one way.
    """

    _packed_attribute: ClassVar[str]

    def __getstate__(self) -> dict[str, Any]:
        """The attributes to pickle, the records' list as one buffer (see :func:`packed`)."""
        state = dict(self.__dict__)
        state[self._packed_attribute] = packed(state[self._packed_attribute])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        name = self._packed_attribute
        state[name] = unpacked(state[name])  # copy.copy keeps the stand-in
        self.__dict__.update(state)


def unpacked(value: Any) -> Any:
    """The list behind a stand-in of :func:`packed`, or ``value`` itself.

    Unpickling never gives a stand-in (it pickles as its list's rebuild), but ``copy.copy`` of
    an object whose ``__getstate__`` used :func:`packed` puts the stand-in back as it is: the
    object's ``__setstate__`` calls this to get the list again.
    """
    return value.records if type(value) is _PackedBytes else value


class _PackedBytes:
    """Pickles as the rebuild of its list from one buffer (never unpickled as itself)."""

    __slots__ = ("records",)

    def __init__(self, records: list[bytes]) -> None:
        self.records = records

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        records = self.records
        sizes = set(map(len, records))
        if len(sizes) == 1:
            size = sizes.pop()
            # numpy copies records of one length into one buffer 3x faster than bytes.join (a
            # million 16-byte records: 35 ms against 110 ms): it reads each record once, in C.
            # "S<size>" keeps every byte of a record of exactly that size, zeros included.
            data = np.array(records, dtype=f"S{size}").tobytes() if size else b""
            return unpack_fixed, (data, size, len(records))
        lengths = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
        return unpack, (b"".join(records), lengths)


def unpack_fixed(data: bytes, size: int, count: int) -> Sequence[bytes]:
    """``count`` records of ``size`` bytes each, cut from ``data``: a ``list``, or in a worker
    process a :class:`FixedSizeRecords` view of ``data``."""
    if size == 0:
        return [b""] * count
    if _in_place:
        return FixedSizeRecords(data, size, count)
    records: list[bytes] = np.frombuffer(data, dtype=np.dtype((np.void, size))).tolist()
    return records


class FixedSizeRecords(Sequence[bytes]):
    """Records of ``size`` bytes each, read from one buffer: a worker's copy of a ``list`` of them.

    Indexing and slicing behave as on the list (a slice of step 1 is a view too); ``__getitems__``
    cuts a block of records with one numpy gather, as the readers of both APIs ask for blocks.
    """

    __slots__ = ("_count", "_data", "_size", "_view")

    def __init__(self, data: bytes, size: int, count: int) -> None:
        if size <= 0 or len(data) != size * count:
            raise ValueError(f"{len(data)} bytes are not {count} records of {size} bytes")
        self._data, self._size, self._count = data, size, count
        self._view = np.frombuffer(data, dtype=np.dtype((np.void, size)))

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, key: int) -> bytes: ...
    @overload
    def __getitem__(self, key: slice) -> Sequence[bytes]: ...
    def __getitem__(self, key: int | slice) -> bytes | Sequence[bytes]:
        size = self._size
        if isinstance(key, slice):
            start, stop, step = key.indices(self._count)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            count = max(stop - start, 0)
            return FixedSizeRecords(
                self._data[start * size : start * size + count * size], size, count
            )
        index = operator.index(key)
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("list index out of range")
        return self._data[index * size : (index + 1) * size]

    def __getitems__(self, keys: Sequence[int]) -> list[bytes]:
        """The records at ``keys`` (negative ones count from the end), in the keys' order."""
        records: list[bytes] = self._view[np.asarray(keys, dtype=np.intp)].tolist()
        return records

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return unpack_fixed, (self._data, self._size, self._count)


def unpack(data: bytes, lengths: np.ndarray) -> list[bytes]:
    """The records of the given ``lengths``, cut from ``data`` in order."""
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]]
    return [data[start:end] for start, end in zip(starts, ends)]
