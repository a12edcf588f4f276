"""Data sources: random access to records by key, as Grain's DataLoader reads them.

``RangeDataSource`` (integers, no storage), ``ArrayRecordDataSource`` (ArrayRecord files),
``InMemoryDataSource`` (plain values in shared memory, mapped by every worker; also called
``SharedMemoryDataSource``), and the ``RandomAccessDataSource`` protocol any other source meets.

Each name is imported on first use: a pipeline over a list or a range never imports the
ArrayRecord and object-storage modules (about 15 ms at its start), only the modules it uses.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from grainlite.sources.array_record import ArrayRecordDataSource
    from grainlite.sources.in_memory import InMemoryDataSource, SharedMemoryDataSource
    from grainlite.sources.protocol import (
        RandomAccessDataSource,
        RecordKeyOutOfRangeError,
        read_many,
        source_repr,
    )
    from grainlite.sources.range import RangeArgumentError, RangeDataSource

_WHERE = {
    "ArrayRecordDataSource": "grainlite.sources.array_record",
    "InMemoryDataSource": "grainlite.sources.in_memory",
    "RandomAccessDataSource": "grainlite.sources.protocol",
    "RangeArgumentError": "grainlite.sources.range",
    "RangeDataSource": "grainlite.sources.range",
    "RecordKeyOutOfRangeError": "grainlite.sources.protocol",
    "SharedMemoryDataSource": "grainlite.sources.in_memory",
    "read_many": "grainlite.sources.protocol",
    "source_repr": "grainlite.sources.protocol",
}

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


def __getattr__(name: str) -> _typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'grainlite.sources' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
