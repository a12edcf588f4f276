"""Small datasets made on the spot, so that the docs, the examples and the tests run offline.

Two kinds, both written in a few hundred milliseconds:

* :func:`build_imagenet_a` writes a tiny TFDS dataset that stands in for ``imagenet_a``: same
  name, version, features and split as the real one, so ``tfds.data_source("imagenet_a",
  split="test", data_dir=...)`` reads it exactly as Grain's tutorial reads the real dataset. No
  TensorFlow is involved: TFDS is given JPEG bytes and writes ``array_record`` files.
* :func:`write_classification_records` writes an ArrayRecord file of labelled feature vectors
  (``encode_example`` / ``decode_example``), the input of the JAX training example.

The pictures are synthetic (a gradient, a shape whose kind and colour depend on the label), so
``show_batch`` has something recognisable to draw. Everything is seeded: the same call writes the
same records.

Scaffolding of this repository, not part of the ``grainlite`` package: the example scripts import
it as their neighbour (``from stand_in_data import build_imagenet_a``), and the tests and the docs
build put ``examples/`` on ``sys.path`` to do the same.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from grainlite._optional import require

IMAGENET_A_NAME = "imagenet_a"
"""The TFDS name of the stand-in; the real dataset's name, so the tutorial's call is unchanged."""

IMAGENET_A_VERSION = "0.1.0"
"""The version of the real ``imagenet_a`` in TFDS, which the stand-in copies."""

IMAGENET_A_CLASSES = 1000
"""``label`` is a ClassLabel over the 1000 ImageNet classes, as in the real dataset."""

_SHAPES = ("disc", "square", "triangle", "ring")


def synthetic_picture(label: int, rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """An RGB ``uint8`` picture of shape ``(height, width, 3)``: a shape drawn over a gradient.

    The shape's kind is ``label % 4`` (disc, square, triangle, ring) and its hue follows the label,
    so pictures of one class look alike; position and size come from ``rng``.
    """
    cv2 = require("cv2", "image", "Drawing the stand-in pictures")
    top = rng.integers(0, 256, size=3)
    bottom = rng.integers(0, 256, size=3)
    ramp = np.linspace(0.0, 1.0, height)[:, None, None]
    picture = ((1 - ramp) * top + ramp * bottom).astype(np.uint8)
    picture = np.ascontiguousarray(np.broadcast_to(picture, (height, width, 3)))
    hue = (label * 37) % 180
    hsv = np.array([[[hue, 220, 230]]], dtype=np.uint8)
    colour = tuple(int(c) for c in cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)[0, 0])
    size = int(min(height, width) * rng.uniform(0.25, 0.4))
    cx = int(rng.integers(size, max(size + 1, width - size)))
    cy = int(rng.integers(size, max(size + 1, height - size)))
    shape = _SHAPES[label % len(_SHAPES)]
    if shape == "disc":
        cv2.circle(picture, (cx, cy), size, colour, thickness=-1)
    elif shape == "square":
        cv2.rectangle(picture, (cx - size, cy - size), (cx + size, cy + size), colour, -1)
    elif shape == "triangle":
        corners = np.array([[cx, cy - size], [cx - size, cy + size], [cx + size, cy + size]])
        cv2.fillPoly(picture, [corners.astype(np.int32)], colour)
    else:
        cv2.circle(picture, (cx, cy), size, colour, thickness=max(2, size // 3))
    return picture


def encode_jpeg(picture: np.ndarray) -> bytes:
    """JPEG bytes of an RGB ``uint8`` picture (what ``tfds.features.Image`` wants without TF)."""
    cv2 = require("cv2", "image", "Encoding the stand-in pictures")
    ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(picture, cv2.COLOR_RGB2BGR))
    if not ok:  # pragma: no cover - OpenCV encodes any uint8 RGB picture
        raise RuntimeError("OpenCV could not encode a picture as JPEG")
    return bytes(encoded.tobytes())


def imagenet_a_examples(num_images: int, seed: int = 0) -> list[dict[str, Any]]:
    """The stand-in's records before encoding: ``image`` (JPEG bytes), ``label``, ``file_name``.

    Sizes vary between 64 and 128 pixels a side, as real photos vary, so a resize is needed
    before batching, as in the tutorial.
    """
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(num_images):
        label = int(rng.integers(0, IMAGENET_A_CLASSES))
        height, width = (int(v) for v in rng.integers(64, 129, size=2))
        picture = synthetic_picture(label, rng, height, width)
        examples.append(
            {
                "image": encode_jpeg(picture),
                "label": label,
                "file_name": f"stand_in_{i:04d}_{_SHAPES[label % len(_SHAPES)]}.jpg",
            }
        )
    return examples


def _imagenet_a_builder(num_images: int, seed: int) -> Any:
    """A TFDS builder class for the stand-in (made here because TFDS is imported lazily)."""
    tfds = require("tensorflow_datasets", "tfds", "Building the imagenet_a stand-in")

    class ImagenetAStandIn(tfds.core.GeneratorBasedBuilder, skip_registration=True):  # type: ignore[name-defined, misc, call-arg]
        """``imagenet_a`` 0.1.0's features and split, with a few synthetic pictures."""

        name = IMAGENET_A_NAME
        VERSION = tfds.core.Version(IMAGENET_A_VERSION)
        # TFDS looks for a checksums file beside the module of a builder that lives in a package,
        # and on the way needs the `importlib_resources` backport (tensorflow-datasets 4.9.10). A
        # module name without dots makes it skip that search: this builder downloads nothing.
        __module__ = "grainlite_stand_in_data"

        def _info(self) -> Any:
            # dataset_info_from_configs() only works for builders inside a TFDS package.
            features = tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(encoding_format="jpeg"),
                    "label": tfds.features.ClassLabel(num_classes=IMAGENET_A_CLASSES),
                    "file_name": tfds.features.Text(),
                }
            )
            return tfds.core.DatasetInfo(builder=self, features=features)

        def _split_generators(self, dl_manager: Any) -> Any:
            return {"test": self._generate_examples()}

        def _generate_examples(self) -> Any:
            yield from enumerate(imagenet_a_examples(num_images, seed))

    return ImagenetAStandIn


