"""A large in-memory list of ``bytes`` records travels to the workers as one buffer.

A plain ``list`` of records (``MapDataset.source(records)``, ``DataLoader(data_source=records)``)
is pickled into every worker. Pickle writes and memoizes each record as its own object: for a
million 16-byte records that took about 0.3 s of CPU in the parent and 0.1 s in each worker, at
every start. :func:`packed` stands in for such a list while it is pickled: the records go as one
joined buffer plus their lengths, and unpickling rebuilds a ``list`` of equal ``bytes`` (numpy
cuts records of one length in one call). The worker gets the same type and the same values;
only object identity is lost, which ``bytes`` never exposes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

# Shorter lists pickle quickly enough as they are.
MIN_RECORDS = 4096


def packed(source: Any) -> Any:
    """``source`` itself, or a stand-in that pickles it as one buffer when it is a ``list`` of at
    least :data:`MIN_RECORDS` records that are all ``bytes`` (subclasses excluded)."""
    if type(source) is not list or len(source) < MIN_RECORDS:
        return source
    if not all(type(record) is bytes for record in source):
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
        lengths = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
        data = b"".join(records)
        size = int(lengths[0])
        if (lengths == size).all():
            return unpack_fixed, (data, size, len(records))
        return unpack, (data, lengths)


def unpack_fixed(data: bytes, size: int, count: int) -> list[bytes]:
    """``count`` records of ``size`` bytes each, cut from ``data``."""
    if size == 0:
        return [b""] * count
    records: list[bytes] = np.frombuffer(data, dtype=np.dtype((np.void, size))).tolist()
    return records


def unpack(data: bytes, lengths: np.ndarray) -> list[bytes]:
    """The records of the given ``lengths``, cut from ``data`` in order."""
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]]
    return [data[start:end] for start, end in zip(starts, ends)]
