"""Requests to object storage: one client per bucket and process, retries, one clear error.

Every request goes through :func:`call`, the one retry rule: a reset connection, a 5xx answer
(``503 SlowDown`` included), a timeout or a stalled request (bounded by ``timeout``: the client
cancels it) is tried again with exponential backoff and full jitter, at most ``max_retries``
times (:class:`~grainlite.sources.remote.config.RequestOptions`); a missing object or bucket
raises :class:`~grainlite.errors.RemoteObjectNotFoundError` (a ``FileNotFoundError``) and refused
credentials :class:`~grainlite.errors.RemoteAccessDeniedError` (a ``PermissionError``) at once,
each naming the URL and the fix. The client library (obstore) keeps its own retries off, so the
count a user sets is the count made.

Clients are made per process, on first use: a table keyed by the process id, so a process made
by ``os.fork()`` never uses its parent's connections. obstore's runtime does not survive a fork
once used (a request in the child hangs), so such a child gets an error naming the fix instead
of a hang; grainlite's own workers are new interpreters and make their own clients.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from grainlite._optional import require
from grainlite.errors import (
    GrainliteRuntimeError,
    GrainliteValueError,
    RemoteAccessDeniedError,
    RemoteObjectNotFoundError,
    RemoteReadError,
)
from grainlite.sources.remote.config import Location, StoreSpec, parse_url, split_options

T = TypeVar("T")

COALESCE_BYTES = 64 << 10
"""Ranges of one :func:`read_ranges` call closer than this are fetched by one GET: the bytes
between them cost less than another request."""

_lock = threading.Lock()
_stores: dict[tuple[int, str, str, str], Any] = {}
_used_in: int | None = None  # the pid that made a client (obstore's runtime started there)
_inherited = False  # this process is a fork of one that had used obstore


def _after_fork_in_child() -> None:
    global _inherited
    if _used_in is not None:
        _inherited = True
    _stores.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(frozen=True)
class ObjectInfo:
    """What a HEAD request says of one object: its ``size`` in bytes and its ``etag``."""

    size: int
    etag: str


def store_of(url: Any, storage_options: dict[str, Any] | None = None) -> tuple[Any, str, StoreSpec]:
    """The client of ``url``'s bucket made in this process, the object's key, and the settings."""
    location = parse_url(url)
    spec = split_options(location.scheme, storage_options)
    return _store(location, spec), location.key, spec


def _store(location: Location, spec: StoreSpec) -> Any:
    global _used_in
    if _inherited:
        raise GrainliteRuntimeError(
            f"Cannot read {location.url!r} in a process made by os.fork() from one that had "
            f"already read object storage: obstore's runtime does not survive a fork (a request "
            f"would hang). Start such processes with multiprocessing's 'spawn' or 'forkserver' "
            f"method, or read the bucket only after the fork."
        )
    key = (os.getpid(), location.scheme, location.bucket, spec.key())
    store = _stores.get(key)
    if store is None:
        with _lock:
            store = _stores.get(key)
            if store is None:
                store = _stores[key] = _make_store(location, spec)
                _used_in = os.getpid()
    return store


def _make_store(location: Location, spec: StoreSpec) -> Any:
    stores = require("obstore.store", "remote", f"Reading {location.scheme}:// URLs")
    client = dict(spec.client)
    client["timeout"] = timedelta(seconds=spec.request.timeout)
    client["connect_timeout"] = timedelta(seconds=spec.request.connect_timeout)
    kwargs: dict[str, Any] = {
        "config": dict(spec.config),
        "client_options": client,
        "retry_config": {"max_retries": 0},  # call() retries, so the count is the user's
    }
    try:
        if location.scheme == "s3":
            if spec.profile is not None:
                boto3 = require("boto3", "remote", f"The AWS profile {spec.profile!r}")
                provider = require("obstore.auth.boto3", "remote", "AWS profiles")
                kwargs["credential_provider"] = provider.Boto3CredentialProvider(
                    boto3.Session(profile_name=spec.profile)
                )
            return stores.S3Store(location.bucket, **kwargs)
        return stores.GCSStore(location.bucket, **kwargs)
    except (ValueError, TypeError, require("obstore.exceptions", "remote", "").BaseError) as error:
        raise GrainliteValueError(
            f"Could not set up a client for {location.url!r} with the storage options "
            f"{sorted(spec.config)!r:.200} ({str(error).splitlines()[0]:.200}); pass obstore's "
            f"setting names (e.g. 'endpoint', 'region', 'access_key_id') or fsspec's "
            f"('endpoint_url', 'key', 'secret')."
        ) from None


def call(what: str, url: str, spec: StoreSpec, request: Callable[[], T]) -> T:
    """``request()``, retried on transient failures; ``what`` names it in errors (``"GET"``)."""
    exceptions = require("obstore.exceptions", "remote", f"Reading {url}")
    options = spec.request
    attempt = 0
    while True:
        try:
            return request()
        except FileNotFoundError as error:
            raise _not_found(url, error) from None
        except (exceptions.PermissionDeniedError, exceptions.UnauthenticatedError) as error:
            raise _denied(url, error) from None
        except (
            exceptions.InvalidPathError,
            exceptions.NotSupportedError,
            exceptions.UnknownConfigurationKeyError,
        ) as error:
            raise GrainliteValueError(
                f"object storage refused the {what} of {url!r}: {_first_line(error)}; check the "
                f"URL and the storage options."
            ) from None
        except Exception as error:
            text = str(error)
            if " 403 " in text or " 401 " in text:
                raise _denied(url, error) from None
            rejected = _rejected_status(text)
            if rejected is not None:
                raise GrainliteValueError(
                    f"object storage refused the {what} of {url!r} with {rejected} "
                    f"({_first_line(error)}); asking again would be refused again, so it was not "
                    f"retried: check the URL, the storage options and that this store supports "
                    f"the request."
                ) from None
            if attempt >= options.max_retries:
                raise RemoteReadError(
                    f"The {what} of {url!r} failed {attempt + 1} times (last: "
                    f"{_first_line(error)}); the store is unreachable or failing. Check the "
                    f"endpoint and the network, or allow more retries with storage_options="
                    f"{{'max_retries': {2 * max(1, options.max_retries)}}}."
                ) from error
            time.sleep(random.uniform(0, min(options.max_backoff, options.backoff * 2**attempt)))
            attempt += 1


# A 4xx answer that a new try cannot change (the request itself is refused): 400 Bad Request,
# 405, 409, 411-416, 422 ... 408 Request Timeout and 429 Too Many Requests are retried; 401, 403
# and 404 have errors of their own.
# obstore says "... status code: 400 Bad Request: <body>"; a text without it is retried as before.
_STATUS = re.compile(r"\bstatus(?: code)?:? (?P<status>(?P<code>4\d\d) [A-Z][A-Za-z' -]*[A-Za-z])")
_RETRIED_4XX = frozenset({"401", "403", "404", "408", "429"})


def _rejected_status(text: str) -> str | None:
    """The status (e.g. ``"400 Bad Request"``) of an answer that refuses the request itself,
    found in obstore's error text; None for any other failure."""
    for found in _STATUS.finditer(text):
        if found["code"] not in _RETRIED_4XX:
            return found["status"]
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


