"""convert on a Hugging Face dataset saved with save_to_disk (read with pyarrow alone)."""

from __future__ import annotations

import numpy as np
import pytest

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert import converter
from grainlite_tests.support.convert_helpers import assert_examples_equal, convert, read_back

datasets = pytest.importorskip("datasets")
pytestmark = pytest.mark.timeout(60)


def jpeg(value: int) -> bytes:
    cv2 = pytest.importorskip("cv2")
    ok, encoded = cv2.imencode(".jpg", np.full((4, 5, 3), value, dtype=np.uint8))
    assert ok
    return encoded.tobytes()


def test_a_saved_dataset_round_trips_with_images_kept_encoded_and_class_names(tmp_path):
    features = datasets.Features({
        "image": datasets.Image(),
        "label": datasets.ClassLabel(names=["no", "yes"]),
        "text": datasets.Value("string"),
        "vector": datasets.Sequence(datasets.Value("float32")),
    })  # fmt: skip
    data = {
        "image": [{"bytes": jpeg(i * 20), "path": None} for i in range(6)],
        "label": [i % 2 for i in range(6)],
        "text": [f"t{i}" for i in range(6)],
        "vector": [[i / 2] * i for i in range(6)],
    }
    datasets.Dataset.from_dict(data, features=features).save_to_disk(str(tmp_path / "saved"))
    assert convert(tmp_path / "saved", tmp_path / "out", "--num-shards", "2") == 0
    expected = [
        {"image": jpeg(i * 20), "label": np.int64(i % 2), "text": f"t{i}",
         "vector": np.full(i, i / 2, dtype=np.float32)}
        for i in range(6)
    ]  # fmt: skip
    assert_examples_equal(read_back(tmp_path / "out"), expected)
    manifest = converter.manifest_module.load(tmp_path / "out")
    assert manifest.data["features"][0] == {"name": "image", "kind": "image"}
    assert manifest.data["extra"] == {"class_names": {"label": ["no", "yes"]}}
    assert convert(tmp_path / "saved", tmp_path / "decoded", "--decode") == 0
    cv2 = pytest.importorskip("cv2")
    pixels = [
        cv2.imdecode(np.frombuffer(e["image"], np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
        for e in expected
    ]
    assert_examples_equal(
        read_back(tmp_path / "decoded"), [{**e, "image": p} for e, p in zip(expected, pixels)]
    )


def test_a_saved_dataset_dict_gives_the_split_asked_for_and_names_the_others(tmp_path):
    splits = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"x": [1, 2, 3]}),
        "test": datasets.Dataset.from_dict({"x": [7, 8]}),
    })  # fmt: skip
    splits.save_to_disk(str(tmp_path / "saved"))
    assert convert(tmp_path / "saved", tmp_path / "out", "--split", "test") == 0
    assert_examples_equal(read_back(tmp_path / "out"), [{"x": np.int64(7)}, {"x": np.int64(8)}])
    assert (tmp_path / "out" / "saved-test.manifest.json").exists()
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "saved", tmp_path / "other", split="validation")
    assert str(error.value) == (
        f"The saved DatasetDict {str(tmp_path / 'saved')!r} has the splits ['train', 'test'], "
        f"not 'validation'; pass --split with one of them."
    )
