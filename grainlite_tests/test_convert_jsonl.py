"""convert on JSON Lines: typed round trips, and lines that break the schema."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert import converter
from grainlite_tests.support.convert_helpers import assert_examples_equal, convert, read_back

pytestmark = pytest.mark.timeout(60)


def write_lines(path, rows) -> None:
    path.write_text("".join(json.dumps(row) + "\n" if row else "\n" for row in rows))


def test_json_lines_round_trip_with_typed_values_and_blank_lines_skipped(tmp_path):
    rows = [
        {"id": i, "text": f"line {i} é", "score": i / 4, "ok": i % 2 == 0, "tokens": list(range(i)),
         "grid": [[i, i + 1]] * (i + 1)}
        for i in range(7)
    ]  # fmt: skip
    write_lines(tmp_path / "data.jsonl", [*rows[:3], None, *rows[3:]])
    assert convert(tmp_path / "data.jsonl", tmp_path / "out", "--num-shards", "2") == 0
    expected = [
        {"id": np.int64(r["id"]), "text": r["text"], "score": np.float64(r["score"]),
         "ok": np.bool_(r["ok"]), "tokens": np.asarray(r["tokens"], dtype=np.int64),
         "grid": np.asarray(r["grid"], dtype=np.int64)}
        for r in rows
    ]  # fmt: skip
    assert_examples_equal(read_back(tmp_path / "out"), expected)
    features = converter.manifest_module.load(tmp_path / "out").data["features"]
    assert features[4:] == [
        {"name": "tokens", "kind": "array", "dtype": "<i8", "shape": [None]},
        {"name": "grid", "kind": "array", "dtype": "<i8", "shape": [None, 2]},
    ]


def test_a_line_with_other_keys_is_a_mixed_schema_error_naming_the_line(tmp_path):
    write_lines(tmp_path / "data.jsonl", [{"a": 1, "b": "x"}, {"a": 2, "c": "y"}])
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "data.jsonl", tmp_path / "out")
    assert str(error.value) == (
        f"{tmp_path / 'data.jsonl'} line 2 has the keys ['a', 'c'] but line 1 has ['a', 'b']; "
        f"every line must have the same keys (mixed schemas): add the missing keys or convert "
        f"the kinds of lines separately."
    )


def test_a_key_holding_another_type_is_a_mixed_schema_error_with_the_fix(tmp_path):
    write_lines(tmp_path / "data.jsonl", [{"a": 1}, {"a": 2}, {"a": 2.5}])
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "data.jsonl", tmp_path / "out")
    assert str(error.value) == (
        f"{tmp_path / 'data.jsonl'} line 3: key 'a' holds floats but earlier lines hold "
        f"integers; a key must hold one kind of value on every line (mixed schemas): write e.g. "
        f"1.0 instead of 1 where a key holds floats, and lists of one depth."
    )


def test_a_line_that_is_not_json_is_named(tmp_path):
    (tmp_path / "data.jsonl").write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "data.jsonl", tmp_path / "out")
    assert str(error.value) == (
        f"{tmp_path / 'data.jsonl'} line 2 is not JSON (Expecting value at column 7); write one "
        f"JSON object per line."
    )
