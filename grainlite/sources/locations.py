"""Local paths and object-store URLs behind one small set of file operations.

What a dataset node or a tool that takes a path asks, so that none of them knows about buckets:
each function does the local thing for a local path and goes through the object-store client
(:mod:`grainlite.sources.remote`) for an ``s3://`` or ``gs://`` URL. A URL's folder is its key
prefix: ``join("s3://b/data", "x")`` is ``"s3://b/data/x"``.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, BinaryIO

from grainlite.sources.remote import is_remote, list_glob, object_size, open_read, open_write

__all__ = [
    "basename",
    "dirname",
    "download",
    "glob_children",
    "is_remote",
    "join",
    "open_binary",
    "size",
    "upload",
]

# Bytes per request when a whole object is copied (an upload part, a download read).
_COPY_BYTES = 8 << 20


def open_binary(
    path: str, storage_options: dict[str, Any] | None = None, buffer_size: int = 1 << 20
) -> BinaryIO:
    """``path`` opened for reading bytes: a local file, or an object read with ranged GETs.

    A missing file or object raises FileNotFoundError here, naming it.
    """
    if is_remote(path):
        return open_read(path, storage_options, buffer_size)  # type: ignore[return-value]
    return open(path, "rb")  # the caller closes it


def join(folder: str, name: str) -> str:
    """``name`` inside ``folder`` (a local folder, or a URL's key prefix)."""
    if is_remote(folder):
        return folder.rstrip("/") + "/" + name
    return os.path.join(folder, name)


def dirname(path: str) -> str:
    """The folder that holds ``path``: an absolute local folder, or a URL's prefix."""
    if is_remote(path):
        return path.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(path))


def basename(path: str) -> str:
    """The last part of ``path`` (a URL's last key segment)."""
    if is_remote(path):
        return path.rstrip("/").rsplit("/", 1)[-1]
    return os.path.basename(path)


def size(path: str, storage_options: dict[str, Any] | None = None) -> int:
    """The size in bytes of a file or object (FileNotFoundError if there is none)."""
    if is_remote(path):
        return object_size(path, storage_options)
    return os.path.getsize(path)


def glob_children(
    folder: str, pattern: str, storage_options: dict[str, Any] | None = None
) -> list[str]:
    """The sorted paths of ``folder``'s direct children whose names match ``pattern`` (glob)."""
    if is_remote(folder):
        return list_glob(join(folder, pattern), storage_options)
    import glob

    return sorted(glob.glob(os.path.join(glob.escape(folder), pattern)))


def upload(local_file: str, url: str, storage_options: dict[str, Any] | None = None) -> None:
    """Stores the local file ``local_file`` as the object ``url`` (streamed, in parts)."""
    with open(local_file, "rb") as source, open_write(url, storage_options) as target:
        shutil.copyfileobj(source, target, _COPY_BYTES)


def download(url: str, local_file: str, storage_options: dict[str, Any] | None = None) -> None:
    """Copies the object ``url`` into the local file ``local_file``."""
    with open_read(url, storage_options, _COPY_BYTES) as source, open(local_file, "wb") as target:
        shutil.copyfileobj(source, target, _COPY_BYTES)
