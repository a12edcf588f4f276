"""How the paths given to an ``ArrayRecordDataSource`` become files to read.

A path is a file, a ``file[start:end]`` slice, a FileInstruction or (remote) a glob; each file is
opened once when the source is built, in parallel, to count its records and check it, so that a
missing, truncated or foreign file fails there, with an error naming it and the fix, and not at
the first read. Remote files are inspected from their head and index tail alone
(:mod:`grainlite.sources.remote.files`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from grainlite.errors import CorruptedDataError, GrainliteTypeError, GrainliteValueError
from grainlite.sources.remote.config import is_remote

DEFAULT_OPTIONS = {"readahead_buffer_size": "0"}
"""Random-access reader defaults, as array_record's own data source uses; ``reader_options``
override them."""
_SLICED = re.compile(r"(.*)\[(\d+):(\d+)\]")


def array_record_module() -> Any:
    """array_record's reader module (a core dependency, imported at first use: cheap imports)."""
    from array_record.python import array_record_module  # A core dependency, loaded at use.

    return array_record_module


@dataclass(frozen=True)
class File:
    """The records ``[start, end)`` of one file that holds ``records`` records; ``blob``: the
    object of a remote file (read from the cache), None for a local one; ``group_size``: the
    records per chunk it was written with (0 where its options do not say)."""

    path: str
    start: int
    end: int
    records: int
    blob: Any = None
    group_size: int = 0


def written_group_size(writer_options: str) -> int | None:
    """The records per chunk an ArrayRecord file's writer options (``writer_options_string()``)
    name, or None where they name none."""
    group = re.search(r"group_size:(\d+)", writer_options)
    return int(group[1]) if group else None


def check_reader_options(reader_options: Any) -> dict[str, str]:
    """``reader_options`` as a dict of str to str, or the error naming what is accepted."""
    if reader_options is None:
        return {}
    if not isinstance(reader_options, dict):
        raise GrainliteTypeError(
            f"ArrayRecordDataSource reader_options must be a dict of option names to values (got "
            f"{type(reader_options).__name__} {reader_options!r}); pass e.g. "
            f"{{'readahead_buffer_size': '0'}}."
        )
    return {str(key): str(value) for key, value in reader_options.items()}


def _is_file_instruction(path: Any) -> bool:
    return all(hasattr(path, name) for name in ("filename", "skip", "take"))


def _entry(path: Any, where: str) -> tuple[str, int | None, int | None]:
    """``(file, start, end)`` of one path; None bounds mean the whole file."""
    if _is_file_instruction(path):
        return os.fspath(path.filename), int(path.skip), int(path.skip) + int(path.take)
    if isinstance(path, (str, os.PathLike)):
        text = os.fspath(path)
        if isinstance(text, str):
            sliced = _SLICED.fullmatch(text)
            if sliced:
                return sliced[1], int(sliced[2]), int(sliced[3])
            return text, None, None
    raise GrainliteValueError(
        f"ArrayRecordDataSource paths must be str or os.PathLike paths or FileInstructions "
        f"(got {type(path).__name__} {path!r}{where}); pass a path such as 'data.array_record' "
        f"or a list of them."
    )


def as_entries(
    paths: Any, storage_options: dict[str, Any] | None = None
) -> list[tuple[str, int | None, int | None]]:
    """``(file, start, end)`` of each of ``paths`` (one path or a sequence of them), remote
    patterns expanded to the objects they match, in sorted order."""
    if isinstance(paths, (str, os.PathLike)) or _is_file_instruction(paths):
        entries = [_entry(paths, "")]
    elif not isinstance(paths, Sequence) or isinstance(paths, bytes):
        entries = [_entry(paths, "")]  # Raises the error naming what is accepted.
    elif len(paths) == 0:
        raise GrainliteValueError(
            f"ArrayRecordDataSource paths must not be empty (got {paths!r}); pass one ArrayRecord "
            f"file or a list of them, e.g. sorted(glob.glob('data-*.array_record'))."
        )
    else:
        entries = [_entry(path, f" at position {i}") for i, path in enumerate(paths)]
    if not any(is_remote(path) for path, _, _ in entries):
        return entries
    from grainlite.sources.remote.files import expand

    expanded: list[tuple[str, int | None, int | None]] = []
    for path, start, end in entries:  # a remote pattern lists the bucket, in sorted order
        if is_remote(path) and start is None:
            expanded += [(url, None, None) for url in expand(path, storage_options)]
        else:
            expanded.append((path, start, end))
    return expanded


def portable_repr(files: list[File]) -> str:
    """The repr naming files by their names, slices and record counts, not their folder or
    bucket: the same for a bucket's files and their local copies."""
    digest = hashlib.sha1()
    for file in files:
        name = file.path.rstrip("/").rsplit("/", 1)[-1]
        digest.update(f"{name}[{file.start}:{file.end}]/{file.records}\n".encode())
    return f"ArrayRecordDataSource(hash_of_files={digest.hexdigest()})"


def open_reader(path: str, options: str, name: str | None = None) -> Any:
    """An open reader of ``path``, or the error saying why there cannot be one (naming ``name``,
    the remote file's URL, where ``path`` is its local copy)."""
    try:
        return _open_named(path, options)
    except Exception as error:
        if name is None or path not in str(error):
            raise
        raise type(error)(str(error).replace(path, name)) from None


