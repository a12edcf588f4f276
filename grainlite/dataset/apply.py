"""``ds.apply(transformations)``: Grain's transform objects as dataset nodes, in order.

Each transformation becomes the node its kind calls for: a ``Map`` → ``ds.map``, a ``RandomMap``
→ ``ds.random_map`` (seeded by an upstream ``ds.seed(...)``; without one it is Grain's
``ValueError``), a ``MapWithIndex`` → ``ds.map_with_index``, a ``Filter`` → ``ds.filter``, a
``Batch`` → ``ds.batch`` and a ``FlatMap`` → Grain's ``FlatMapMapDataset`` /
``FlatMapIterDataset``. Both grainlite's transform classes and Grain's own are recognised (by
class, else by their one transform method); anything else, a ``TfRandomMap`` included (as in
Grain; ``ds.random_map`` takes one), is an error of Grain's type, ``NotImplementedError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grainlite.dataset.map_dataset import MapDataset
from grainlite.errors import UnsupportedTransformationError, shown
from grainlite.transforms.base import CLASS_KINDS, TfRandomMap
from grainlite.transforms.batch import Batch
from grainlite.transforms.kinds import METHODS


def _kind(transformation: Any) -> str | None:
    """Which node ``transformation`` becomes, or None if it is none of Grain's kinds."""
    if isinstance(transformation, type):
        return None
    if isinstance(transformation, Batch):
        return "batch"
    for cls, kind in CLASS_KINDS:
        if isinstance(transformation, cls):
            return kind
    kinds = {kind for name, kind in METHODS if callable(getattr(transformation, name, None))}
    if len(kinds) == 1:
        return kinds.pop()
    if not kinds and all(
        hasattr(transformation, field) for field in ("batch_size", "drop_remainder", "batch_fn")
    ):
        return "batch"  # Grain's Batch
    return None


def _is_tf_random_map(transformation: Any) -> bool:
    """A ``TfRandomMap`` (grainlite's, or Grain's: ``np_random_map`` and no ``random_map``)."""
    return isinstance(transformation, TfRandomMap) or (
        callable(getattr(transformation, "np_random_map", None))
        and not callable(getattr(transformation, "random_map", None))
    )


def _apply_one(ds: Any, transformation: Any) -> Any:
    if not isinstance(transformation, type) and _is_tf_random_map(transformation):
        raise UnsupportedTransformationError(
            f"Transformation type: {shown(transformation)} is not supported: apply takes no "
            "TfRandomMap, as in Grain (its Dataset API runs none). Pass it to "
            "ds.random_map(transform, seed=...) instead, or make it a RandomMap (the same "
            "method, named random_map)."
        )
    kind = _kind(transformation)
    if kind == "map":
        return ds.map(transformation)
    if kind == "random_map":
        return ds.random_map(transformation)
    if kind == "map_with_index":
        return ds.map_with_index(transformation)
    if kind == "filter":
        return ds.filter(transformation)
    if kind == "batch":
        return ds.batch(
            transformation.batch_size,
            drop_remainder=transformation.drop_remainder,
            batch_fn=transformation.batch_fn,
        )
    if kind == "flat_map":
        from grainlite.dataset import flat_map

        if isinstance(ds, MapDataset):
            return flat_map.FlatMapMapDataset(ds, transformation)
        return flat_map.FlatMapIterDataset(ds, transformation)
    raise UnsupportedTransformationError(
        f"Transformation type: {transformation!r} (of type {type(transformation).__name__}) is "
        "not supported: apply takes instances of Map, RandomMap, MapWithIndex, Filter, FlatMap "
        "and Batch, from grainlite or grain; wrap a function in one of those classes, or call "
        "ds.map(fn) directly."
    )


def apply_transformations(ds: Any, transformations: Any) -> Any:
    """``ds`` with each of ``transformations`` (one, or a sequence) applied in order.

    Args:
      ds: a ``MapDataset`` or an ``IterDataset``.
      transformations: a transform object or a list/tuple of them.

    Returns:
      The last node added (``ds`` itself for an empty list).

    Raises:
      NotImplementedError: an object that is not one of the supported transformations.
    """
    if not isinstance(transformations, Sequence) or isinstance(transformations, str | bytes):
        transformations = [transformations]
    for transformation in transformations:
        ds = _apply_one(ds, transformation)
    return ds