def _not_found(url: str, error: BaseException) -> RemoteObjectNotFoundError:
    variable = "AWS_ENDPOINT_URL" if parse_url(url).scheme == "s3" else "STORAGE_EMULATOR_HOST"
    return RemoteObjectNotFoundError(
        f"No object at {url!r} ({_first_line(error)}): check the bucket and the key (list them "
        f"with grainlite.sources.remote.list_glob), and that the endpoint is the store that "
        f"holds them ({variable} or storage_options={{'endpoint_url': ...}})."
    )


def _denied(url: str, error: BaseException) -> RemoteAccessDeniedError:
    return RemoteAccessDeniedError(
        f"Object storage refused the credentials for {url!r} ({_first_line(error)}): set "
        f"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) for s3://, Google's "
        f"application default credentials for gs://, or pass them in storage_options, with "
        f"read access to this bucket."
    )


def object_info(url: str, storage_options: dict[str, Any] | None = None) -> ObjectInfo:
    """The size and ETag of the object at ``url`` (one HEAD request)."""
    obstore = require("obstore", "remote", f"Reading {url}")
    store, key, spec = store_of(url, storage_options)
    meta = call("HEAD", url, spec, lambda: obstore.head(store, key))
    return ObjectInfo(int(meta["size"]), str(meta.get("e_tag") or ""))


def object_size(url: str, storage_options: dict[str, Any] | None = None) -> int:
    """The size in bytes of the object at ``url``."""
    return object_info(url, storage_options).size


def read_range(
    url: str, start: int, end: int, storage_options: dict[str, Any] | None = None
) -> memoryview:
    """Bytes ``[start, end)`` of the object at ``url`` (one ranged GET, retried); exactly
    ``end - start`` bytes, or a :class:`~grainlite.errors.RemoteReadError` if the object is
    shorter."""
    if end <= start:
        return memoryview(b"")
    obstore = require("obstore", "remote", f"Reading {url}")
    store, key, spec = store_of(url, storage_options)

    def get() -> memoryview:
        data = memoryview(obstore.get_range(store, key, start=start, end=end))
        if data.nbytes != end - start:
            raise OSError(f"short read: {data.nbytes} of {end - start} bytes")
        return data

    return call("GET", url, spec, get)


