"""The features of a converted dataset: what each record holds, as written in the manifest.

A dataset is a fixed, ordered list of named features. Each has a kind:

- ``image``: an encoded image file's bytes (JPEG, PNG, ...), kept as they were read;
- ``bytes``: opaque bytes;
- ``str``: UTF-8 text;
- ``array``: a numpy array of one ``dtype`` (little endian) whose ``shape`` is fixed per dimension
  or ``None`` where it varies between records. Scalars are arrays of shape ``()``.

Every record of a dataset has every feature, checked when it is encoded, so a reader can rely on
the manifest alone.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from grainlite.errors import GrainliteValueError

KINDS = ("image", "bytes", "str", "array")


@dataclass(frozen=True)
class Feature:
    """One named feature of every record.

    Attributes:
      name: the key in the decoded record dict.
      kind: one of ``image``, ``bytes``, ``str``, ``array``.
      dtype: for arrays, the numpy dtype string (little endian, e.g. ``"<f4"``); else ``""``.
      shape: for arrays, one entry per dimension: its size, or ``None`` where records differ.
    """

    name: str
    kind: str
    dtype: str = ""
    shape: tuple[int | None, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise GrainliteValueError(
                f"Feature {self.name!r} has kind {self.kind!r}; the kinds are {', '.join(KINDS)}."
            )

    def to_json(self) -> dict[str, Any]:
        """The manifest entry of this feature."""
        entry: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == "array":
            entry["dtype"] = self.dtype
            entry["shape"] = list(self.shape)
        return entry

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> Feature:
        """The feature a manifest entry describes."""
        shape = tuple(None if size is None else int(size) for size in entry.get("shape", ()))
        return cls(str(entry["name"]), str(entry["kind"]), str(entry.get("dtype", "")), shape)

    def describe(self) -> str:
        """A short human description, e.g. ``array <f4 (None, 3)``."""
        if self.kind == "array":
            return f"array {self.dtype} {tuple(self.shape)}"
        return self.kind


def array_feature(name: str, dtype: Any, shape: Sequence[int | None]) -> Feature:
    """An ``array`` feature with ``dtype`` stored little endian."""
    return Feature(name, "array", little_endian(np.dtype(dtype)).str, tuple(shape))


def little_endian(dtype: np.dtype) -> np.dtype:
    """``dtype`` with little-endian byte order (the on-disk order of every array)."""
    return dtype.newbyteorder("<") if dtype.byteorder not in ("<", "|", "=") else dtype


def merge_shapes(
    known: tuple[int | None, ...], seen: tuple[int, ...]
) -> tuple[int | None, ...] | None:
    """The shape covering both, with ``None`` where sizes differ; None if the ranks differ."""
    if len(known) != len(seen):
        return None
    return tuple(a if a == b else None for a, b in zip(known, seen))


def check_array_value(feature: Feature, value: Any, where: str) -> np.ndarray:
    """``value`` as an array of ``feature``'s dtype, or an error naming ``where`` and the fix."""
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    dtype = _dtype(feature.dtype)
    if array.dtype != dtype:
        if array.dtype.kind in "OUSV" or not np.can_cast(array.dtype, dtype, "same_kind"):
            raise GrainliteValueError(
                f"{where}: feature {feature.name!r} is {array.dtype} {array.shape} here but "
                f"{feature.dtype} {tuple(feature.shape)} in earlier records; every record must "
                f"hold the same kind of value under a name: make the source consistent."
            )
        array = array.astype(dtype)
    shape = feature.shape
    if len(shape) != array.ndim or any(
        size is not None and size != seen for size, seen in zip(shape, array.shape)
    ):
        raise GrainliteValueError(
            f"{where}: feature {feature.name!r} has shape {array.shape} here but "
            f"{tuple(feature.shape)} in the manifest (None: any size); every record must hold "
            f"arrays of one rank and the same fixed sizes: make the source consistent."
        )
    return array


@functools.lru_cache(maxsize=64)
def _dtype(text: str) -> np.dtype:
    return np.dtype(text)
