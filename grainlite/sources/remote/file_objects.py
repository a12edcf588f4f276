"""An object as a Python binary file: :func:`open_read` (a seekable reader whose reads are
ranged GETs) and :func:`open_write` (a writer that stores the object on close, nothing after an
error), for code that wants a file rather than bytes: :mod:`grainlite.sources.locations` opens
TFRecord and Parquet objects with them and copies objects to and from local files.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

from grainlite._optional import require
from grainlite.errors import RemoteReadError
from grainlite.sources.remote.objects import object_size, read_range
from grainlite.sources.remote.stores import (
    access_denied_error,
    call,
    first_line,
    not_found_error,
    store_of,
)


class RemoteReader(io.RawIOBase):
    """A read-only, seekable file over one object: each ``readinto`` is one ranged GET.

    Wrap it in :class:`io.BufferedReader` (as :func:`open_read` does) for small reads.
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.url = url
        self._options = storage_options
        self.size = object_size(url, storage_options)  # a missing object fails here, once
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        end = min(self.size, self._position + view.nbytes)
        if end <= self._position:
            return 0
        data = read_range(self.url, self._position, end, self._options)
        view[: data.nbytes] = data
        self._position = end
        return data.nbytes


def open_read(
    url: str, storage_options: dict[str, Any] | None = None, buffer_size: int = 1 << 20
) -> io.BufferedReader:
    """The object at ``url`` as a read-only, seekable binary file (ranged GETs, retried).

    Raises RemoteObjectNotFoundError (a FileNotFoundError) at once if there is no object.
    """
    return io.BufferedReader(RemoteReader(url, storage_options), buffer_size=buffer_size)


class RemoteWriter(io.RawIOBase):
    """A write-only binary file storing an object when closed (a multipart upload beyond
    ``buffer_size``); nothing is stored if it is closed after an error in a ``with`` block."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__()
        obstore = require("obstore", "remote", f"Writing {url}")
        store, key, self._spec = store_of(url, storage_options)
        self.url = url
        self._file = call("PUT", url, self._spec, lambda: obstore.open_writer(store, key))
        self._failed = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._guard(lambda: self._file.write(view))
        return view.nbytes

    def _guard(self, step: Callable[[], Any]) -> Any:
        try:
            return step()
        except Exception as error:
            self._failed = True
            if isinstance(error, FileNotFoundError):
                raise not_found_error(self.url, error) from None
            text = str(error)
            if " 403 " in text or " 401 " in text or "Permission" in type(error).__name__:
                raise access_denied_error(self.url, error) from None
            raise RemoteReadError(
                f"Writing {self.url!r} failed ({first_line(error)}); nothing was stored: write "
                f"the object again."
            ) from error

    def close(self) -> None:
        if not self.closed:
            try:
                if self._failed:  # obstore's writer leaves an upload left by an error unstored
                    error = RuntimeError("write abandoned")
                    with contextlib.suppress(Exception):
                        self._file.__exit__(RuntimeError, error, None)
                else:
                    self._guard(self._file.close)
            finally:
                super().close()

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is not None:
            self._failed = True
        self.close()


def open_write(url: str, storage_options: dict[str, Any] | None = None) -> RemoteWriter:
    """A binary file that stores what is written to it as the object at ``url`` on close."""
    return RemoteWriter(url, storage_options)
