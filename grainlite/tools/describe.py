"""``describe_batch``: a batch's keys, shapes, dtypes, ranges and NaN counts, as a text table.

It needs no matplotlib: a look at a batch on a headless machine, in a log, or in a test. Values
may be numpy arrays, JAX arrays (on any device: they are read back to the host), Python scalars
or strings, nested in dicts, lists and tuples.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from grainlite.tools.visualize import _as_array

_HEADER = ("key", "shape", "dtype", "min", "max", "nans")


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | bytes | int | float | bool | np.generic)


def _leaves(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(path, leaf)`` pairs, paths written as ``image`` or ``meta/ids`` or ``0``."""
    if isinstance(tree, Mapping):
        items = [(str(key), value) for key, value in tree.items()]
    elif isinstance(tree, list | tuple) and not all(_is_scalar(v) for v in tree):
        items = [(str(i), value) for i, value in enumerate(tree)]
    else:
        return [(prefix or "(batch)", tree)]
    pairs: list[tuple[str, Any]] = []
    for name, value in items:
        pairs.extend(_leaves(value, f"{prefix}/{name}" if prefix else name))
    return pairs


def _number(value: Any) -> str:
    if isinstance(value, float | np.floating):
        return f"{float(value):.4g}"
    return str(value.item() if isinstance(value, np.generic) else value)


def _row(path: str, leaf: Any) -> tuple[str, ...]:
    value = _as_array(leaf)
    if isinstance(value, list | tuple):
        value = np.asarray(value)  # a list of scalars: one row
    if not isinstance(value, np.ndarray | np.generic | int | float | bool):
        return (path, "-", type(leaf).__name__, "-", "-", "-")
    array = np.asarray(value)
    if array.dtype.kind not in "biuf" or array.size == 0:
        return (path, str(array.shape), str(array.dtype), "-", "-", "-")
    nans = int(np.isnan(array).sum()) if array.dtype.kind == "f" else 0
    finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
    low = _number(finite.min()) if finite.size else "nan"
    high = _number(finite.max()) if finite.size else "nan"
    return (path, str(array.shape), str(array.dtype), low, high, str(nans))


def describe_batch(batch: Any, file: IO[str] | None = None) -> None:
    """Prints one line per value of ``batch``: key, shape, dtype, min, max and NaN count.

    ``min`` and ``max`` are over the finite values (a float array full of NaN shows ``nan``);
    non-numeric values show ``-``. Nested dicts and tuples get paths such as ``meta/ids``.

    Args:
      batch: a batch (a dict, a tuple, an array, ...), host or device.
      file: where to print; ``sys.stdout`` when None.
    """
    rows = [_HEADER, *(_row(path, leaf) for path, leaf in _leaves(batch))]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows
    ]
    print("\n".join(lines), file=file if file is not None else sys.stdout)
