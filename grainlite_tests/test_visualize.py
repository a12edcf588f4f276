"""one_batch and show_batch: the first batch of a loader, and a PNG grid of a batch's images."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import grainlite as grain
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.tools import one_batch, show_batch
from grainlite_tests.support.pictures import colour_area, dark_pixels, drawn_share, read_png

# Tiles are drawn at 100 dpi in cells of about 2 inches: a drawn image covers thousands of pixels.
TILE_AREA = 2000


class MakeImage(grain.MapTransform):
    """Record k to a 12x10 RGB picture whose colour depends on k, and its label."""

    def map(self, k: int) -> dict[str, np.ndarray]:
        image = np.zeros((12, 10, 3), np.uint8)
        image[..., k % 3] = 40 + 20 * k
        return {"image": image, "label": np.int64(k % 4), "name": f"picture-{k}"}


class DropAll(grain.FilterTransform):
    def filter(self, element: object) -> bool:
        return False


def image_loader(
    num_records: int = 12, worker_count: int = 0, operations: list | None = None
) -> grain.DataLoader:
    if operations is None:
        operations = [MakeImage(), grain.Batch(batch_size=4)]
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, num_records, 1),
        sampler=grain.IndexSampler(num_records, grain.NoSharding(), num_epochs=1),
        operations=operations,
        worker_count=worker_count,
    )


def solid(colours: list[tuple[int, int, int]]) -> np.ndarray:
    """One 16x16 ``uint8`` image of each RGB colour, filled with it."""
    return np.array(colours, np.uint8)[:, None, None, :] * np.ones((1, 16, 16, 1), np.uint8)


# Bright, saturated colours: neither the background, nor title text, nor its grey edges match them.
COLOURS = [((37 * i) % 150 + 100, (91 * i) % 150 + 100, (53 * i) % 150 + 100) for i in range(1, 17)]


def images(n: int = 6, dtype: str = "uint8", channels: int = 3) -> np.ndarray:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 256, size=(n, 16, 16, channels))
    return values.astype(dtype)


# one_batch -----------------------------------------------------------------------------------


@pytest.mark.parametrize("worker_count", [0, 2], ids=["in-process", "two-workers"])
def test_one_batch_returns_the_first_batch_and_closes_its_iterator(worker_count):
    batch = one_batch(image_loader(worker_count=worker_count))
    # Worker 0 reads records 0, 2, 4, 6 with two workers; every record in order without.
    expected = [0, 1, 2, 3] if worker_count == 0 else [0, 2, 4, 6]
    assert batch["label"].tolist() == [k % 4 for k in expected]
    assert batch["image"].shape == (4, 12, 10, 3)
    # The autouse fixture checks that no worker process and no segment is left; the arrays stay
    # readable after the close.
    assert int(batch["image"].sum()) > 0


def test_one_batch_leaves_an_iterator_it_is_given_open():
    with iter(image_loader()) as iterator:
        first = one_batch(iterator)
        second = next(iterator)
    assert first["label"].tolist() == [0, 1, 2, 3]
    assert second["label"].tolist() == [0, 1, 2, 3]  # records 4-7, labels k % 4


def test_one_batch_of_an_empty_loader_says_why_it_may_be_empty():
    loader = image_loader(operations=[DropAll()])
    with pytest.raises(GrainliteValueError) as raised:
        one_batch(loader)
    assert str(raised.value) == (
        "one_batch got no element: the DataLoader is empty (its sampler selects no record, or a "
        "filter dropped them all, or Batch(drop_remainder=True) dropped a partial batch); check "
        "num_records and the operations."
    )


def test_one_batch_of_something_not_iterable_names_what_to_pass():
    with pytest.raises(GrainliteTypeError) as raised:
        one_batch(42)
    assert str(raised.value) == (
        "one_batch needs a DataLoader (or another iterable), got int; pass the loader itself, "
        "e.g. one_batch(grain.DataLoader(...))."
    )


# show_batch: what it draws -----------------------------------------------------------------


def test_show_batch_draws_a_loaders_first_batch_into_a_png(tmp_path):
    path = show_batch(image_loader(), tmp_path / "batch.png")
    assert path == tmp_path / "batch.png"
    picture = read_png(path)
    assert picture.shape == (480, 440, 3)  # 2 x 2 cells of 2.2 x 2.4 inches at 100 dpi
    # Records 0-3 of the first batch, each in its colour (MakeImage); record 4 is not drawn.
    for colour in [(40, 0, 0), (0, 60, 0), (0, 0, 80), (100, 0, 0)]:
        assert colour_area(picture, colour) > TILE_AREA, colour
    assert colour_area(picture, (0, 120, 0)) == 0


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param({"image": images(), "label": np.arange(6)}, id="dict-uint8"),
        pytest.param(
            {"pixels": images(dtype="float32") / 255.0, "labels": np.arange(6)},
            id="dict-float-unit-range",
        ),
        pytest.param(
            {"x": images(dtype="float32") / 64.0 - 2.0}, id="dict-normalized-float-no-labels"
        ),
        pytest.param(
            {"image": images(channels=1), "label": np.arange(6)}, id="dict-grey-one-channel"
        ),
        pytest.param({"image": images(channels=4), "label": np.arange(6)}, id="dict-rgba"),
        pytest.param((images(), np.arange(6)), id="tuple-image-label"),
        pytest.param([images(), np.array([b"cat", b"dog"] * 3)], id="list-with-bytes-labels"),
        pytest.param(images(), id="bare-array"),
        pytest.param(images(n=1)[0], id="single-hwc-image"),
        pytest.param(
            {"image": images(dtype="int32") * 100, "label": np.arange(6) * 0.5},
            id="int32-and-float-labels",
        ),
        pytest.param({"image": images() > 128, "label": np.arange(6)}, id="bool-mask"),
    ],
)
def test_show_batch_draws_every_kind_of_image_batch(tmp_path, batch):
    picture = read_png(show_batch(batch, tmp_path / "batch.png"))
    # The images (random pixels) fill a good part of the canvas: it is neither blank nor flat.
    assert drawn_share(picture) > 0.2
    assert len(np.unique(picture.reshape(-1, 3), axis=0)) > 2


def test_show_batch_guesses_the_first_image_shaped_array_and_the_label_key(tmp_path):
    batch = {
        "features": np.zeros((6, 8), np.float32),  # 2-D: not an image
        "mask": np.zeros((6, 16, 16, 2), np.uint8),  # 2 channels: not an image
        "image": solid(COLOURS[:6]),
        "label": np.arange(6),
    }
    picture = read_png(show_batch(batch, tmp_path / "guessed.png"))
    for colour in COLOURS[:6]:
        assert colour_area(picture, colour) > TILE_AREA, colour


def test_show_batch_draws_at_most_max_images(tmp_path):
    few = read_png(show_batch({"image": solid(COLOURS)}, tmp_path / "few.png", max_images=2))
    many = read_png(show_batch({"image": solid(COLOURS)}, tmp_path / "many.png", max_images=16))
    assert [colour_area(few, c) > TILE_AREA for c in COLOURS] == [True] * 2 + [False] * 14
    assert all(colour_area(many, c) > TILE_AREA for c in COLOURS)


def test_show_batch_prints_class_names_beside_integer_labels(tmp_path):
    batch = {"image": solid(COLOURS[:2]), "label": np.array([0, 1])}
    named = read_png(show_batch(batch, tmp_path / "named.png", label_names=["cat", "dog"]))
    plain = read_png(show_batch(batch, tmp_path / "plain.png"))
    assert all(colour_area(named, c) > TILE_AREA for c in COLOURS[:2])
    # "cat (0)" and "dog (1)" are longer titles than "0" and "1": more text is drawn.
    assert dark_pixels(named) > 2 * dark_pixels(plain) > 0


def test_show_batch_takes_explicit_keys_and_tuple_positions(tmp_path):
    grey = np.full((6, 16, 16, 1), 77, np.uint8)
    batch = {"a": solid(COLOURS[:6]), "b": grey, "y": np.arange(6)}
    keys = read_png(show_batch(batch, tmp_path / "keys.png", image_key="b", label_key="y"))
    assert colour_area(keys, (77, 77, 77)) > 6 * TILE_AREA
    assert not any(colour_area(keys, c) > 0 for c in COLOURS[:6])
    batch = (np.arange(6), solid(COLOURS[6:12]))
    positions = read_png(show_batch(batch, tmp_path / "positions.png", image_key=1, label_key=0))
    assert all(colour_area(positions, c) > TILE_AREA for c in COLOURS[6:12])


def test_show_batch_does_not_import_pyplot_and_matplotlib_loads_lazily(tmp_path):
    code = (
        "import sys, numpy as np\n"
        "import grainlite, grainlite.tools\n"
        "assert 'matplotlib' not in sys.modules, 'imported before use'\n"
        "from grainlite.tools import show_batch\n"
        f"show_batch(np.zeros((2, 8, 8, 3), np.uint8), {str(tmp_path / 'lazy.png')!r})\n"
        "assert 'matplotlib' in sys.modules\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot state was touched'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# show_batch: errors --------------------------------------------------------------------------


def test_show_batch_of_a_dict_without_images_lists_what_it_found(tmp_path):
    batch = {"x": np.zeros((8, 5)), "label": np.arange(8)}
    with pytest.raises(GrainliteValueError) as raised:
        show_batch(batch, tmp_path / "x.png")
    assert str(raised.value) == (
        "show_batch found no image in the batch {'x': float64 array of shape (8, 5), 'label': "
        "int64 array of shape (8,)}; an image is an (N, H, W, C) or (H, W, C) numeric array with "
        "C in 1, 3 or 4. Pass image_key=... naming the images (their last axis must be the "
        "channels)."
    )


def test_show_batch_of_a_tuple_without_images_explains_the_tuple_convention(tmp_path):
    with pytest.raises(GrainliteValueError) as raised:
        show_batch((np.zeros(3), 1), tmp_path / "x.png")
    assert str(raised.value) == (
        "show_batch found no image in the batch (float64 array of shape (3,), int); an image is "
        "an (N, H, W, C) or (H, W, C) numeric array with C in 1, 3 or 4. An element that is a "
        "tuple is read as (image, label); pass image_key=<position> otherwise."
    )


def test_show_batch_of_channels_first_images_says_how_to_transpose(tmp_path):
    with pytest.raises(GrainliteValueError) as raised:
        show_batch(np.zeros((2, 3, 8, 8), np.float32), tmp_path / "x.png")
    assert str(raised.value) == (
        "show_batch cannot draw a float32 array of shape (2, 3, 8, 8): its last axis has 8 "
        "channels; an image is an (N, H, W, C) or (H, W, C) numeric array with C in 1, 3 or 4 "
        "(channels last: transpose (N, C, H, W) batches with images.transpose(0, 2, 3, 1))."
    )


def test_show_batch_of_non_numeric_images_says_to_decode_them(tmp_path):
    with pytest.raises(GrainliteTypeError) as raised:
        show_batch(np.array([[b"jpeg bytes"]]), tmp_path / "x.png")
    assert str(raised.value) == (
        "show_batch draws numeric images, got a |S10 array of shape (1, 1); decode the images "
        "(for example with cv2.imdecode) in a MapTransform before drawing them."
    )


def test_show_batch_of_something_that_is_no_batch_names_what_it_accepts(tmp_path):
    with pytest.raises(GrainliteTypeError) as raised:
        show_batch(5, tmp_path / "x.png")
    assert str(raised.value) == (
        "show_batch needs a batch (a dict, a tuple (images, labels) or an image array) or a "
        "loader, got int 5."
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"image_key": "img"},
            "image_key='img' is not in the batch, whose keys are ['image', 'label']; pass one of "
            "them.",
            id="unknown-image-key",
        ),
        pytest.param(
            {"label_key": "y"},
            "label_key='y' is not in the batch, whose keys are ['image', 'label']; pass one of "
            "them, or leave label_key=None to draw no labels.",
            id="unknown-label-key",
        ),
        pytest.param(
            {"max_images": 0},
            "max_images must be a positive int, got 0; pass max_images=N, N >= 1.",
            id="max-images-zero",
        ),
    ],
)
def test_show_batch_rejects_bad_arguments_with_the_fix(tmp_path, kwargs, message):
    batch = {"image": images(), "label": np.arange(6)}
    with pytest.raises(GrainliteValueError) as raised:
        show_batch(batch, tmp_path / "x.png", **kwargs)
    assert str(raised.value) == message


def test_show_batch_rejects_a_tuple_position_out_of_range(tmp_path):
    with pytest.raises(GrainliteValueError) as raised:
        show_batch((images(), np.arange(6)), tmp_path / "x.png", image_key=2)
    assert str(raised.value) == (
        "image_key=2 is not a position in the batch, a tuple of 2 values; pass an int in [0, 1]."
    )


def test_show_batch_rejects_keys_for_a_bare_array(tmp_path):
    with pytest.raises(GrainliteValueError) as raised:
        show_batch(images(), tmp_path / "x.png", image_key="image")
    assert str(raised.value) == (
        "image_key and label_key pick values out of a dict or tuple batch, but the batch is a "
        "uint8 array of shape (6, 16, 16, 3); leave them as None."
    )


# Device iterators, show_results and describe_batch ------------------------------------------


NAMES = ["zero", "one", "two", "three"]


def test_one_batch_and_show_batch_take_a_device_iterator_and_draw_what_the_host_batch_draws(
    tmp_path,
):
    jax = pytest.importorskip("jax")
    with grain.device_put(image_loader(), prefetch=1) as batches:
        first = one_batch(batches)
        assert isinstance(first["image"], jax.Array)
        drawn = read_png(show_batch(batches, tmp_path / "device.png", label_names=NAMES))
    host = iter(image_loader())
    with host:
        assert np.asarray(first["image"]).tobytes() == next(host)["image"].tobytes()
        expected = read_png(show_batch(next(host), tmp_path / "host.png", label_names=NAMES))
    # The same picture (its second batch), titles included: a JAX label gets its class name.
    assert np.array_equal(drawn, expected)


RED, GREEN = (207, 34, 46), (26, 127, 55)


def labelled(n: int = 4) -> dict[str, np.ndarray]:
    return {"image": solid(COLOURS[:n]), "label": np.arange(n) % 3}


def test_show_results_titles_right_predictions_in_green_and_wrong_ones_in_red(tmp_path):
    from grainlite.tools import show_results

    batch = labelled()
    right = read_png(show_results(batch, batch["label"], tmp_path / "right.png"))
    wrong = read_png(show_results(batch, np.array([0, 1, 1, 0]), tmp_path / "wrong.png"))
    assert right.shape == (520, 440, 3)  # 2 x 2 cells of 2.2 x 2.6 inches at 100 dpi
    assert all(colour_area(right, c) > TILE_AREA for c in COLOURS[:4])
    assert colour_area(right, GREEN, tolerance=40) > 0
    assert colour_area(right, RED, tolerance=40) == 0
    assert colour_area(wrong, RED, tolerance=40) > 0


def test_show_results_reads_scores_as_their_argmax(tmp_path):
    from grainlite.tools import show_results

    batch = labelled()
    scores = np.eye(3, dtype=np.float32)[[2, 1, 0, 0]] * 5.0
    from_scores = read_png(show_results(batch, scores, tmp_path / "scores.png"))
    from_labels = read_png(show_results(batch, np.array([2, 1, 0, 0]), tmp_path / "labels.png"))
    assert np.array_equal(from_scores, from_labels)


def test_show_results_draws_image_predictions_beside_the_input_and_the_target(tmp_path):
    from grainlite.tools import show_results

    batch = {"image": solid(COLOURS[:2]), "mask": np.full((2, 16, 16), 200, np.uint8)}
    predictions = np.full((2, 16, 16), 60, np.uint8)
    picture = read_png(show_results(batch, predictions, tmp_path / "masks.png", label_key="mask"))
    assert picture.shape == (440, 660, 3)  # one row of 3 cells of 2.2 inches per example
    assert all(colour_area(picture, c) > TILE_AREA for c in COLOURS[:2])
    assert colour_area(picture, (200, 200, 200)) > 2 * TILE_AREA  # the targets
    assert colour_area(picture, (60, 60, 60)) > 2 * TILE_AREA  # the predictions


def test_show_results_takes_device_arrays_as_they_are(tmp_path):
    jax = pytest.importorskip("jax")
    from grainlite.tools import show_results

    batch = labelled()
    on_host = read_png(show_results(batch, np.array([0, 1, 1, 0]), tmp_path / "host.png"))
    on_device = read_png(
        show_results(jax.device_put(batch), jax.numpy.array([0, 1, 1, 0]), tmp_path / "device.png")
    )
    assert np.array_equal(on_host, on_device)


def test_show_results_needs_one_prediction_per_image(tmp_path):
    from grainlite.tools import show_results

    with pytest.raises(GrainliteValueError) as raised:
        show_results(labelled(), np.arange(3), tmp_path / "x.png")
    assert str(raised.value) == (
        "show_results needs one prediction per image: the batch has 4 images, predictions has "
        "shape (3,); pass the model's output for this batch (labels (N,), scores (N, C) or "
        "images (N, H, W[, C]))."
    )


def test_describe_batch_prints_keys_shapes_dtypes_ranges_and_nan_counts(capsys):
    from grainlite.tools import describe_batch

    batch = {
        "image": np.arange(24, dtype=np.uint8).reshape(2, 3, 4, 1),
        "score": np.array([0.5, np.nan, -1.25], np.float32),
        "name": ["a", "b"],
        "meta": {"ids": np.array([3, 9]), "ok": np.array([True, False])},
        "all_nan": np.full(2, np.nan),
    }
    describe_batch(batch)
    assert capsys.readouterr().out.splitlines() == [
        "key       shape         dtype    min    max   nans",
        "image     (2, 3, 4, 1)  uint8    0      23    0",
        "score     (3,)          float32  -1.25  0.5   1",
        "name      (2,)          <U1      -      -     -",
        "meta/ids  (2,)          int64    3      9     0",
        "meta/ok   (2,)          bool     False  True  0",
        "all_nan   (2,)          float64  nan    nan   2",
    ]


def test_describe_batch_reads_device_arrays_and_needs_no_matplotlib():
    pytest.importorskip("jax")
    code = (
        "import sys, numpy as np, jax\n"
        "from grainlite.tools import describe_batch\n"
        "describe_batch({'x': jax.numpy.array([[1.5, 2.0]]), 'y': np.int32(4)})\n"
        "assert 'matplotlib' not in sys.modules, 'describe_batch imported matplotlib'\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.splitlines() == [
        "key  shape   dtype    min  max  nans",
        "x    (1, 2)  float32  1.5  2    0",
        "y    ()      int32    4    4    0",
    ]


@pytest.mark.parametrize("draw", ["show_batch", "show_results"])
def test_both_drawings_check_max_images_alike_quoting_a_bad_value_briefly(tmp_path, draw):
    from grainlite import tools

    batch = labelled()
    args = (batch,) if draw == "show_batch" else (batch, batch["label"])
    for bad, shown in [(0, "0"), (True, "True"), ("x" * 100_000, "'xxxx")]:
        with pytest.raises(GrainliteValueError) as raised:
            getattr(tools, draw)(*args, tmp_path / "x.png", max_images=bad)
        message = str(raised.value)
        assert message.startswith(f"max_images must be a positive int, got {shown}")
        assert message.endswith("; pass max_images=N, N >= 1.") and len(message) < 400
    drawn = read_png(getattr(tools, draw)(*args, tmp_path / "y.png", max_images=np.int64(2)))
    assert drawn.shape[0] > 0
