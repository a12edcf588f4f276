"""Looking at the data: ``one_batch`` takes the first batch of a loader, ``show_batch`` draws one.

Both take host loaders and device iterators (:func:`grainlite.device_put`) alike: JAX arrays are
read back to numpy before drawing.

``show_batch`` writes a PNG grid of the images in a batch, each titled with its label, with
matplotlib's Agg renderer: no display, no window, no change to pyplot's global state, so it works
on a headless training machine and inside a notebook alike. matplotlib is imported when
``show_batch`` is called, never when grainlite is imported.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grainlite._optional import require
from grainlite.checks import is_int
from grainlite.errors import GrainliteTypeError, GrainliteValueError, shown

_CHANNELS = (1, 3, 4)
_LABEL_KEYS = ("label", "labels")
_BATCH_TYPES = (Mapping, tuple, list, np.ndarray)


def one_batch(loader: Iterable[Any]) -> Any:
    """The first element of ``loader`` (its first batch when the loader batches).

    A new iterator is made, read once and closed at once, so no worker process or shared memory
    outlives the call. The arrays returned stay valid after the close. An iterator passed in is
    read once and left open (it is not ours to close).

    Raises:
      GrainliteValueError: the loader produced no element.
      GrainliteTypeError: ``loader`` is not iterable.
    """
    try:
        iterator = iter(loader)
    except TypeError:
        raise GrainliteTypeError(
            f"one_batch needs a DataLoader (or another iterable), got {type(loader).__name__}; "
            f"pass the loader itself, e.g. one_batch(grain.DataLoader(...))."
        ) from None
    owned = iterator is not loader
    try:
        return next(iterator)
    except StopIteration:
        raise GrainliteValueError(
            f"one_batch got no element: {_describe_loader(loader)} is empty (its sampler selects "
            f"no record, or a filter dropped them all, or Batch(drop_remainder=True) dropped a "
            f"partial batch); check num_records and the operations."
        ) from None
    finally:
        close = getattr(iterator, "close", None)
        if owned and close is not None:
            close()


def _describe_loader(loader: Any) -> str:
    return f"the {type(loader).__name__}"


def _is_image(value: Any) -> bool:
    """(N, H, W, C) or (H, W, C) with C in 1, 3, 4 and a numeric dtype."""
    if not isinstance(value, np.ndarray) or value.ndim not in (3, 4):
        return False
    return value.shape[-1] in _CHANNELS and value.dtype.kind in "uifb"


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    return type(value).__name__


def _as_array(value: Any) -> Any:
    """numpy arrays as they are; JAX (or other array-API) arrays as numpy; anything else as is."""
    if isinstance(value, np.ndarray) or not hasattr(value, "__array__"):
        return value
    return np.asarray(value)


_IMAGE_RULE = "an image is an (N, H, W, C) or (H, W, C) numeric array with C in 1, 3 or 4"


def _pick_from_mapping(
    batch: Mapping[Any, Any], image_key: Any, label_key: Any
) -> tuple[np.ndarray, Any]:
    keys = list(batch)
    if image_key is None:
        found = [k for k in keys if _is_image(_as_array(batch[k]))]
        if not found:
            contents = ", ".join(f"{k!r}: {_describe(batch[k])}" for k in keys)
            raise GrainliteValueError(
                f"show_batch found no image in the batch {{{contents}}}; {_IMAGE_RULE}. Pass "
                f"image_key=... naming the images (their last axis must be the channels)."
            )
        image_key = found[0]
    elif image_key not in batch:
        raise GrainliteValueError(
            f"image_key={image_key!r} is not in the batch, whose keys are {keys}; pass one of them."
        )
    if label_key is None:
        label_key = next((k for k in _LABEL_KEYS if k in batch), None)
    elif label_key not in batch:
        raise GrainliteValueError(
            f"label_key={label_key!r} is not in the batch, whose keys are {keys}; pass one of "
            f"them, or leave label_key=None to draw no labels."
        )
    labels = _as_array(batch[label_key]) if label_key is not None else None
    return _as_array(batch[image_key]), labels


def _pick_from_sequence(
    batch: Sequence[Any], image_key: Any, label_key: Any
) -> tuple[np.ndarray, Any]:
    for name, key in (("image_key", image_key), ("label_key", label_key)):
        if key is not None and not (isinstance(key, int) and -len(batch) <= key < len(batch)):
            raise GrainliteValueError(
                f"{name}={key!r} is not a position in the batch, a {type(batch).__name__} of "
                f"{len(batch)} values; pass an int in [0, {len(batch) - 1}]."
            )
    if image_key is None:
        found = [i for i, value in enumerate(batch) if _is_image(_as_array(value))]
        if not found:
            contents = ", ".join(_describe(v) for v in batch)
            raise GrainliteValueError(
                f"show_batch found no image in the batch ({contents}); {_IMAGE_RULE}. An element "
                f"that is a tuple is read as (image, label); pass image_key=<position> otherwise."
            )
        image_key = found[0]
    if label_key is None and image_key in (0, -len(batch)) and len(batch) > 1:
        label_key = 1
    labels = _as_array(batch[label_key]) if label_key is not None else None
    return _as_array(batch[image_key]), labels


def _split(batch: Any, image_key: Any, label_key: Any) -> tuple[np.ndarray, Any]:
    """The images and the labels (or None) of a batch."""
    if isinstance(batch, Mapping):
        images, labels = _pick_from_mapping(batch, image_key, label_key)
    elif isinstance(batch, tuple | list):
        images, labels = _pick_from_sequence(batch, image_key, label_key)
    else:
        images, labels = _as_array(batch), None
        if image_key is not None or label_key is not None:
            raise GrainliteValueError(
                f"image_key and label_key pick values out of a dict or tuple batch, but the batch "
                f"is a {_describe(batch)}; leave them as None."
            )
    if not isinstance(images, np.ndarray) or images.ndim not in (2, 3, 4):
        raise GrainliteValueError(f"show_batch cannot draw a {_describe(images)}; {_IMAGE_RULE}.")
    if images.dtype.kind not in "uifb":
        raise GrainliteTypeError(
            f"show_batch draws numeric images, got a {_describe(images)}; decode the images (for "
            f"example with cv2.imdecode) in a MapTransform before drawing them."
        )
    if images.ndim == 2 or (images.ndim == 3 and images.shape[-1] in _CHANNELS):
        images = images[None]  # one image, not a batch
        labels = None if labels is None else [labels]
    if images.ndim == 3:  # (N, H, W): grey images
        images = images[..., None]
    if images.shape[-1] not in _CHANNELS:
        raise GrainliteValueError(
            f"show_batch cannot draw a {_describe(images)}: its last axis has "
            f"{images.shape[-1]} channels; {_IMAGE_RULE} (channels last: transpose (N, C, H, W) "
            f"batches with images.transpose(0, 2, 3, 1))."
        )
    return images, labels


def _displayable(image: np.ndarray) -> np.ndarray:
    """What imshow draws faithfully: uint8 as is, floats in [0, 1] as is, anything else rescaled."""
    if image.dtype == np.uint8:
        return image
    if image.dtype.kind == "b":
        return image.astype(np.uint8) * 255
    values = image.astype(np.float32)
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return np.zeros_like(values)
    low, high = float(finite.min()), float(finite.max())
    if image.dtype.kind == "f" and low >= 0.0 and high <= 1.0:
        return np.nan_to_num(values)
    scale = high - low if high > low else 1.0
    return np.clip(np.nan_to_num((values - low) / scale), 0.0, 1.0)


def _label_text(labels: Any, i: int, label_names: Sequence[str] | None) -> str:
    label = labels[i] if np.ndim(labels) > 0 and not isinstance(labels, str | bytes) else labels
    if isinstance(label, np.generic) or (isinstance(label, np.ndarray) and label.ndim == 0):
        label = label.item()
    if isinstance(label, bytes):
        label = label.decode("utf-8", "replace")
    if label_names is not None and isinstance(label, int) and 0 <= label < len(label_names):
        return f"{label_names[label]} ({label})"
    if isinstance(label, np.ndarray):
        return np.array2string(label, precision=2, threshold=6)
    if isinstance(label, float):
        return f"{label:.4g}"
    return str(label)


def _checked_max_images(max_images: Any) -> int:
    """``max_images`` as an ``int`` if it is a positive integer (:func:`grainlite.checks.is_int`);
    else the error both ``show_batch`` and ``show_results`` give."""
    if not is_int(max_images) or max_images < 1:
        raise GrainliteValueError(
            f"max_images must be a positive int, got {shown(max_images)}; pass max_images=N, "
            "N >= 1."
        )
    return int(max_images)


def show_batch(
    batch_or_loader: Any,
    path: str | os.PathLike[str],
    max_images: int = 16,
    image_key: Any = None,
    label_key: Any = None,
    label_names: Sequence[str] | None = None,
) -> Path:
    """Draws the images of a batch, titled with their labels, into a PNG grid at ``path``.

    Which value holds the images, when not given: in a dict, the first array shaped like images,
    ``(N, H, W, C)`` (or one ``(H, W, C)`` image) with 1, 3 or 4 channels last; in a tuple, the
    first such array, with the value after it as the label (the ``(image, label)`` convention).
    The labels are the ``label`` or ``labels`` entry of a dict. ``uint8`` images are drawn as they
    are, float images in ``[0, 1]`` too, and each other image is stretched to fill ``[0, 1]`` (so
    normalized images are still visible).

    Args:
      batch_or_loader: a batch (a dict, a tuple ``(images, labels)`` or an image array), or a
        loader, whose first batch is taken with :func:`one_batch`.
      path: where to write the PNG; its folder must exist.
      max_images: at most this many images are drawn (the first ones).
      image_key: the dict key (or tuple position) of the images; guessed when None.
      label_key: the dict key (or tuple position) of the labels; guessed when None.
      label_names: class names to print beside integer labels (``names[label]``).

    Returns:
      The path of the PNG written.

    Raises:
      GrainliteValueError: no value looks like images (the message lists what the batch holds),
        a key is not in the batch, or ``max_images`` is not positive.
      GrainliteTypeError: the batch is not a dict, tuple, list or array, or the images are not
        numeric.
    """
    max_images = _checked_max_images(max_images)
    batch = batch_or_loader
    if not isinstance(batch, _BATCH_TYPES) and not hasattr(batch, "__array__"):
        if not hasattr(batch, "__iter__"):
            raise GrainliteTypeError(
                f"show_batch needs a batch (a dict, a tuple (images, labels) or an image array) or "
                f"a loader, got {type(batch).__name__} {batch!r:.80}."
            )
        batch = one_batch(batch)
    images, labels = _split(batch, image_key, label_key)
    figure_module = require("matplotlib.figure", "image", "show_batch")
    backend = require("matplotlib.backends.backend_agg", "image", "show_batch")

    count = min(len(images), max_images)
    columns = min(count, max(1, math.ceil(math.sqrt(count))))
    rows = math.ceil(count / columns)
    figure = figure_module.Figure(figsize=(2.2 * columns, 2.4 * rows), layout="constrained")
    backend.FigureCanvasAgg(figure)  # render with Agg: no display needed
    for i in range(count):
        axes = figure.add_subplot(rows, columns, i + 1)
        image = _displayable(images[i])
        if image.shape[-1] == 1:
            axes.imshow(
                image[..., 0], cmap="gray", vmin=0, vmax=255 if image.dtype == np.uint8 else 1
            )
        else:
            axes.imshow(image)
        if labels is not None:
            axes.set_title(_label_text(labels, i, label_names), fontsize=8)
        axes.set_axis_off()
    target = Path(path)
    figure.savefig(target, format="png", dpi=100)
    return target
