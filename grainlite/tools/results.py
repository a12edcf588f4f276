"""``show_results``: a model's predictions drawn beside the images and targets of a batch.

Two layouts, chosen by the shape of ``predictions``:

* labels (``(N,)`` class ids or values, or ``(N, C)`` scores, read as ``argmax`` over the last
  axis): one cell per image, titled ``target`` and ``pred``; a wrong prediction is titled in red;
* images (``(N, H, W)`` or ``(N, H, W, C)``, a mask or a restored image): one row per example,
  the input, the target (when it is an image too) and the prediction side by side.

Like ``show_batch`` it renders with matplotlib's Agg backend into a PNG (no display, no pyplot
state) and reads JAX arrays back to numpy, so a device batch and the step's output go in as they
are.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grainlite._optional import require
from grainlite.errors import GrainliteValueError
from grainlite.tools.visualize import (
    _as_array,
    _checked_max_images,
    _displayable,
    _label_text,
    _split,
)

_RIGHT, _WRONG = "#1a7f37", "#cf222e"


def _draw(axes: Any, image: np.ndarray) -> None:
    if image.ndim == 2:
        image = image[..., None]
    picture = _displayable(image)
    if picture.shape[-1] == 1:
        vmax = 255 if picture.dtype == np.uint8 else 1
        axes.imshow(picture[..., 0], cmap="gray", vmin=0, vmax=vmax)
    else:
        axes.imshow(picture)
    axes.set_axis_off()


def _as_labels(predictions: np.ndarray, count: int) -> np.ndarray:
    """Class ids from ``(N,)`` labels or ``(N, C)`` scores."""
    if predictions.ndim == 2 and predictions.shape[1] > 1:
        return predictions.argmax(axis=-1)
    return predictions.reshape(count) if predictions.ndim == 2 else predictions


def show_results(
    batch: Any,
    predictions: Any,
    path: str | os.PathLike[str],
    max_images: int = 16,
    image_key: Any = None,
    label_key: Any = None,
    label_names: Sequence[str] | None = None,
) -> Path:
    """Draws each image of ``batch`` with its target and ``predictions`` side by side, as a PNG.

    Args:
      batch: a batch as :func:`~grainlite.tools.show_batch` takes it (a dict, a tuple
        ``(images, targets)`` or an image array); its labels are the targets.
      predictions: one prediction per image: labels ``(N,)``, scores ``(N, C)`` or images
        ``(N, H, W[, C])`` (see the module doc).
      path: where to write the PNG; its folder must exist.
      max_images: at most this many examples are drawn (the first ones).
      image_key: the dict key (or tuple position) of the images; guessed when None.
      label_key: the dict key (or tuple position) of the targets; guessed when None.
      label_names: class names to print beside integer labels.

    Returns:
      The path of the PNG written.

    Raises:
      GrainliteValueError: ``predictions`` does not hold one prediction per image, or
        ``max_images`` is not positive (and every error of ``show_batch`` about the batch).
    """
    max_images = _checked_max_images(max_images)
    images, targets = _split(batch, image_key, label_key)
    predicted = np.asarray(_as_array(predictions))
    if predicted.ndim == 0 or predicted.shape[0] != len(images):
        raise GrainliteValueError(
            f"show_results needs one prediction per image: the batch has {len(images)} images, "
            f"predictions has shape {predicted.shape}; pass the model's output for this batch "
            f"(labels (N,), scores (N, C) or images (N, H, W[, C]))."
        )
    figure_module = require("matplotlib.figure", "image", "show_results")
    backend = require("matplotlib.backends.backend_agg", "image", "show_results")
    count = min(len(images), max_images)
    as_images = predicted.ndim >= 3
    target_images = (
        as_images and targets is not None and np.ndim(targets) >= 3 and len(targets) == len(images)
    )
    if as_images:
        columns = 3 if target_images else 2
        figure = figure_module.Figure(figsize=(2.2 * columns, 2.2 * count), layout="constrained")
        backend.FigureCanvasAgg(figure)
        for i in range(count):
            row = [("input", images[i])]
            if target_images:
                row.append(("target", np.asarray(targets)[i]))
            row.append(("pred", predicted[i]))
            for j, (title, picture) in enumerate(row):
                axes = figure.add_subplot(count, columns, i * columns + j + 1)
                _draw(axes, picture)
                axes.set_title(title, fontsize=8)
    else:
        labels = _as_labels(predicted, len(images))
        columns = min(count, max(1, int(np.ceil(np.sqrt(count)))))
        rows = int(np.ceil(count / columns))
        figure = figure_module.Figure(figsize=(2.2 * columns, 2.6 * rows), layout="constrained")
        backend.FigureCanvasAgg(figure)
        for i in range(count):
            axes = figure.add_subplot(rows, columns, i + 1)
            _draw(axes, images[i])
            pred = _label_text(labels, i, label_names)
            if targets is None:
                axes.set_title(f"pred: {pred}", fontsize=8)
                continue
            target = _label_text(targets, i, label_names)
            colour = _RIGHT if target == pred else _WRONG
            axes.set_title(f"target: {target}\npred: {pred}", fontsize=8, color=colour)
    target_path = Path(path)
    figure.savefig(target_path, format="png", dpi=100)
    return target_path
