"""The stand-in datasets: a TFDS ``imagenet_a`` built offline, and labelled ArrayRecord vectors."""

from __future__ import annotations

import numpy as np
import pytest
import stand_in_data

import grainlite as grain
from grainlite.errors import GrainliteValueError

tfds = pytest.importorskip("tensorflow_datasets")
pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def imagenet_a_dir(tmp_path_factory):
    return stand_in_data.build_imagenet_a(tmp_path_factory.mktemp("tfds"), num_images=6)


def test_the_tutorials_tfds_call_reads_the_stand_in_like_the_real_dataset(imagenet_a_dir):
    source = tfds.data_source("imagenet_a", split="test", data_dir=imagenet_a_dir)
    assert len(source) == 6
    for record in (source[k] for k in range(len(source))):
        assert sorted(record) == ["file_name", "image", "label"]
        image = record["image"]
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
        assert 64 <= image.shape[0] <= 128 and 64 <= image.shape[1] <= 128
        assert 0 <= record["label"] < 1000
        assert record["file_name"].startswith(b"stand_in_") and record["file_name"].endswith(
            b".jpg"
        )
    assert repr(source) == "ArrayRecordDataSource(name=imagenet_a, split='test', decoders=None)"


def test_the_stand_in_has_the_real_datasets_name_version_features_and_split(imagenet_a_dir):
    builder = tfds.builder("imagenet_a", data_dir=imagenet_a_dir)
    info = builder.info
    assert info.name == "imagenet_a"
    assert str(info.version) == "0.1.0"
    assert list(info.splits) == ["test"]
    assert info.features["label"].num_classes == 1000
    assert type(info.features["image"]).__name__ == "Image"
    assert type(info.features["file_name"]).__name__ == "Text"
    files = sorted(p.name for p in stand_in_data.imagenet_a_dir(imagenet_a_dir).iterdir())
    assert "imagenet_a-test.array_record-00000-of-00001" in files


def test_building_twice_reuses_the_prepared_files(imagenet_a_dir):
    shard = stand_in_data.imagenet_a_dir(imagenet_a_dir) / (
        "imagenet_a-test.array_record-00000-of-00001"
    )
    before = shard.stat().st_mtime_ns
    assert stand_in_data.build_imagenet_a(imagenet_a_dir, num_images=6) == str(imagenet_a_dir)
    assert shard.stat().st_mtime_ns == before


def test_the_same_seed_writes_the_same_pictures():
    first = stand_in_data.imagenet_a_examples(3, seed=4)
    again = stand_in_data.imagenet_a_examples(3, seed=4)
    other = stand_in_data.imagenet_a_examples(3, seed=5)
    assert first == again
    assert first != other


def test_building_prints_nothing_and_restores_tfds_progress_bars(tmp_path, capfd):
    from tensorflow_datasets.core.utils import tqdm_utils

    showing = tqdm_utils._active
    stand_in_data.build_imagenet_a(tmp_path, num_images=2)
    assert tqdm_utils._active == showing
    out, err = capfd.readouterr()
    assert out == ""
    assert "Generating" not in err


def test_the_stand_in_feeds_a_loader_with_workers(imagenet_a_dir):
    source = tfds.data_source("imagenet_a", split="test", data_dir=imagenet_a_dir)
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(len(source), grain.NoSharding(), num_epochs=1),
        worker_count=1,
    )
    with iter(loader) as elements:
        names = [element["file_name"] for element in elements]
    assert names == [source[k]["file_name"] for k in range(len(source))]


@pytest.mark.parametrize("num_images", [0, -1, 2.5, True])
def test_a_stand_in_needs_a_positive_number_of_images(tmp_path, num_images):
    with pytest.raises(GrainliteValueError) as raised:
        stand_in_data.build_imagenet_a(tmp_path, num_images=num_images)
    assert str(raised.value) == (
        f"num_images must be a positive int, got {num_images!r}; pass num_images=N with N >= 1."
    )


def test_synthetic_pictures_are_rgb_uint8_of_the_asked_size():
    picture = stand_in_data.synthetic_picture(7, np.random.default_rng(0), 40, 30)
    assert picture.shape == (40, 30, 3) and picture.dtype == np.uint8
    assert picture.std() > 0


def test_classification_records_round_trip_through_array_record(tmp_path):
    path = stand_in_data.write_classification_records(
        tmp_path / "train.array_record", num_records=20, num_features=5, num_classes=3, seed=1
    )
    features, labels = stand_in_data.classification_data(20, 5, 3, seed=1)
    source = grain.ArrayRecordDataSource(path)
    assert len(source) == 20
    for k in range(20):
        example = stand_in_data.decode_example(source[k])
        assert example["features"].dtype == np.float32
        np.testing.assert_array_equal(example["features"], features[k])
        assert example["label"] == labels[k] and 0 <= example["label"] < 3


def test_encode_and_decode_example_are_inverse():
    features = np.array([1.5, -2.0, 0.25], np.float32)
    decoded = stand_in_data.decode_example(stand_in_data.encode_example(features, 9))
    np.testing.assert_array_equal(decoded["features"], features)
    assert decoded["label"] == 9 and decoded["label"].dtype == np.int64
