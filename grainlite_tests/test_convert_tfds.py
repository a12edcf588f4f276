"""convert on a prepared TFDS dataset (by name and data_dir; no TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest
from stand_in_data import build_imagenet_a

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert import converter
from grainlite_tests.support.convert_helpers import assert_examples_equal, convert, read_back

tfds = pytest.importorskip("tensorflow_datasets")
pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return build_imagenet_a(tmp_path_factory.mktemp("tfds"), num_images=8)


def test_a_tfds_split_round_trips_with_images_encoded_and_class_names(data_dir, tmp_path):
    out = tmp_path / "out"
    assert convert("tfds:imagenet_a", out, "--split", "test", "--data-dir", data_dir,
                   "--num-shards", "2") == 0  # fmt: skip
    skip = {"image": tfds.decode.SkipDecoding()}
    source = tfds.data_source("imagenet_a", split="test", data_dir=data_dir, decoders=skip)
    expected = [
        {"image": e["image"], "label": np.int64(e["label"]), "file_name": e["file_name"].decode()}
        for e in (source[i] for i in range(len(source)))
    ]
    assert_examples_equal(read_back(out), expected)
    manifest = converter.manifest_module.load(out)
    assert manifest.data["name"] == "imagenet_a"
    assert len(manifest.data["extra"]["class_names"]["label"]) == 1000
    decoded = read_back(out, decode_images=True)
    pixels = tfds.data_source("imagenet_a", split="test", data_dir=data_dir)
    for i, element in enumerate(decoded):
        np.testing.assert_array_equal(element["image"], pixels[i]["image"])


def test_an_unknown_split_is_refused_with_the_splits_there_are(data_dir, tmp_path):
    with pytest.raises(GrainliteValueError) as error:
        converter.convert("tfds:imagenet_a", tmp_path / "out", split="train", data_dir=data_dir)
    assert str(error.value) == (
        "The TFDS dataset 'imagenet_a' has the splits ['test'], not 'train'; pass --split with "
        "one of them."
    )
