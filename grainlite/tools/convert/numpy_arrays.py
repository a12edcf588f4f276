"""Input kind ``numpy``: a ``.npy`` file (one feature, named after the file) or a ``.npz`` file
(one feature per array). Record ``i`` holds row ``i`` of every array, so all arrays must have the
same first dimension. Object arrays are refused: loading them would unpickle. A ``.npy`` file is
memory-mapped; the arrays of a ``.npz`` file are loaded whole, once per process that reads them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from grainlite.errors import GrainliteValueError
from grainlite.tools.convert.features import array_feature
from grainlite.tools.convert.source import InputSource


@dataclass
class NumpySource(InputSource):
    """The rows of the arrays of one ``.npy`` or ``.npz`` file."""

    def __post_init__(self) -> None:
        self._arrays: dict[str, np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_arrays"] = None  # Loaded again by the process that reads.
        return state

    def read(self, start: int, stop: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """Rows ``[start, stop)`` of every array."""
        if self._arrays is None:
            self._arrays = _load(self.path)
        arrays = self._arrays
        for index in range(start, stop):
            yield f"{self.path} row {index}", {name: array[index] for name, array in arrays.items()}

    def close(self) -> None:
        """Drops the arrays this process loaded."""
        self._arrays = None


def _load(path: str) -> dict[str, np.ndarray]:
    try:
        if path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as archive:
                return {name: archive[name] for name in archive.files}
        stem = os.path.splitext(os.path.basename(path))[0]
        return {stem: np.load(path, mmap_mode="r", allow_pickle=False)}
    except ValueError as error:
        if "allow_pickle" not in str(error) and "Python objects" not in str(error):
            raise
        raise GrainliteValueError(
            f"{path} holds an object array (ragged rows, or Python objects), which only loads by "
            f"unpickling, and grainlite never unpickles; save regular arrays (pad ragged rows to "
            f"one length, or write them as JSON Lines) and convert again."
        ) from None


def open_numpy(path: str) -> NumpySource:
    """The rows of ``path``'s arrays, after checking they line up."""
    arrays = _load(path)
    if not arrays:
        raise GrainliteValueError(f"{path} holds no arrays; save at least one with np.savez.")
    lengths = {name: (array.shape[0] if array.ndim else None) for name, array in arrays.items()}
    if None in lengths.values() or len(set(lengths.values())) != 1:
        raise GrainliteValueError(
            f"{path}: the arrays have first dimensions {lengths} (None: a scalar); record i is "
            f"row i of every array, so all need the same number of rows (ragged arrays): save "
            f"arrays of equal length, or convert them separately."
        )
    features = tuple(array_feature(n, a.dtype, a.shape[1:]) for n, a in arrays.items())
    for feature, array in zip(features, arrays.values()):
        if array.dtype.kind in "OUSVMm":
            raise GrainliteValueError(
                f"{path}: array {feature.name!r} has dtype {array.dtype}; convert stores numeric "
                f"and bool arrays: save strings as JSON Lines instead."
            )
    size = sum(array.nbytes for array in arrays.values())
    return NumpySource("numpy", path, features, next(iter(lengths.values())) or 0, size)
