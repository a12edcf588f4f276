"""The public surface: one sorted __all__, every name Grain's tutorial uses, both import paths."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import grainlite
import grainlite.python

ROOT = Path(__file__).resolve().parents[1]
# The Grain tutorial as this repository runs it (its code is the tutorial's, unchanged).
TUTORIALS = [
    ROOT / "docs" / "tutorials" / "data_loader_tutorial.md",
    ROOT / "examples" / "tutorial.py",
]


def test_all_is_sorted_and_every_name_in_it_exists():
    assert grainlite.__all__ == sorted(grainlite.__all__)
    for name in grainlite.__all__:
        assert getattr(grainlite, name) is not None, name


def test_every_grain_name_the_tutorial_uses_is_exported():
    text = "\n".join(path.read_text() for path in TUTORIALS)
    used = set(re.findall(r"\bgrain\.([A-Za-z_]\w*)", text))
    used -= {"python"}
    assert {"IndexSampler", "DataLoader", "GrainCheckpointSave", "InMemoryDataSource"} <= used
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
