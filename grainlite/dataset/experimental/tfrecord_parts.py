"""The two TFRecord building blocks MaxText subclasses, by the names it imports from Grain.

MaxText reads TFRecord files from GCS by subclassing Grain's private ``_TFRecordReader`` (it
replaces ``__init__`` to put its own binary file object in ``self._reader``) and
``_TFRecordDatasetIterator`` (it replaces ``__init__`` to put such a reader in ``self._reader``).
This module gives those two names that contract, so that code runs under
``grainlite.install_as_grain()`` (the path is aliased in grainlite/as_grain.py):

- ``_TFRecordReader(path)``: ``self._reader`` is a binary file object; ``next()`` returns the
  next record's bytes (checked as :class:`TFRecordIterDataset` checks them), ``tell()`` and
  ``seek(offset)`` are byte offsets of records;
- ``_TFRecordDatasetIterator(path)``: a DatasetIterator over ``self._reader``, with Grain's state
  ``{"reader_offset": n}``.

grainlite's own :class:`TFRecordIterDataset` does not use these (it opens its file lazily and
pickles without it); they exist only for code written against Grain's internals.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.experimental.tfrecord import (
    _CRC,
    _HEADER,
    _length_crc,
    compiled_crc32c,
    masked_crc32c,
)
from grainlite.errors import CorruptedDataError
from grainlite.sources import locations


class _TFRecordReader:
    """Reads records from the binary file object in ``self._reader``."""

    _reader: BinaryIO

    def __init__(self, path: str) -> None:
        self._reader = locations.open_binary(path)  # a local file or an s3:// / gs:// URL

    def _corrupt(self, offset: int, what: str) -> CorruptedDataError:
        return CorruptedDataError(
            f"Not a valid TFRecord at byte offset {offset}: {what}. The file is truncated, "
            "damaged or not a TFRecord file; rewrite it, or skip it."
        )

    def __next__(self) -> bytes:
        offset = self._reader.tell()
        header = self._reader.read(_HEADER.size)
        if not header:
            raise StopIteration
        if len(header) < _HEADER.size:
            raise self._corrupt(offset, f"{len(header)} bytes, fewer than the 12-byte header")
        length, length_crc = _HEADER.unpack(header)
        if _length_crc(header[:8]) != length_crc:
            raise self._corrupt(offset, f"the length CRC does not match (length field {length})")
        body = self._reader.read(length + _CRC.size)
        if len(body) < length + _CRC.size:
            raise self._corrupt(offset, f"the {length}-byte record is cut short")
        data = body[:length]
        crc = compiled_crc32c()
        if crc is not None and masked_crc32c(data, crc) != _CRC.unpack_from(body, length)[0]:
            raise self._corrupt(offset, f"the data CRC of the {length}-byte record does not match")
        return data

    def seek(self, offset: int) -> None:
        """Moves to the record that starts at byte ``offset``."""
        self._reader.seek(offset)

    def tell(self) -> int:
        """The byte offset of the next record."""
        return self._reader.tell()

    def close(self) -> None:
        """Closes the file object."""
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.close()

    def __del__(self) -> None:
        self.close()


class _TFRecordDatasetIterator(DatasetIterator):
    """The records of ``self._reader`` (a :class:`_TFRecordReader`); state ``{"reader_offset"}``."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._reader = _TFRecordReader(path)

    def __next__(self) -> bytes:
        return next(self._reader)

    def get_state(self) -> dict[str, Any]:
        """``{"reader_offset": <byte offset of the next record>}``."""
        return {"reader_offset": self._reader.tell()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to the record starting at ``state["reader_offset"]``."""
        self._reader.seek(int(state["reader_offset"]))