def _open_named(path: str, options: str) -> Any:
    module = array_record_module()
    try:
        # array_record's default file buffer: a 32 KiB one made every random read of a small
        # record cost twice as much (measured 150k against 290k reads/s on 16-byte records).
        reader = module.ArrayRecordReader(path, options=options)
    except ValueError as error:
        raise GrainliteValueError(
            f"array_record refused the reader options {options!r} ({error}); pass reader_options "
            f"with names it lists."
        ) from None
    except RuntimeError as error:  # Releases that check the file when the reader is made.
        raise _open_error(path, str(error)) from None
    if reader.ok():
        return reader
    try:
        reader.read([0])  # A reader that failed to open reports why on its first read.
    except RuntimeError as error:
        raise _open_error(path, str(error)) from None
    raise CorruptedDataError(
        f"Could not open {path!r}: array_record cannot read its index (the file ends early, or "
        f"is not an ArrayRecord file). A file copied or written by a job that stopped is "
        f"truncated: copy or write it again; convert other formats first."
    )


def corrupted_record_error(path: str, key: int, position: int, error: Exception) -> Exception:
    """The error for a record that cannot be read back: names the file, the record and the fix."""
    return CorruptedDataError(
        f"Could not read record {key} of the data source (record {position} of file {path!r}): "
        f"{error}. The file is damaged (truncated, overwritten or changed while open): copy or "
        f"write it again, and check it with `python -m grainlite inspect --verify {path}`."
    )


def _open_error(path: str, message: str) -> Exception:
    if "Corrupted" in message:
        return CorruptedDataError(
            f"Could not open {path!r}: it is not a complete ArrayRecord file ({message}). A "
            f"file copied or written by a job that stopped is truncated: copy or write it again."
        )
    if "No such file or directory" in message:
        return FileNotFoundError(
            errno.ENOENT,
            f"ArrayRecordDataSource found no file at {path!r}: check the path, and expand globs "
            f"first with sorted(glob.glob(pattern))",
        )
    return GrainliteValueError(
        f"Could not open {path!r} as an ArrayRecord file ({message}); pass files written by "
        f"array_record's ArrayRecordWriter, e.g. ArrayRecordWriter(path, 'group_size:1')."
    )


def _inspect(
    entry: tuple[str, int | None, int | None],
    options: str,
    keep: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> tuple[File, Any, Any]:
    """The records to read from one path (with the group size its file was written with), its
    open reader if ``keep`` (else None) and, for a remote file, the head and tail its index was
    read from (else None)."""
    path, start, end = entry
    blob = edges = None
    if is_remote(path):
        from grainlite.sources.remote.files import inspect_file

        blob, reader, edges = inspect_file(
            path, options, lambda local, opts: open_reader(local, opts, name=path), storage_options
        )
        keep = False  # a reader of the index alone: the data is read from the cache
    else:
        reader = open_reader(path, options)
    try:
        count = reader.num_records()
        written_with = reader.writer_options_string() or ""
    except BaseException:
        reader.close()
        raise
    if not keep:
        reader.close()
        reader = None
    start = 0 if start is None else start
    end = count if end is None else end
    if not 0 <= start <= end <= count:
        raise GrainliteValueError(
            f"ArrayRecordDataSource slice [{start}:{end}] of {path!r} runs past its {count} "
            f"records; pass bounds with 0 <= start <= end <= {count}."
        )
    group_size = written_group_size(written_with) or 0
    return File(path, start, end, count, blob, group_size), reader, edges


def resolve(
    entries: list[tuple[str, int | None, int | None]],
    options: str,
    storage_options: dict[str, Any] | None = None,
) -> tuple[list[File], Any, dict[int, Any]]:
    """Opens every file once (in parallel when there are several) to count and check it.

    Returns the files; for a single file, its reader, kept open: opening a large file reads
    its index, which the first read in this process would otherwise pay again; and the head and
    tail each remote file's index was read from, by file index, where there are at most
    :data:`~grainlite.sources.remote.first_copies.MAX_FILES` files (a first copy starts from
    them; more files would hold too many bytes), else none.
    """
    if len(entries) == 1:
        results = [_inspect(entries[0], options, True, storage_options)]
    else:
        with ThreadPoolExecutor(min(16, len(entries))) as pool:
            results = list(
                pool.map(lambda entry: _inspect(entry, options, False, storage_options), entries)
            )
    for file, _, _ in results:
        if file.group_size > 1:
            warnings.warn(
                f"{file.path!r} was written with group_size:{file.group_size}, so every random "
                f"read decodes a group of {file.group_size} records; rewrite it with "
                f"ArrayRecordWriter(path, 'group_size:1') for fast random access.",
                stacklevel=4,
            )
    edges: dict[int, Any] = {}
    if any(file.blob is not None for file, _, _ in results):
        from grainlite.sources.remote.first_copies import MAX_FILES

        if len(results) <= MAX_FILES:
            edges = {i: result[2] for i, result in enumerate(results) if result[2] is not None}
    return [file for file, _, _ in results], results[0][1], edges
