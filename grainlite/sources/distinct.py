"""The distinct values of an index array (such as each key's file, in reading order), taken from
a sort instead of :func:`numpy.unique`.

numpy 2's ``np.unique`` calls ``np.ma.is_masked`` on its input, which imports ``numpy.ma`` at its
first call in a process: 9-25 ms on this project's machine. A worker paid it at its first read of
a shuffled batch (records of several files), and the training process, for a remote source,
before its downloads started. The same answers come from a sort, which imports nothing.
"""

from __future__ import annotations

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of the 1-D array ``values``, sorted (what ``np.unique`` gives)."""
    ordered = np.sort(values)
    return ordered[_new(ordered)]


def first_positions(values: np.ndarray) -> np.ndarray:
    """The positions in the 1-D array ``values`` where a value appears for the first time, in
    increasing order (one per distinct value)."""
    order = np.argsort(values, kind="stable")
    return np.sort(order[_new(values[order])])


def in_order_of_first(values: np.ndarray) -> np.ndarray:
    """The distinct values of the 1-D array ``values``, in the order they first appear."""
    return values[first_positions(values)]


def _new(ordered: np.ndarray) -> np.ndarray:
    """Where each value of the sorted ``ordered`` differs from the one before (the first: True)."""
    new = np.ones(ordered.size, dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    return new
