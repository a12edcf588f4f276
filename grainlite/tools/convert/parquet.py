"""Input kind ``parquet``: a Parquet file, or a folder of ``*.parquet`` files read in sorted name
order, one record per row (column types map to features as :mod:`arrow_rows` says). Needs pyarrow
(``pip install 'grainlite[convert]'``), imported only when such a source is opened. Each file
is read whole, once per process that reads rows from it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from grainlite._optional import require
from grainlite.errors import GrainliteValueError
from grainlite.tools.convert.arrow_rows import ArrowSource, feature_of


@dataclass
class ParquetSource(ArrowSource):
    """The rows of one or more Parquet files."""

    def open_table(self, index: int) -> Any:
        """File ``index``, read whole."""
        parquet = require("pyarrow.parquet", "convert", "Converting Parquet")
        return parquet.read_table(self.files[index], columns=[f.name for f in self.features])


def open_parquet(path: str) -> ParquetSource:
    """The files, row counts and schema of ``path``; every file must share one schema."""
    parquet = require("pyarrow.parquet", "convert", "Converting Parquet")
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".parquet"))
    else:
        files = [path]
    if not files:
        raise GrainliteValueError(f"{path!r} holds no *.parquet files; pass a Parquet file.")
    schema, rows, size = None, [], 0
    for file in files:
        meta = parquet.ParquetFile(file)
        if schema is None:
            schema, first = meta.schema_arrow, file
        elif not meta.schema_arrow.equals(schema):
            raise GrainliteValueError(
                f"{file} has the schema {meta.schema_arrow} but {first} has {schema}; every file "
                f"of a folder must share one schema (mixed schemas): convert them separately."
            )
        rows.append(meta.metadata.num_rows)
        size += os.path.getsize(file)
    assert schema is not None
    features = tuple(feature_of(f.name, f.type, False, files[0]) for f in schema)
    return ParquetSource("parquet", path, features, sum(rows), size, files=files, rows=rows)
