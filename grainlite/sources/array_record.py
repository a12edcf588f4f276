"""``ArrayRecordDataSource``: the records of ArrayRecord files, their keys concatenated in order.

It is a drop-in for Grain's (and array_record's) class of the same name, with the same repr, so
Grain checkpoints validate against it, and it differs where that makes it faster or safer:

- Readers open lazily in the process that reads and are never pickled; a process that finds
  readers opened by another pid (a fork) opens its own. Reads are thread-safe.
- A single key is read with the reader's range read ``read(k, k + 1)``. array_record's own
  ``__getitem__`` uses the index-list read ``read([k])``, whose fixed cost grows with the file's
  record count (about 0.25 ms per call on a 100k-record file, against about 4 us).
- A batch is read per file as runs of consecutive keys (one range read per run), or with one
  index-list read when the runs are many compared with the file's size (measured crossover).
- It says when big index-list reads pay (``list_read_profile``), so that the readers of both APIs
  read its shuffled keys ahead in blocks of up to 65,536 in a background thread
  (:mod:`grainlite.sources.list_reads`).
- A missing file raises FileNotFoundError when the source is built, not at the first read.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import operator
import os
from collections.abc import Iterator, Sequence
from typing import Any, SupportsIndex

import numpy as np

from grainlite.errors import GrainliteTypeError
from grainlite.sources.array_record_files import (
    DEFAULT_OPTIONS,
    File,
    as_entries,
    check_reader_options,
    corrupted_record_error,
    open_reader,
    portable_repr,
    resolve,
)
from grainlite.sources.array_record_readers import ProcessReaders
from grainlite.sources.distinct import distinct, in_order_of_first
from grainlite.sources.protocol import int64_keys, key_out_of_range
from grainlite.sources.remote.config import is_remote

# One index-list read costs about as much as this many range reads per record in the file
# (measured on 16-byte records: ~2.5 ns per record in the file per call vs ~4 us per range read).
_RUNS_PER_LIST_READ = 256
_INT32_MAX = 2**31 - 1  # The range read takes int32 bounds.


class ArrayRecordDataSource:
    """Random access to the records of ArrayRecord files, as ``bytes``.

    Args:
      paths: one path, or a non-empty sequence of them. A path is a str or ``os.PathLike``, a
        ``"file[start:end]"`` str for part of a file, or a TFDS ``FileInstruction`` (an object
        with ``filename``, ``skip`` and ``take``). Keys run through the files in this order.
      reader_options: array_record reader options, e.g. ``{"readahead_buffer_size": "0"}``; they
        override grainlite's random-access defaults.

      storage_options: settings of object storage for ``s3://`` and ``gs://`` paths (endpoint,
        credentials, retries; see :mod:`grainlite.sources.remote.config`); by default they come
        from the environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` ...).
      cache_dir: where remote files are cached, shared by the processes of this host (default
        ``GRAINLITE_CACHE_DIR`` or ``<temp>/grainlite-cache``).
      cache_limit_bytes: the most bytes the cache folder holds (default: three quarters of its
        file system's free space); at least the largest remote file.

    Remote paths (``s3://bucket/train-*.array_record``: files, lists, globs) give the same keys,
    records and checkpoints as local copies of the files: each file is fetched whole, ahead of
    the reads that need it, into the cache, and read there by array_record's own reader. The
    first worker's first records come sooner, fetched by range (:meth:`prefetch_first_reads`).

    Raises:
      FileNotFoundError: a path names no file (RemoteObjectNotFoundError for a URL).
      PermissionError: object storage refused the credentials (RemoteAccessDeniedError).
      GrainliteValueError: ``paths`` is empty or of the wrong kind, a file is not an ArrayRecord
        file, a slice runs past the end of its file, array_record refuses ``reader_options``,
        or a remote file is larger than ``cache_limit_bytes``.
    """

    def __init__(
        self,
        paths: Any,
        reader_options: dict[str, str] | None = None,
        *,
        storage_options: dict[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit_bytes: int | None = None,
    ) -> None:
        options = dict(DEFAULT_OPTIONS)
        options.update(check_reader_options(reader_options))
        self._options = ",".join(f"{key}:{value}" for key, value in options.items())
        entries = as_entries(paths, storage_options)
        self._cache = None
        if any(is_remote(entry[0]) for entry in entries):
            from grainlite.sources.remote.cache import ShardCache

            self._cache = ShardCache(cache_dir, cache_limit_bytes, storage_options)
        self._files, kept_reader, edges = resolve(entries, self._options, storage_options)
        # The heads and tails the remote files' indexes were read from, kept until the first
        # copies start from them or the source is first read or hinted (see prefetch_first_reads).
        self._edges: dict[int, Any] = edges
        if self._cache is not None:
            self._cache.check_fits([file.blob for file in self._files if file.blob is not None])
        self._paths = [file.path for file in self._files]
        self._ends = list(np.cumsum([file.end - file.start for file in self._files]).tolist())
        self._len = self._ends[-1]
        # Key k of file i is record k + shift[i] of that file.
        self._ends_array = np.asarray(self._ends, dtype=np.int64)
        starts = np.asarray([file.start for file in self._files], dtype=np.int64)
        self._shift = starts - np.r_[0, self._ends_array[:-1]]
        digest = hashlib.sha1()
        for path in self._paths:
            digest.update(path.encode())
        self._portable = portable_repr(self._files)
        if self._cache is None:  # Grain's repr: checkpoints validate against Grain's source
            self._repr = f"ArrayRecordDataSource(hash_of_paths={digest.hexdigest()})"
        else:  # no bucket or host in it: the same files read from local copies validate too
            self._repr = self._portable
        self._first: Any = None  # the first copies a pickling process shared (workers only)
        self._state = ProcessReaders(len(self._files))
        self._state.readers[0] = kept_reader  # None when there are several files

    def checkpoint_aliases(self) -> tuple[str, ...]:
        """The ``data_source`` texts of checkpoints, besides this source's repr, that read the
        same records (:func:`~grainlite.sources.protocol.source_aliases`; ``*`` ends a prefix).

        A state saved reading these files from a bucket (named by their file names, slices and
        record counts) restores reading local copies; one saved reading local files (named by
        Grain's hash of their local paths, which no bucket can recompute) restores reading any
        ArrayRecord files from a bucket, checked by the sampler's record count."""
        if self._cache is None:
            return (self._portable,)
        return ("ArrayRecordDataSource(hash_of_paths=*",)

    @property
    def paths(self) -> list[str]:
        """The file of every path given, in key order (slices and FileInstructions unwrapped)."""
        return list(self._paths)

    def __len__(self) -> int:
        return self._len

    def _process_readers(self) -> ProcessReaders:
        """This process's readers (new ones after a fork: the parent's are not ours to use)."""
        state = self._state
        if state.pid != os.getpid():
            state = self._state = ProcessReaders(len(self._files))
        return state

    def _reader(self, index: int) -> Any:
        return self._process_readers().reader(index, self._files, self._options, self._cache)

    @contextlib.contextmanager
    def _using(self, index: int) -> Iterator[None]:
        """Counts file ``index`` busy while the block runs (a remote source's reads)."""
        if self._edges:  # reading has begun: no first copy will start from them
            self._edges = {}
        if self._files[index].blob is None:
            yield
            return
        with self._process_readers().busy_while(index):
            yield

    @property
    def takes_key_hints(self) -> bool:
        """Whether :meth:`prefetch_keys` does anything: only for remote files (readers then
        skip computing the keys ahead for local ones)."""
        return self._cache is not None

    def prefetch_first_reads(self, keys: Sequence[int] | np.ndarray) -> None:
        """Fetches the records under ``keys`` (the first worker's first reads, in reading order)
        by exact ranges into first copies that workers read before the whole files are cached
        (:mod:`grainlite.sources.remote.first_copies`). Remote files only; returns at once."""
        if self._cache is None:
            return
        from grainlite.sources.remote import first_copies

        array = np.asarray(keys, dtype=np.int64).reshape(-1)
        array = array[(array >= 0) & (array < self._len)]
        if array.size == 0 or not first_copies.AVAILABLE:
            return
        file_of = np.searchsorted(self._ends_array, array, side="right")
        cut = first_copies.keys_within_files(file_of)
        file_of, positions = file_of[:cut], array[:cut] + self._shift[file_of[:cut]]
        blobs = {index: self._files[index].blob for index in distinct(file_of).tolist()}
        edges, self._edges = self._edges, {}
        work = [
            (blob, positions[file_of == index].tolist(), edges.get(index))
            for index, blob in blobs.items()
            if first_copies.worth_copying(blob) and not self._cache.has_block(blob)
        ]
        first_copies.start_copies(
            work, open_reader, self._cache.storage_options, self._cache.has_block
        )

    def prefetch_keys(self, keys: Sequence[int] | np.ndarray) -> None:
        """Tells the source the keys it will read next, in order: the remote files they need
        are fetched ahead into the cache (in the order of their first key, as far as free
        room allows), so the reads find them there. Local files need nothing; returns at once.
        The readers of both APIs call it as :data:`~grainlite.options.READ_POLICY` says."""
        if self._cache is None:
            return
        self._edges = {}  # reading has begun: no first copy will start from them
        array = np.asarray(keys, dtype=np.int64).reshape(-1)
        if array.size == 0:
            return
        state = self._process_readers()
        state.hinted = True
        array = array[(array >= 0) & (array < self._len)]
        file_of = np.searchsorted(self._ends_array, array, side="right")
        for index in in_order_of_first(file_of).tolist():
            blob = self._files[index].blob
            if blob is not None and state.readers[index] is None:
                self._cache.fetch_ahead(blob)

    def __getitem__(self, key: SupportsIndex) -> bytes:
        """The record under ``key`` in ``[0, len)``."""
        k = _as_key(key)
        if not 0 <= k < self._len:
            raise key_out_of_range("ArrayRecordDataSource", k, self._len)
        index = bisect.bisect_right(self._ends, k) if len(self._files) > 1 else 0
        position = k - (self._ends[index - 1] if index else 0) + self._files[index].start
        if self._cache is not None:
            with self._using(index):
                return self._read_one(index, position)
        return self._read_one(index, position)

    def _read_one(self, index: int, position: int) -> bytes:
        reader = self._reader(index)
        try:
            if position < _INT32_MAX:
                return reader.read(position, position + 1)[0]
            return reader.read([position])[0]
        except RuntimeError as error:
            raise self._read_error(index, [position], error) from None

    def __getitems__(self, keys: Sequence[SupportsIndex]) -> list[bytes]:
        """The records under all ``keys``, in order, with as few reader calls as possible."""
        array = int64_keys(keys)
        if array is None:
            return [self[key] for key in keys]  # Not int64 keys: reports the first bad one exactly.
        if array.size == 0:
            return []
        if array.min() < 0 or array.max() >= self._len:
            bad = np.flatnonzero((array < 0) | (array >= self._len))[0]
            raise key_out_of_range("ArrayRecordDataSource", int(array[bad]), self._len)
        return self._read_keys(array, self._read_positions)

    def list_read_profile(self) -> tuple[int, float] | None:
        """``(fewest keys, mean stored bytes per record)``: the fewest keys for which one read of
        a shuffled block (an index-list read per file, about 2.5 ns per record in the file per
        call) costs less than a range read per key, and the files' bytes per record. Readers
        ask it through :meth:`~grainlite.options.ReadPolicy.list_read_blocks` whether to read
        this source ahead in big blocks (:mod:`grainlite.sources.list_reads`). None for remote
        files (read from a cache that their own read-ahead fills)."""
        if self._cache is not None:
            return None
        profile = getattr(self, "_list_profile", None)
        if profile is None:
            files = {file.path: file.records for file in self._files}
            records = sum(files.values())
            try:
                stored = sum(os.path.getsize(path) for path in files)
            except OSError:
                return None
            fewest = -(-records // _RUNS_PER_LIST_READ)
            profile = self._list_profile = (fewest, stored / max(1, records))
        return profile

    def list_read(self, keys: np.ndarray) -> list[bytes]:
        """The records under ``keys`` (an int64 array of keys in ``[0, len)``), in order, as
        :meth:`__getitems__` reads them, for a read-ahead block
        (:mod:`grainlite.sources.list_reads`). A read that fails raises array_record's own
        error without naming the record (that costs a read per key): the reader reads those
        keys again through :meth:`__getitems__`, which names it, at their place."""
        return self._read_keys(keys, self._read_ahead)

    def _read_ahead(self, index: int, positions: np.ndarray) -> list[bytes]:
        return self._read_runs(index, positions, in_background=True)

    def _read_keys(self, array: np.ndarray, read: Any) -> list[bytes]:
        """``read(file, positions)`` for the keys of each file in ``array``, in order."""
        if len(self._files) == 1:
            return self._read_file(0, array + self._files[0].start, read)
        file_of = np.searchsorted(self._ends_array, array, side="right")
        positions = array + self._shift[file_of]
        if file_of[0] == file_of[-1] and (file_of == file_of[0]).all():
            return self._read_file(int(file_of[0]), positions, read)
        records: list[bytes] = [b""] * array.size
        for index in distinct(file_of).tolist():
            at = np.flatnonzero(file_of == index)
            for slot, record in zip(at.tolist(), self._read_file(index, positions[at], read)):
                records[slot] = record
        return records

    def _read_file(self, index: int, positions: np.ndarray, read: Any) -> list[bytes]:
        if self._cache is not None:
            if self._first is not None:  # a worker's first reads, before the block is cached
                readers = self._process_readers()
                records = readers.read_first(
                    index, self._files, self._first, self._cache, positions
                )
                if records is not None:
                    return records
            with self._using(index):
                return read(index, positions)  # type: ignore[no-any-return]
        return read(index, positions)  # type: ignore[no-any-return]

    def _read_positions(self, index: int, positions: np.ndarray) -> list[bytes]:
        try:
            return self._read_runs(index, positions)
        except RuntimeError as error:
            raise self._read_error(index, positions.tolist(), error) from None

    def _read_error(self, index: int, positions: list[int], error: RuntimeError) -> Exception:
        """The error for a failed read of ``positions`` in file ``index``, naming the bad record.

        The reader fails for a whole read; the records are tried one by one (only on this error
        path) to name the first that cannot be read.
        """
        file = self._files[index]
        reader = self._reader(index)
        bad = positions[0]
        for position in positions:
            try:
                reader.read([position])
            except RuntimeError:
                bad = position
                break
        key = bad - file.start + (self._ends[index - 1] if index else 0)
        return corrupted_record_error(file.path, key, bad, error)

    def _read_runs(
        self, index: int, positions: np.ndarray, in_background: bool = False
    ) -> list[bytes]:
        """The records at ``positions`` of file ``index``: one index-list read, or a range read
        per run of consecutive positions, whichever costs less (see :func:`_list_read_pays`).
        ``in_background``: a read ahead in its own thread (:meth:`list_read`)."""
        reader = self._reader(index)
        starts = np.flatnonzero(np.diff(positions) != 1) + 1
        runs = starts.size + 1
        if (
            _list_read_pays(runs, self._files[index], in_background)
            or positions.max() >= _INT32_MAX
        ):
            return reader.read(positions.tolist())
        read = reader.read
        if runs == positions.size:  # a shuffled block: no two keys adjacent, one read per key
            return [read(first, first + 1)[0] for first in positions.tolist()]
        records: list[bytes] = []
        bounds = [0, *starts.tolist(), positions.size]
        firsts = positions[bounds[:-1]].tolist()
        for first, begin, end in zip(firsts, bounds[:-1], bounds[1:]):
            records += reader.read(first, first + end - begin)
        return records

    def close(self) -> None:
        """Closes the readers this process opened; a later read opens them again."""
        state, self._state = self._state, ProcessReaders(len(self._files))
        self._edges = {}
        state.close()

    def __enter__(self) -> ArrayRecordDataSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_state"]  # Open readers never travel; the receiving process opens its own.
        state["_edges"] = {}  # nor the files' edges: the first copies are the training process's
        if self._cache is not None:  # the first copies this process holds, for its workers
            from grainlite.sources.remote.first_copies import shared_copies

            state["_first"] = shared_copies([file.blob for file in self._files])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._state = ProcessReaders(len(self._files))

    def __repr__(self) -> str:
        return self._repr


def _list_read_pays(runs: int, file: File, in_background: bool) -> bool:
    """Whether one index-list read of ``runs`` runs of keys in ``file`` costs less than a range
    read per run.

    The list read costs about 2.5 ns per record in the file per call, so it needs many runs to
    pay (:data:`_RUNS_PER_LIST_READ`). It also hands each chunk to array_record's thread pool: on
    files of one record per chunk (``group_size:1``) that costs more CPU per key than the range
    read (12-16 us against 7-8 us per record of the ``images`` benchmark file, 4.4 against 2.9 us
    of ``small``'s at 16,384 keys), so there a reader in the consuming thread, whose every CPU
    second is the pipeline's, reads by ranges. Where several records share a chunk the list read
    decodes each chunk once for all its keys (65 against 157 us per record at 1,024 keys of a
    ``group_size:64`` copy of ``images``). A read ahead in its own thread lists its keys in both
    cases: the call releases the interpreter lock throughout, the range reads take it per key.
    """
    if file.group_size == 1 and not in_background:
        return False
    return runs * _RUNS_PER_LIST_READ >= file.records


def _as_key(key: Any) -> int:
    try:
        return operator.index(key)
    except TypeError:
        raise GrainliteTypeError(
            f"ArrayRecordDataSource keys must be ints (got {type(key).__name__} {key!r}); pass an "
            f"int or a numpy integer."
        ) from None
