"""Rows of Arrow tables as records: the schema mapping shared by the Parquet and Hugging Face kinds.

Column types map to features as follows: integer, floating and bool columns to scalar arrays of
the same dtype; (large) strings to ``str``; (large) binary to ``bytes``; (large / fixed-size) lists
of those numbers, nested to any depth, to arrays (a plain list's length is ``None``, a fixed-size
list's is fixed); a struct ``{bytes, path}`` marked as an image (Hugging Face ``Image``) to
``image`` (with ``decode``, to RGB ``uint8`` arrays). Any other type, and any null value, gets an
error naming the column and the fix. pyarrow is imported only when such a source is opened.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert.features import Feature, array_feature
from grainlite.tools.convert.source import InputSource


def feature_of(
    name: str, arrow_type: Any, image: bool, where: str, decode: bool = False
) -> Feature:
    """The feature an Arrow column of ``arrow_type`` becomes (see the module docstring)."""
    import pyarrow as pa

    types = pa.types
    if image and types.is_struct(arrow_type):
        return array_feature(name, np.uint8, (None, None, 3)) if decode else Feature(name, "image")
    if types.is_string(arrow_type) or types.is_large_string(arrow_type):
        return Feature(name, "str")
    if types.is_binary(arrow_type) or types.is_large_binary(arrow_type):
        return Feature(name, "bytes")
    shape: list[int | None] = []
    inner = arrow_type
    while types.is_list(inner) or types.is_large_list(inner) or types.is_fixed_size_list(inner):
        shape.append(inner.list_size if types.is_fixed_size_list(inner) else None)
        inner = inner.value_type
    if types.is_integer(inner) or types.is_floating(inner) or types.is_boolean(inner):
        return array_feature(name, inner.to_pandas_dtype(), shape)
    raise GrainliteValueError(
        f"{where}: column {name!r} has type {arrow_type}; convert stores numbers, booleans, "
        f"strings, binary and (nested) lists of numbers: cast the column (e.g. with "
        f"pyarrow.compute.cast) or drop it first."
    )


@dataclass
class ArrowSource(InputSource):
    """Rows of a sequence of Arrow tables (files), concatenated in order."""

    files: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)  # Rows of each file.
    decoded_images: list[str] = field(default_factory=list)  # Image columns stored decoded.

    def __post_init__(self) -> None:
        self._tables: dict[int, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_tables"] = {}  # Opened again by the process that reads.
        return state

    def open_table(self, index: int) -> Any:
        """The whole table of file ``index`` (subclasses read their format)."""
        raise NotImplementedError

    def fingerprint_files(self) -> list[str]:
        """Every file the rows come from."""
        return list(self.files)

    def read(self, start: int, stop: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """Rows ``[start, stop)`` across the files, converted to the features' values."""
        first = 0
        for index, count in enumerate(self.rows):
            lo, hi = max(start, first), min(stop, first + count)
            if lo < hi:
                table = self._tables.get(index)
                if table is None:
                    table = self._tables[index] = self.open_table(index)
                part = table.slice(lo - first, hi - lo)
                columns = {f.name: part.column(f.name).to_pylist() for f in self.features}
                decoded = self.decoded_images
                for row in range(hi - lo):
                    where = f"{self.files[index]} row {lo - first + row}"
                    yield (
                        where,
                        {
                            f.name: _value(f, columns[f.name][row], where, f.name in decoded)
                            for f in self.features
                        },
                    )
            first += count

    def close(self) -> None:
        """Drops the tables this process opened."""
        self._tables = {}


def _value(feature: Feature, value: Any, where: str, decode_image: bool) -> Any:
    if value is None:
        raise GrainliteValueError(
            f"{where}: column {feature.name!r} is null; convert needs a value in every row: fill "
            f"the nulls (e.g. pyarrow.compute.fill_null) or drop those rows first."
        )
    if feature.kind == "image" or decode_image:
        data = value.get("bytes") if isinstance(value, dict) else None
        if data is None:
            raise GrainliteValueError(
                f"{where}: image column {feature.name!r} holds no bytes (only a path: "
                f"{value!r}); save the dataset with the images embedded (Dataset.save_to_disk "
                f"after cast_column(..., Image()))."
            )
        if decode_image:
            from grainlite.tools.convert.image_folder import decode_image as decode

            return decode(data, where)
        return data
    if feature.kind == "array":
        try:
            return np.asarray(value, dtype=feature.dtype)
        except ValueError:
            raise GrainliteValueError(
                f"{where}: column {feature.name!r} holds nested lists of ragged lengths; "
                f"convert stores regular arrays: pad the inner lists to one length."
            ) from None
    return value
