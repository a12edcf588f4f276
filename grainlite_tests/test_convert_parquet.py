"""convert on Parquet (pyarrow): column types to features, round trips, nulls and odd types."""

from __future__ import annotations

import numpy as np
import pytest

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert import converter
from grainlite_tests.support.convert_helpers import assert_examples_equal, convert, read_back

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytestmark = pytest.mark.timeout(60)


def table(start: int, count: int):
    rows = range(start, start + count)
    return pa.table({
        "id": pa.array(list(rows), pa.int32()),
        "score": pa.array([r / 8 for r in rows], pa.float32()),
        "text": pa.array([f"row {r}" for r in rows]),
        "blob": pa.array([bytes([r]) * r for r in rows], pa.binary()),
        "tokens": pa.array([list(range(r % 4)) for r in rows], pa.list_(pa.int64())),
        "xy": pa.array([[r, -r] for r in rows], pa.list_(pa.float64(), 2)),
    })  # fmt: skip


def expected(start: int, count: int) -> list[dict]:
    return [
        {"id": np.int32(r), "score": np.float32(r / 8), "text": f"row {r}", "blob": bytes([r]) * r,
         "tokens": np.arange(r % 4, dtype=np.int64), "xy": np.array([r, -r], dtype=np.float64)}
        for r in range(start, start + count)
    ]  # fmt: skip


def test_parquet_rows_round_trip_with_each_column_type(tmp_path):
    pq.write_table(table(0, 10), tmp_path / "data.parquet", row_group_size=4)
    assert convert(tmp_path / "data.parquet", tmp_path / "out", "--num-shards", "3") == 0
    assert_examples_equal(read_back(tmp_path / "out"), expected(0, 10))
    features = converter.manifest_module.load(tmp_path / "out").data["features"]
    assert features[4:] == [
        {"name": "tokens", "kind": "array", "dtype": "<i8", "shape": [None]},
        {"name": "xy", "kind": "array", "dtype": "<f8", "shape": [2]},
    ]


def test_a_folder_of_parquet_files_is_read_in_name_order(tmp_path):
    (tmp_path / "src").mkdir()
    pq.write_table(table(5, 3), tmp_path / "src" / "part-1.parquet")
    pq.write_table(table(0, 5), tmp_path / "src" / "part-0.parquet")
    assert convert(tmp_path / "src", tmp_path / "out", "--workers", "2", "--num-shards", "2") == 0
    assert_examples_equal(read_back(tmp_path / "out"), expected(0, 8))


def test_a_null_value_is_named_with_its_row_and_the_fix(tmp_path):
    pq.write_table(pa.table({"a": [1, None, 3]}), tmp_path / "data.parquet")
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "data.parquet", tmp_path / "out")
    assert str(error.value) == (
        f"{tmp_path / 'data.parquet'} row 1: column 'a' is null; convert needs a value in every "
        f"row: fill the nulls (e.g. pyarrow.compute.fill_null) or drop those rows first."
    )
    assert not (tmp_path / "out").exists()


def test_a_column_of_an_unsupported_type_is_refused_with_the_fix(tmp_path):
    pq.write_table(pa.table({"when": pa.array([1, 2], pa.date32())}), tmp_path / "t.parquet")
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "t.parquet", tmp_path / "out")
    assert str(error.value) == (
        f"{tmp_path / 't.parquet'}: column 'when' has type date32[day]; convert stores numbers, "
        f"booleans, strings, binary and (nested) lists of numbers: cast the column (e.g. with "
        f"pyarrow.compute.cast) or drop it first."
    )
