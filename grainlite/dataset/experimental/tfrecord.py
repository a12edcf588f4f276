"""``TFRecordIterDataset(path)``: the records of a TFRecord file, as ``bytes``, without TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    length       uint64, little endian
    length_crc   uint32, little endian: masked CRC-32C of the 8 length bytes
    data         `length` bytes
    data_crc     uint32, little endian: masked CRC-32C of data

(a masked CRC is ``((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32``). What is checked: the
length CRC of every record, always (8 bytes, cheap; a damaged length would misread the rest of
the file), and the data CRC where a compiled CRC-32C is importable (``google_crc32c`` or
``crc32c``); without one the data CRC is not checked, as Grain 0.2.18 checks neither. A
mismatch, or a file that ends inside a record, raises :class:`~grainlite.errors.CorruptedDataError`
(a ValueError, as Grain raises for a short header) naming the file and the offset.

The state is Grain's ``{"reader_offset": <byte offset of the next record>}``. The file is opened
at the first read and read through a buffered reader. The path may be an ``s3://`` or ``gs://``
URL (``pip install 'grainlite[remote]'``): the object is then read front to back through the
object-store client (:mod:`grainlite.sources.locations`), one ranged GET per MiB, and a restored
offset starts its reads there.
"""

from __future__ import annotations

import functools
import importlib
import struct
from collections.abc import Callable
from typing import Any, BinaryIO

from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.errors import CorruptedDataError, GrainliteTypeError
from grainlite.sources import locations

_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


@functools.cache
def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return tuple(table)


def crc32c(data: bytes) -> int:
    """The CRC-32C (Castagnoli) of ``data``, in Python: for short inputs (a record's header)."""
    table = _crc_table()
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes, crc: Callable[[bytes], int] = crc32c) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    value = crc(data)
    return ((((value >> 15) | (value << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


@functools.lru_cache(maxsize=1 << 16)
def _length_crc(length_field: bytes) -> int:
    """The masked CRC of a record's 8 length bytes, cached: record lengths repeat."""
    return masked_crc32c(length_field)


@functools.cache
def compiled_crc32c() -> Callable[[bytes], int] | None:
    """A compiled CRC-32C function where one is installed, else None (data CRCs unchecked)."""
    for module, function in (("google_crc32c", "value"), ("crc32c", "crc32c")):
        try:
            return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    return None


class TFRecordIterDataset(IterDataset):
    """The records of the TFRecord file at ``path``, each as ``bytes``.

    Args:
      path: the file to read, or an ``s3://``/``gs://`` URL.
      storage_options: options of the object-store client for a URL (endpoint, credentials).
    """

    def __init__(self, path: str, *, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__()
        if not isinstance(path, str):
            raise GrainliteTypeError(
                f"TFRecordIterDataset path must be a str (got {path!r} of type "
                f"{type(path).__name__}); pass the path of one TFRecord file (interleave several "
                "with InterleaveIterDataset)."
            )
        self._path = path
        self._storage_options = storage_options

    def __iter__(self) -> TFRecordDatasetIterator:
        return TFRecordDatasetIterator(self._path, self._storage_options)

    def __str__(self) -> str:
        return f"TFRecordIterDataset(path={self._path!r})"


class TFRecordDatasetIterator(DatasetIterator):
    """Reads one record per ``next()``; state ``{"reader_offset": n}``."""

    def __init__(self, path: str, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._path = path
        self._storage_options = storage_options
        self._offset = 0
        self._file: BinaryIO | None = None

    def _corrupt(self, what: str) -> CorruptedDataError:
        if self._file is not None:  # the next read starts again at this record
            self._file.close()
            self._file = None
        return CorruptedDataError(
            f"Not a valid TFRecord: {self._path!r} at byte offset {self._offset}: {what}. The "
            "file is truncated, damaged or not a TFRecord file; rewrite it, or skip it."
        )

    def __next__(self) -> bytes:
        file = self._file
        if file is None:
            file = self._file = locations.open_binary(self._path, self._storage_options)
            file.seek(self._offset)
        header = file.read(_HEADER.size)
        if not header:
            raise StopIteration
        if len(header) < _HEADER.size:
            raise self._corrupt(f"{len(header)} bytes, fewer than the 12-byte record header")
        length, length_crc = _HEADER.unpack(header)
        if _length_crc(header[:8]) != length_crc:
            raise self._corrupt(f"the length CRC does not match (length field {length})")
        body = file.read(length + _CRC.size)
        if len(body) < length + _CRC.size:
            raise self._corrupt(
                f"the record holds {length} bytes and its CRC, but only {len(body)} bytes follow"
            )
        data = body[:length]
        crc = compiled_crc32c()
        if crc is not None and masked_crc32c(data, crc) != _CRC.unpack_from(body, length)[0]:
            raise self._corrupt(f"the data CRC of the {length}-byte record does not match")
        self._offset += _HEADER.size + length + _CRC.size
        return data

    def get_state(self) -> dict[str, Any]:
        """``{"reader_offset": <byte offset of the next record>}``."""
        return {"reader_offset": self._offset}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to the record starting at ``state["reader_offset"]``."""
        self._offset = int(state["reader_offset"])
        if self._file is not None:
            self._file.seek(self._offset)

    def close(self) -> None:
        """Closes the file (a later ``next()`` opens it again at the same offset)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_file"] = None
        return state

    def __str__(self) -> str:
        return f"TFRecordDatasetIterator(path={self._path!r})"
