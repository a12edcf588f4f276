"""The requests grainlite makes of objects in a store: an object's size and ETag, ranged reads
(one range, many at once, or both ends of an object in one round trip), glob listing, and writes.

Each is one request (or a few at once) made through
:func:`~grainlite.sources.remote.stores.call`, so each is retried and fails with the same clear
errors; the seekable file objects built on them are in
:mod:`grainlite.sources.remote.file_objects`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from grainlite._optional import require
from grainlite.errors import RemoteReadError
from grainlite.sources.remote.config import parse_url
from grainlite.sources.remote.stores import NotRetried, call, store_of

T = TypeVar("T")

COALESCE_BYTES = 64 << 10
"""Ranges of one :func:`read_ranges` call closer than this are fetched by one GET: the bytes
between them cost less than another request."""

STREAM_CHUNK_BYTES = 1 << 20
"""The size of the chunks :func:`stream_range` hands on as they arrive (the last may be smaller):
a download written chunk by chunk keeps pace with the network, where a part written once whole
waits for its last byte (on this project's 2-core machine, writing the 8 MiB parts that arrived
together at the end of a dataset's download took about 0.1 s more)."""


@dataclass(frozen=True)
class ObjectInfo:
    """What a HEAD request says of one object: its ``size`` in bytes and its ``etag``."""

    size: int
    etag: str


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


def stream_range(
    url: str,
    start: int,
    end: int,
    consume: Callable[[Iterator[memoryview]], T],
    storage_options: dict[str, Any] | None = None,
) -> T:
    """``consume(chunks)``: bytes ``[start, end)`` of the object at ``url`` (one ranged GET) in
    chunks of :data:`STREAM_CHUNK_BYTES` given as they arrive; its result.

    A transfer that fails (or gives more or fewer bytes than asked) is retried as
    :func:`~grainlite.sources.remote.stores.call` retries any request, and ``consume`` is then
    called again with the new transfer's chunks from ``start``: it must start over (write at
    offsets, recompute a checksum). An error ``consume`` raises itself is raised as it is, never
    retried. ``consume`` must take every chunk.
    """
    if end <= start:
        return consume(iter(()))
    obstore = require("obstore", "remote", f"Reading {url}")
    store, key, spec = store_of(url, storage_options)

    def get() -> T:
        result = obstore.get(store, key, options={"range": (start, end)})
        transfer = _Transfer(iter(result.stream(min_chunk_size=STREAM_CHUNK_BYTES)), end - start)
        try:
            value = consume(transfer)
        except Exception as error:
            if error is transfer.failure:
                raise  # the store's or the network's: retried
            raise NotRetried(error) from error
        if transfer.received != end - start:
            raise OSError(f"short read: {transfer.received} of {end - start} bytes")
        return value

    return call("GET", url, spec, get)


class _Transfer:
    """The chunks of one ranged GET, counted; remembers the error the transfer raised, so that
    :func:`stream_range` tells it from an error of its consumer."""

    def __init__(self, stream: Iterator[Any], expected: int) -> None:
        self._stream = stream
        self.expected = expected
        self.received = 0
        self.failure: BaseException | None = None

    def __iter__(self) -> _Transfer:
        return self

    def __next__(self) -> memoryview:
        try:
            chunk = memoryview(next(self._stream))
        except StopIteration:
            raise
        except Exception as error:
            self.failure = error
            raise
        self.received += chunk.nbytes
        if self.received > self.expected:
            self.failure = OSError(f"long read: more than the {self.expected} bytes asked")
            raise self.failure
        return chunk


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
