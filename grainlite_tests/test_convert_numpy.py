"""convert on .npy and .npz files: round trips, and arrays that cannot be records."""

from __future__ import annotations

import numpy as np
import pytest

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert import converter
from grainlite_tests.support.convert_helpers import assert_examples_equal, convert, read_back

pytestmark = pytest.mark.timeout(60)


def test_npz_rows_round_trip_with_every_array_as_a_feature(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "x": rng.normal(size=(9, 2, 3)).astype(">f4"),  # big endian in, little endian stored
        "label": np.arange(9, dtype=np.int32),
        "mask": rng.random(9) < 0.5,
    }
    np.savez(tmp_path / "data.npz", **arrays)
    assert convert(tmp_path / "data.npz", tmp_path / "out", "--num-shards", "3") == 0
    expected = [
        {"x": arrays["x"][i].astype("<f4"), "label": arrays["label"][i], "mask": arrays["mask"][i]}
        for i in range(9)
    ]
    assert_examples_equal(read_back(tmp_path / "out"), expected)
    manifest = converter.manifest_module.load(tmp_path / "out")
    assert manifest.data["features"] == [
        {"name": "x", "kind": "array", "dtype": "<f4", "shape": [2, 3]},
        {"name": "label", "kind": "array", "dtype": "<i4", "shape": []},
        {"name": "mask", "kind": "array", "dtype": "|b1", "shape": []},
    ]


def test_an_npy_file_becomes_one_feature_named_after_it(tmp_path):
    array = np.arange(12, dtype=np.uint16).reshape(6, 2)
    np.save(tmp_path / "pixels.npy", array)
    assert convert(tmp_path / "pixels.npy", tmp_path / "out") == 0
    assert_examples_equal(read_back(tmp_path / "out"), [{"pixels": row} for row in array])


def test_ragged_npz_arrays_are_refused_with_their_lengths(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((4, 2)), y=np.zeros(3))
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "bad.npz", tmp_path / "out")
    assert str(error.value) == (
        f"{tmp_path / 'bad.npz'}: the arrays have first dimensions {{'x': 4, 'y': 3}} (None: a "
        f"scalar); record i is row i of every array, so all need the same number of rows "
        f"(ragged arrays): save arrays of equal length, or convert them separately."
    )
    assert not (tmp_path / "out").exists()


def test_an_object_array_is_refused_without_unpickling_it(tmp_path):
    ragged = np.empty(2, dtype=object)
    ragged[0], ragged[1] = [1, 2], [3]
    np.save(tmp_path / "ragged.npy", ragged, allow_pickle=True)
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "ragged.npy", tmp_path / "out")
    assert str(error.value) == (
        f"{tmp_path / 'ragged.npy'} holds an object array (ragged rows, or Python objects), "
        f"which only loads by unpickling, and grainlite never unpickles; save regular arrays "
        f"(pad ragged rows to one length, or write them as JSON Lines) and convert again."
    )
