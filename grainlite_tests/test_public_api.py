"""The public surface: one sorted __all__, every name Grain's tutorial uses, both import paths."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import grainlite
import grainlite.python

TUTORIAL = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "grain-dataloader-tutorial.md"


def test_all_is_sorted_and_every_name_in_it_exists():
    assert grainlite.__all__ == sorted(grainlite.__all__)
    for name in grainlite.__all__:
        assert getattr(grainlite, name) is not None, name


def test_every_grain_name_the_tutorial_uses_is_exported():
    used = set(re.findall(r"\bgrain\.([A-Za-z_]\w*)", TUTORIAL.read_text()))
    used -= {"python"}
    assert used, "the tutorial seed should mention grain names"
    assert used <= set(grainlite.__all__), used - set(grainlite.__all__)


def test_grain_python_spelling_gives_the_same_objects():
    for name in grainlite.__all__:
        assert getattr(grainlite.python, name) is getattr(grainlite, name), name
    assert grainlite.python.__all__ == grainlite.__all__
    assert grainlite.PyGrainDatasetIterator is grainlite.DataLoaderIterator
    assert grainlite.InMemoryDataSource is grainlite.SharedMemoryDataSource
    assert grainlite.experimental.FlatMapTransform is grainlite.FlatMapTransform


def test_importing_grainlite_loads_no_heavy_optional_package():
    code = (
        "import sys, grainlite; "
        "heavy = {'jax', 'orbax', 'tensorflow_datasets', 'cv2', 'matplotlib', 'array_record', "
        "'tensorflow', 'torch'}; "
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