def imagenet_a_dir(data_dir: str | os.PathLike[str]) -> Path:
    """Where the stand-in's files go under ``data_dir``: ``<data_dir>/imagenet_a/0.1.0``."""
    return Path(data_dir) / IMAGENET_A_NAME / IMAGENET_A_VERSION


def build_imagenet_a(data_dir: str | os.PathLike[str], num_images: int = 40, seed: int = 0) -> str:
    """Writes the ``imagenet_a`` stand-in under ``data_dir`` (once) and returns ``data_dir``.

    Afterwards ``tfds.data_source("imagenet_a", split="test", data_dir=data_dir)`` reads it like
    the real dataset: records are dicts with ``image`` (an RGB ``uint8`` array), ``label`` (an int
    in [0, 1000)) and ``file_name`` (bytes). If the folder already holds a prepared stand-in it is
    reused as it is. TFDS's progress bars and messages are silenced while it builds.

    Args:
      data_dir: the TFDS data directory to write into (created if missing).
      num_images: how many pictures the ``test`` split holds.
      seed: makes the pictures, labels and sizes; the same seed writes the same dataset.

    Returns:
      ``data_dir`` as a string, ready for ``tfds.data_source(..., data_dir=...)``.
    """
    if isinstance(num_images, bool) or not isinstance(num_images, int) or num_images < 1:
        from grainlite.errors import GrainliteValueError

        raise GrainliteValueError(
            f"num_images must be a positive int, got {num_images!r}; pass num_images=N with N >= 1."
        )
    tfds = require("tensorflow_datasets", "tfds", "Building the imagenet_a stand-in")
    from tensorflow_datasets.core.utils import tqdm_utils

    builder = _imagenet_a_builder(num_images, seed)(
        data_dir=os.fspath(data_dir), file_format="array_record"
    )
    showing_bars = tqdm_utils._active
    tfds.display_progress_bar(False)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # TFDS prints "Downloading and preparing"
            builder.download_and_prepare()
    finally:
        tfds.display_progress_bar(showing_bars)
    return os.fspath(data_dir)


# Classification records for the training example ---------------------------------------------

_LABEL_BYTES = 8


def encode_example(features: np.ndarray, label: int) -> bytes:
    """One record: the label (little-endian int64), then the features (little-endian float32)."""
    return (
        int(label).to_bytes(_LABEL_BYTES, "little", signed=True)
        + np.asarray(features, dtype="<f4").tobytes()
    )


def decode_example(record: bytes) -> dict[str, Any]:
    """The inverse of :func:`encode_example`: ``{"features": float32 array, "label": int64}``."""
    label = np.int64(int.from_bytes(record[:_LABEL_BYTES], "little", signed=True))
    features = np.frombuffer(record, dtype="<f4", offset=_LABEL_BYTES).astype(np.float32)
    return {"features": features, "label": label}


def classification_data(
    num_records: int, num_features: int = 16, num_classes: int = 4, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Features ``(num_records, num_features)`` float32 and labels ``(num_records,)`` int64.

    Each class has a random centre; a record is its class centre plus unit Gaussian noise. The
    centres are close enough that the classes overlap: a small model learns most of it in a few
    dozen steps, and the loss stays well above zero.
    """
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=0.4, size=(num_classes, num_features))
    labels = rng.integers(0, num_classes, size=num_records)
    features = centres[labels] + rng.normal(size=(num_records, num_features))
    return features.astype(np.float32), labels.astype(np.int64)


def write_classification_records(
    path: str | os.PathLike[str],
    num_records: int = 512,
    num_features: int = 16,
    num_classes: int = 4,
    seed: int = 0,
) -> str:
    """Writes :func:`classification_data` to one ArrayRecord file, one example per record.

    Read it back with ``grain.ArrayRecordDataSource(path)`` and a MapTransform that calls
    :func:`decode_example`. Returns ``path`` as a string.
    """
    from array_record.python import array_record_module as arm  # a core dependency

    features, labels = classification_data(num_records, num_features, num_classes, seed)
    writer = arm.ArrayRecordWriter(os.fspath(path), "group_size:1")
    try:
        for row, label in zip(features, labels):
            writer.write(encode_example(row, int(label)))
    finally:
        writer.close()
    return os.fspath(path)
