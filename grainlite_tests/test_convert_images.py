"""convert on an image folder (one subfolder per class): round trips and bad images."""

from __future__ import annotations

import numpy as np
import pytest

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert import converter
from grainlite_tests.support.convert_helpers import assert_examples_equal, convert, read_back

cv2 = pytest.importorskip("cv2")
pytestmark = pytest.mark.timeout(60)


def make_folder(root, counts=(3, 2), size=(12, 10)) -> list[dict]:
    """Writes JPEG and PNG images into class folders; returns the examples convert must give."""
    rng = np.random.default_rng(0)
    examples = []
    for label, (name, count) in enumerate(zip(("ant", "bee"), counts)):
        (root / name).mkdir(parents=True)
        for i in range(count):
            suffix = ".png" if i % 2 else ".jpg"
            pixels = rng.integers(0, 255, (size[0] + i, size[1], 3), dtype=np.uint8)
            ok, encoded = cv2.imencode(suffix, pixels)
            assert ok
            (root / name / f"{i}{suffix}").write_bytes(encoded.tobytes())
            examples.append(
                {
                    "image": encoded.tobytes(),
                    "label": np.int64(label),
                    "file_name": f"{name}/{i}{suffix}",
                }
            )
    (root / "bee" / "notes.txt").write_text("not an image")  # skipped, and counted
    return examples


def test_image_folder_round_trips_through_a_dataloader_with_bytes_labels_and_names(tmp_path):
    expected = make_folder(tmp_path / "src")
    assert convert(tmp_path / "src", tmp_path / "out", "--num-shards", "2") == 0
    assert_examples_equal(read_back(tmp_path / "out", worker_count=2), expected)
    manifest = converter.manifest_module.load(tmp_path / "out")
    assert manifest.data["extra"] == {"classes": ["ant", "bee"], "skipped_files": 1}
    assert [s["records"] for s in manifest.data["shards"]] == [2, 3]


def test_decode_stores_rgb_pixels_and_the_decoder_can_decode_encoded_images(tmp_path):
    expected = make_folder(tmp_path / "src")
    pixels = [
        cv2.imdecode(np.frombuffer(e["image"], np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
        for e in expected
    ]
    assert convert(tmp_path / "src", tmp_path / "decoded", "--decode") == 0
    stored = read_back(tmp_path / "decoded")
    assert_examples_equal(stored, [{**e, "image": p} for e, p in zip(expected, pixels)])
    assert convert(tmp_path / "src", tmp_path / "encoded") == 0
    decoded_on_read = read_back(tmp_path / "encoded", decode_images=True)
    assert_examples_equal(decoded_on_read, [{**e, "image": p} for e, p in zip(expected, pixels)])


def test_an_unreadable_image_is_named_with_the_fix_and_nothing_is_left(tmp_path, capsys):
    make_folder(tmp_path / "src")
    bad = tmp_path / "src" / "bee" / "9.jpg"
    bad.write_bytes(b"GIF-ish but not an image")
    assert convert(tmp_path / "src", tmp_path / "out", "--num-shards", "2") == 2
    assert capsys.readouterr().err == (
        f"convert: error: {bad} is not a readable image: it starts with b'GIF-ish ', not with a "
        f"JPEG, PNG, BMP, WebP or GIF header; replace or remove the file and convert again.\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_a_folder_without_class_subfolders_is_refused_with_the_layout(tmp_path):
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.jpg").write_bytes(b"\xff\xd8\xff")
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "flat", tmp_path / "out")
    assert str(error.value) == (
        f"The image folder {str(tmp_path / 'flat')!r} has no class subfolders; lay it out as "
        f"{tmp_path / 'flat'}/<class>/<image>.jpg (one subfolder per class, the ImageFolder "
        f"layout)."
    )
