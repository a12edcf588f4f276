"""grainlite.sources.distinct gives numpy.unique's answers (sorted distinct values, where each
first appears) without importing numpy.ma."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from grainlite.sources.distinct import distinct, first_positions, in_order_of_first


@pytest.mark.parametrize("size", [0, 1, 2, 7, 4096])
@pytest.mark.parametrize("high", [1, 3, 8, 10_000])
def test_the_answers_are_numpy_unique_s(size, high):
    values = np.random.default_rng(size * 31 + high).integers(0, high, size)
    unique, first = np.unique(values, return_index=True)
    np.testing.assert_array_equal(distinct(values), unique)
    np.testing.assert_array_equal(first_positions(values), np.sort(first))
    np.testing.assert_array_equal(in_order_of_first(values), values[np.sort(first)])


def test_they_import_no_numpy_ma():
    code = (
        "import sys, numpy as np; from grainlite.sources import distinct as d; "
        "v = np.array([3, 1, 3, 2]); d.distinct(v); d.in_order_of_first(v); "
        "print('numpy.ma' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
