"""The Beam pipeline (DirectRunner) writes the same bytes as the local converter.

apache-beam's pins would change the dev environment, so it lives in .venv-beam (made by
scripts/beam-venv.sh, which scripts/check runs first) and the pipeline runs as a subprocess of
that environment's Python.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from grainlite_tests.support.convert_helpers import convert, folder_bytes

ROOT = Path(__file__).resolve().parents[1]
BEAM_PYTHON = ROOT / ".venv-beam" / "bin" / "python"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def beam_python() -> Path:
    """.venv-beam's Python, after making sure the environment is installed (a no-op if so)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "beam-venv.sh")], check=True, timeout=600)
    return BEAM_PYTHON


def beam_convert(python: Path, src: Path, dst: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(python), "-m", "grainlite", "convert", str(src), str(dst), "--quiet",
               "--runner", "DirectRunner", *args]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=100, cwd=ROOT)


def make_images(root: Path) -> None:
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(1)
    for name in ("a", "b", "c"):
        (root / name).mkdir(parents=True)
        for i in range(4):
            pixels = rng.integers(0, 255, (6, 7, 3), dtype=np.uint8)
            (root / name / f"{i}.jpg").write_bytes(cv2.imencode(".jpg", pixels)[1].tobytes())


@pytest.mark.parametrize("kind", ["images", "jsonl"])
def test_beam_directrunner_writes_the_same_bytes_as_the_local_converter(
    beam_python, tmp_path, kind
):
    if kind == "images":  # Stored uncompressed.
        src = tmp_path / "images"
        make_images(src)
    else:  # Stored with zstd.
        src = tmp_path / "rows.jsonl"
        src.write_text("".join(f'{{"i": {i}, "v": {[i / 3] * (i % 4)}}}\n' for i in range(23)))
    assert convert(src, tmp_path / "local", "--num-shards", "4") == 0
    result = beam_convert(beam_python, src, tmp_path / "beam", "--num-shards", "4")
    assert result.returncode == 0, result.stderr
    expected = folder_bytes(tmp_path / "local")
    assert len(expected) == 5
    assert folder_bytes(tmp_path / "beam") == expected


def test_a_failing_beam_conversion_leaves_nothing_behind(beam_python, tmp_path):
    make_images(tmp_path / "images")
    (tmp_path / "images" / "b" / "9.jpg").write_bytes(b"not an image")
    result = beam_convert(beam_python, tmp_path / "images", tmp_path / "out", "--num-shards", "3")
    assert result.returncode != 0
    assert "9.jpg is not a readable image" in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["images"]


def test_beam_stays_out_of_the_default_install_and_the_dev_environment():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any("beam" in requirement for requirement in project["dependencies"])
    assert not any("beam" in r for r in project["optional-dependencies"]["dev"])
    assert importlib.util.find_spec("apache_beam") is None, sys.prefix
    command = [sys.executable, "-c", "import sys, grainlite.tools.convert, grainlite.__main__;"
               "import grainlite.tools.convert_command, grainlite.tools.inspect_command;"
               "print(sorted(n for n in sys.modules if n.split('.')[0] in "
               "('apache_beam', 'pyarrow', 'tensorflow_datasets', 'datasets')))"]  # fmt: skip
    assert subprocess.run(command, capture_output=True, text=True, check=True).stdout == "[]\n"


def test_a_runner_without_beam_installed_names_the_extra(tmp_path, capsys):
    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n')
    assert convert(tmp_path / "rows.jsonl", tmp_path / "out", "--runner", "DirectRunner") == 2
    error = capsys.readouterr().err
    assert error.startswith(
        "convert: error: The Beam conversion pipeline needs the module 'apache_beam', which is "
        "not installed"
    )
    assert error.endswith("install it with: pip install 'grainlite[beam]'\n")
    assert sorted(os.listdir(tmp_path)) == ["rows.jsonl"]
