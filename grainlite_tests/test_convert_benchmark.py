"""benchmarks/convert_run.py runs on a tiny folder, checks its conversion, and prints its rows."""

from __future__ import annotations

import pytest

from benchmarks import convert_run

pytest.importorskip("cv2")
pytestmark = pytest.mark.timeout(60)


def test_the_convert_benchmark_measures_baseline_and_convert_on_the_images_folder(tmp_path, capsys):
    convert_run.main(
        ["--records", "24", "--repeats", "1", "--num-shards", "3", "--no-beam",
         "--data-dir", str(tmp_path)]
    )  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("images source folder: 24 JPEGs, 3 shards, median of 1 interleaved")
    labels = [line[:46].strip() for line in out[2:]]
    assert labels == [
        "baseline (read + write unchanged, 1 process)",
        "convert --workers 2",
        "convert --workers 1 (for comparison)",
    ]
    folder = tmp_path / "images-folder-n24-seed0"
    assert sum(1 for path in folder.rglob("*.jpg")) == 24
