"""``ParquetIterDataset(path, **read_kwargs)``: the rows of Parquet files, one dict per row.

The file is opened at the first ``next()`` (or ``set_state``) with
``pyarrow.parquet.ParquetFile(path, **read_kwargs)`` and read one row group at a time, so memory
holds one row group, never the file. A row is ``{column: value}`` in the file's column order, the
values as Grain 0.2.18 gives them (learned by running it): each column of the row group converted
with pyarrow's ``to_numpy`` (numbers as numpy scalars, an int column with nulls as floats with
``nan``, strings and bytes as Python objects, lists as arrays, structs as dicts).

The state is Grain's ``{"row_group": g, "index_within_row_group": i}`` (``i`` rows of row group
``g`` delivered). Several paths are read as an :class:`InterleaveIterDataset` reading up to 16
files at a time (Grain's rule), with the interleave's state. Under ``mp_prefetch`` with ``W``
workers, worker ``w`` reads the files ``paths[w::W]`` (Grain's ``set_slice``); a worker left
without a file gives no rows. pyarrow is imported only when a file is read; it
comes with ``pip install 'grainlite[parquet]'``.

A path may be an ``s3://`` or ``gs://`` URL (``pip install 'grainlite[remote]'``): the file is then
read through the object-store client (:mod:`grainlite.sources.locations`) with ranged GETs, the
footer first, then one row group's column chunks at a time; ``storage_options`` (endpoint,
credentials, retries) go to that client, read as ``docs/how-to/remote-data.md`` describes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grainlite._optional import require
from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.experimental.interleave import (
    InterleaveDatasetIterator,
    InterleaveIterDataset,
)
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.errors import GrainliteTypeError
from grainlite.sources import locations

_FILES_AT_ONCE = 16  # Grain's cycle_length over several files


class ParquetIterDataset(IterDataset):
    """The rows of one Parquet file, or of several read round-robin.

    Args:
      path: a file path or ``s3://``/``gs://`` URL, or a sequence of them.
      storage_options: options of the object-store client for URLs (endpoint, credentials).
      **read_kwargs: passed to ``pyarrow.parquet.ParquetFile`` (e.g. ``memory_map=True``).
    """

    def __init__(
        self,
        path: str | Sequence[str],
        *,
        storage_options: dict[str, Any] | None = None,
        **read_kwargs: Any,
    ) -> None:
        super().__init__()
        paths = [path] if isinstance(path, str) else list(path)
        if not paths or not all(isinstance(p, str) for p in paths):
            raise GrainliteTypeError(
                f"ParquetIterDataset path must be a str or a non-empty sequence of str (got "
                f"{path!r}); pass the path of a Parquet file, or a list of them."
            )
        self._paths = paths
        self._read_kwargs = read_kwargs
        self._storage_options = storage_options

    def __iter__(self) -> DatasetIterator:
        if len(self._paths) == 1:
            return ParquetDatasetIterator(self._paths[0], self._read_kwargs, self._storage_options)
        if not self._paths:  # a worker's share without files
            return InterleaveDatasetIterator([], _FILES_AT_ONCE)
        files = [
            ParquetIterDataset(p, storage_options=self._storage_options, **self._read_kwargs)
            for p in self._paths
        ]
        return iter(InterleaveIterDataset(files, cycle_length=_FILES_AT_ONCE))

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Keeps only the files ``paths[sl]`` (in place): Grain's hook to share files out."""
        if not isinstance(sl, slice):
            raise GrainliteTypeError(f"ParquetIterDataset.set_slice needs a slice (got {sl!r}).")
        self._paths = self._paths[sl]

    def __str__(self) -> str:
        return f"ParquetIterDataset(paths={self._paths})"


class ParquetDatasetIterator(DatasetIterator):
    """The rows of one file, row group by row group; state ``{"row_group", ...}``."""

    def __init__(
        self,
        path: str,
        read_kwargs: dict[str, Any],
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self._path = path
        self._read_kwargs = read_kwargs
        self._storage_options = storage_options
        self._file: Any = None
        self._handle: Any = None  # the object read through the client, for a URL
        self._group = 0
        self._index = 0
        self._loaded = -1  # the row group in _columns
        self._columns: list[tuple[str, Any]] = []
        self._rows = 0

    def _open(self) -> Any:
        if self._file is None:
            pq = require("pyarrow.parquet", "parquet", "ParquetIterDataset")
            source: Any = self._path
            if locations.is_remote(self._path):
                source = self._handle = locations.open_binary(self._path, self._storage_options)
            try:
                self._file = pq.ParquetFile(source, **self._read_kwargs)
            except BaseException:
                self._close_handle()
                raise
        return self._file

    def _close_handle(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _load(self, group: int) -> None:
        table = self._open().read_row_group(group)
        self._columns = [
            (name, table.column(k).to_numpy()) for k, name in enumerate(table.column_names)
        ]
        self._rows = table.num_rows
        self._loaded = group

    def __next__(self) -> dict[str, Any]:
        groups = self._open().num_row_groups
        while True:
            if self._group >= groups:
                raise StopIteration
            if self._loaded != self._group:
                self._load(self._group)
            if self._index < self._rows:
                break
            if self._group + 1 >= groups:
                raise StopIteration
            self._group, self._index = self._group + 1, 0
        index = self._index
        self._index = index + 1
        return {name: values[index] for name, values in self._columns}

    def get_state(self) -> dict[str, Any]:
        """``{"row_group": g, "index_within_row_group": i}``."""
        return {"row_group": self._group, "index_within_row_group": self._index}

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to row ``index_within_row_group`` of ``row_group`` (read when needed)."""
        self._group = int(state["row_group"])
        self._index = int(state["index_within_row_group"])

    def close(self) -> None:
        """Drops the open file and the row group held."""
        self._file, self._columns, self._loaded = None, [], -1
        self._close_handle()
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_file"], state["_columns"], state["_loaded"] = None, [], -1
        state["_handle"] = None
        return state

    def __str__(self) -> str:
        return f"ParquetDatasetIterator(path={self._path!r})"