def read_ranges(
    url: str, ranges: Sequence[tuple[int, int]], storage_options: dict[str, Any] | None = None
) -> list[memoryview]:
    """Bytes ``[start, end)`` of the object at ``url`` for each of ``ranges``, fetched
    concurrently (ranges closer than :data:`COALESCE_BYTES` share a GET), retried as a whole;
    exactly the bytes asked for, or a :class:`~grainlite.errors.RemoteReadError`."""
    if not ranges:
        return []
    obstore = require("obstore", "remote", f"Reading {url}")
    store, key, spec = store_of(url, storage_options)
    starts = [start for start, _ in ranges]
    ends = [end for _, end in ranges]

    def get() -> list[memoryview]:
        parts = obstore.get_ranges(store, key, starts=starts, ends=ends, coalesce=COALESCE_BYTES)
        views = [memoryview(part) for part in parts]
        for view, start, end in zip(views, starts, ends):
            if view.nbytes != end - start:
                raise OSError(f"short read: {view.nbytes} of {end - start} bytes")
        return views

    return call("GET", url, spec, get)


def read_edges(
    url: str, head: int, tail: int, storage_options: dict[str, Any] | None = None
) -> tuple[ObjectInfo, memoryview, memoryview]:
    """The object's size and ETag, its first ``head`` bytes and its last ``tail`` bytes (fewer
    where the object is shorter), from two GETs at once that also say the size and ETag: one round
    trip instead of a HEAD and then the GETs. An empty object (which no range fits) gives size 0
    and no bytes, its ETag from a HEAD."""
    obstore = require("obstore", "remote", f"Reading {url}")
    store, key, spec = store_of(url, storage_options)

    def get(edge: dict[str, Any] | tuple[int, int]) -> tuple[ObjectInfo, memoryview]:
        def request() -> tuple[ObjectInfo, memoryview]:
            try:
                result = obstore.get(store, key, options={"range": edge})
            except Exception as error:
                if " 416 " in str(error):  # no byte to give: the object is empty
                    return ObjectInfo(0, str(obstore.head(store, key).get("e_tag") or "")), (
                        memoryview(b"")
                    )
                raise
            meta = result.meta
            return ObjectInfo(int(meta["size"]), str(meta.get("e_tag") or "")), memoryview(
                result.bytes()
            )

        return call("GET", url, spec, request)

    for _ in range(3):  # the object is replaced between the two GETs: ask again
        with ThreadPoolExecutor(1, "grainlite-edges") as pool:
            first = pool.submit(get, (0, max(1, head)))
            info, last = get({"suffix": max(1, tail)})
            head_info, start = first.result()
        if head_info == info:
            return info, start[:head], last[-tail:] if tail else memoryview(b"")
    raise RemoteReadError(
        f"{url!r} changed while it was read (its ETag differed between two reads, three times); "
        f"read it when no job writes it."
    )


def list_glob(pattern: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The URLs of the objects matching ``pattern``, sorted.

    ``*``, ``?`` and ``[...]`` match within one path segment (as :func:`glob.glob`); a pattern
    without them lists the one object if it exists (an empty list if not).
    """
    import fnmatch

    obstore = require("obstore", "remote", f"Listing {pattern}")
    location = parse_url(pattern)
    store, _, spec = store_of(pattern, storage_options)
    key = location.key
    wild = min((key.index(c) for c in "*?[" if c in key), default=len(key))
    prefix = key[: key.rfind("/", 0, wild) + 1]  # the folder listed: obstore lists whole segments
    parts = key.split("/")

    def listing() -> list[str]:
        found = []
        for batch in obstore.list(store, prefix=prefix or None):
            for meta in batch:
                path = str(meta["path"])
                names = path.split("/")
                if len(names) == len(parts) and all(
                    fnmatch.fnmatchcase(name, part) for name, part in zip(names, parts)
                ):
                    found.append(f"{location.scheme}://{location.bucket}/{path}")
        return found

    return sorted(call("LIST", pattern, spec, listing))


def write_bytes(url: str, data: bytes, storage_options: dict[str, Any] | None = None) -> None:
    """Stores ``data`` as the object at ``url`` (replacing it; one PUT, retried)."""
    obstore = require("obstore", "remote", f"Writing {url}")
    store, key, spec = store_of(url, storage_options)
    call("PUT", url, spec, lambda: obstore.put(store, key, data))


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
                raise _not_found(self.url, error) from None
            text = str(error)
            if " 403 " in text or " 401 " in text or "Permission" in type(error).__name__:
                raise _denied(self.url, error) from None
            raise RemoteReadError(
                f"Writing {self.url!r} failed ({_first_line(error)}); nothing was stored: write "
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
