"""Helpers shared by the convert tests: run the command, read a conversion back, compare."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

import grainlite as grain
from grainlite.__main__ import main
from grainlite.tools.convert import open_converted


def convert(src: Any, dst: Any, *args: str) -> int:
    """Runs ``python -m grainlite convert SRC DST ARGS`` in this process; returns its status."""
    return main(["convert", str(src), str(dst), "--quiet", *args])


def read_back(dst: Any, worker_count: int = 0, decode_images: bool = False) -> list[dict]:
    """Every record of a converted folder, in key order, read through a DataLoader."""
    source, decode = open_converted(dst, decode_images=decode_images)
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(len(source), grain.NoSharding(), shuffle=False, num_epochs=1),
        operations=[decode],
        worker_count=worker_count,
    )
    with iter(loader) as elements:
        return list(elements)


def assert_examples_equal(actual: list[dict], expected: list[dict]) -> None:
    """Same number of examples, same keys, and every value equal (arrays: dtype, shape, values)."""
    assert len(actual) == len(expected)
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert sorted(got) == sorted(want), index
        for key, value in want.items():
            if isinstance(value, np.ndarray | np.generic):
                # Scalars come back as numpy scalars, arrays as arrays.
                kind = np.generic if isinstance(value, np.generic) else np.ndarray
                assert isinstance(got[key], kind), (index, key, type(got[key]))
                got_array, want_array = np.asarray(got[key]), np.asarray(value)
                assert got_array.dtype == want_array.dtype, (index, key)
                assert got_array.shape == want_array.shape, (index, key)
                np.testing.assert_array_equal(got_array, want_array, err_msg=f"{index} {key}")
            else:
                assert type(got[key]) is type(value), (index, key, type(got[key]))
                assert got[key] == value, (index, key)


def folder_bytes(folder: Any) -> dict[str, bytes]:
    """Every file of ``folder`` by name, with its bytes."""
    return {name: (Path(folder) / name).read_bytes() for name in sorted(os.listdir(folder))}
