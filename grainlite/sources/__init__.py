"""Data sources: random access to records by key, as Grain's DataLoader reads them.

``RangeDataSource`` (integers, no storage), ``ArrayRecordDataSource`` (ArrayRecord files),
``InMemoryDataSource`` (plain values in shared memory, mapped by every worker; also called
``SharedMemoryDataSource``), and the ``RandomAccessDataSource`` protocol any other source meets.
"""

from __future__ import annotations

from grainlite.sources.array_record import ArrayRecordDataSource
from grainlite.sources.in_memory import InMemoryDataSource, SharedMemoryDataSource
from grainlite.sources.protocol import (
    RandomAccessDataSource,
    RecordKeyOutOfRangeError,
    read_many,
    source_repr,
)
from grainlite.sources.range import RangeArgumentError, RangeDataSource

__all__ = [
    "ArrayRecordDataSource",
    "InMemoryDataSource",
    "RandomAccessDataSource",
    "RangeArgumentError",
    "RangeDataSource",
    "RecordKeyOutOfRangeError",
    "SharedMemoryDataSource",
    "read_many",
    "source_repr",
]
