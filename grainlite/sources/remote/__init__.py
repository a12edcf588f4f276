"""Object storage (``s3://``, ``gs://`` and S3-compatible stores) for grainlite's sources.

The functions every source and tool uses to read and write object storage; their signatures stay
stable:

- ``is_remote(path) -> bool``: whether ``path`` is an ``s3://``/``gs://``/``gcs://`` URL.
- ``open_read(url, storage_options=None, buffer_size=1 << 20) -> io.BufferedReader``: a
  seekable binary file whose reads are ranged GETs (retried).
- ``read_range(url, start, end, storage_options=None) -> memoryview``: bytes ``[start, end)``.
- ``list_glob(pattern, storage_options=None) -> list[str]``: the matching URLs, sorted.
- ``object_size(url, storage_options=None) -> int`` and ``object_info(...) -> ObjectInfo``
  (``size``, ``etag``).
- ``write_bytes(url, data, storage_options=None) -> None`` and
  ``open_write(url, storage_options=None) -> RemoteWriter`` (a binary file stored on close).

Credentials and endpoints come from the standard environment variables, overridden by
``storage_options`` (see :mod:`grainlite.sources.remote.config`). A missing object raises
:class:`~grainlite.errors.RemoteObjectNotFoundError` (a ``FileNotFoundError``), refused
credentials :class:`~grainlite.errors.RemoteAccessDeniedError` (a ``PermissionError``), a store
still failing after the retries :class:`~grainlite.errors.RemoteReadError`. The client library
(obstore, ``pip install 'grainlite[remote]'``) is imported on first use, never by
``import grainlite``.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from grainlite.sources.remote.config import RequestOptions, is_remote, parse_url
    from grainlite.sources.remote.file_objects import (
        RemoteReader,
        RemoteWriter,
        open_read,
        open_write,
    )
    from grainlite.sources.remote.objects import (
        ObjectInfo,
        list_glob,
        object_info,
        object_size,
        read_range,
        write_bytes,
    )

# Imported on first use: a local source asks only ``config.is_remote``, and this package's
# other modules (the requests, the file objects) cost several milliseconds to import.
_WHERE = {
    "ObjectInfo": "objects",
    "RemoteReader": "file_objects",
    "RemoteWriter": "file_objects",
    "RequestOptions": "config",
    "is_remote": "config",
    "list_glob": "objects",
    "object_info": "objects",
    "object_size": "objects",
    "open_read": "file_objects",
    "open_write": "file_objects",
    "parse_url": "config",
    "read_range": "objects",
    "write_bytes": "objects",
}

__all__ = [
    "ObjectInfo",
    "RemoteReader",
    "RemoteWriter",
    "RequestOptions",
    "is_remote",
    "list_glob",
    "object_info",
    "object_size",
    "open_read",
    "open_write",
    "parse_url",
    "read_range",
    "write_bytes",
]


def __getattr__(name: str) -> _typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'grainlite.sources.remote' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"grainlite.sources.remote.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
