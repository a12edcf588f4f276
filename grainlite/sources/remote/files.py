"""What a source needs to know of remote files before it reads them: globs expanded, and each
file's size, ETag and record count, without downloading the files.

array_record's reader reads a file's index from its end (google/array_record#120: it needs a local
file). :func:`count_records` fetches the file's first block and its tail into a *sparse* local
file of the object's size (the holes take no disk), opens the reader on it to ask the record
count and writer options, and makes the tail four times longer until the index fits. The data
itself is fetched later, whole, into the cache (:mod:`grainlite.sources.remote.cache`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from grainlite.errors import RemoteObjectNotFoundError
from grainlite.sources.remote.cache_blocks import Blob, write_at
from grainlite.sources.remote.objects import list_glob, object_info, read_edges, read_ranges

HEAD_BYTES = 64 << 10
"""The file's first block: riegeli's file signature."""
FIRST_TAIL = 256 << 10
"""The first tail fetched for a file's index (that of 20k records fits in it, measured); made
four times longer until the index fits."""


def expand(url: str, storage_options: dict[str, Any] | None) -> list[str]:
    """``url`` itself, or the sorted URLs its ``*``, ``?`` or ``[...]`` pattern matches."""
    if not any(char in url for char in "*?["):
        return [url]
    found = list_glob(url, storage_options)
    if not found:
        raise RemoteObjectNotFoundError(
            f"The pattern {url!r} matches no object: check the bucket, the folder and the "
            f"pattern (it matches within one path segment, as glob.glob does), and the endpoint."
        )
    return found


def blob_of(url: str, storage_options: dict[str, Any] | None) -> Blob:
    """The cache entry of ``url``: its size and ETag (one HEAD request)."""
    info = object_info(url, storage_options)
    return Blob(url, info.size, info.etag)


def inspect_file(
    url: str, options: str, open_reader: Callable[[str, str], Any], storage_options: Any
) -> tuple[Blob, Any, tuple[memoryview, memoryview]]:
    """``url``'s cache entry, an array_record reader of its index (see :func:`count_records`)
    and the edges it was read from: the file's first :data:`HEAD_BYTES` and last
    :data:`FIRST_TAIL` bytes (fewer where it is shorter), which a first copy of the file starts
    from (:mod:`grainlite.sources.remote.first_copies`). The first round trip fetches the head
    and the tail at once, and their answers give the size and ETag (no HEAD request)."""
    info, head, tail = read_edges(url, HEAD_BYTES, FIRST_TAIL, storage_options)
    blob = Blob(url, info.size, info.etag)
    reader = count_records(blob, options, open_reader, storage_options, (head, tail))
    return blob, reader, (head, tail)


def count_records(
    blob: Blob,
    options: str,
    open_reader: Callable[[str, str], Any],
    storage_options: Any,
    edges: tuple[memoryview, memoryview] | None = None,
) -> Any:
    """An array_record reader opened on a sparse copy of ``blob``'s head and tail, for its record
    count and writer options only (reading a record from it is an error). ``open_reader(path,
    options)`` opens it and raises grainlite's error if the file is not an ArrayRecord file.
    ``edges``: the head and the first tail, already fetched.

    The sparse copy is removed at once (the open reader keeps it while open)."""
    tail = FIRST_TAIL
    while True:
        tail = min(tail, blob.size)
        with tempfile.NamedTemporaryFile(prefix="grainlite-index-", suffix=".array_record") as f:
            fd = f.fileno()
            os.ftruncate(fd, blob.size)
            head = min(HEAD_BYTES, blob.size)
            ranges = [(0, head)] if head else []
            if tail > head:
                ranges.append((blob.size - tail, blob.size))
            if edges is not None:  # the first round: fetched with the object's size
                parts, edges = [edges[0][:head], edges[1]], None
            else:
                parts = read_ranges(blob.url, ranges, storage_options)
            for (start, _), data in zip(ranges, parts):
                write_at(fd, start, data)
            try:
                reader = open_reader(f.name, options)
            except Exception:
                if tail >= blob.size:
                    raise
            else:
                if reader.num_records() or tail >= blob.size:
                    return reader
                reader.close()  # no records, the file longer than the tail: a longer tail
        tail *= 4
