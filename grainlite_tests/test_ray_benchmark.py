"""``python -m benchmarks.ray_run`` runs end to end: a short run on a small data set prints the
table with both backends' steady numbers and the two ratios, for the ``small`` and ``light``
workloads (speed itself is never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grainlite_tests.support.ray_state import private_ray_tmpdir

pytest.importorskip("ray", reason="the ray extra (pip install 'grainlite[ray]')")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
def test_a_short_ray_benchmark_run_prints_both_backends_and_both_ratios(tmp_path):
    command = [
        sys.executable,
        "-m",
        "benchmarks.ray_run",
        "--workloads=small,light",
        "--small=8192",
        "--repeats=1",
        "--warmup=4",
        "--seconds=0.5",
        f"--data-dir={tmp_path}",
    ]
    with private_ray_tmpdir():  # the benchmark's Ray instance writes its files there
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    by_workload: dict[str, dict[str, list[str]]] = {"small": {}, "light": {}}
    for line in result.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] in by_workload:
            by_workload[cells[0]][cells[1]] = cells
    for rows in by_workload.values():
        check_rows(rows, result.stdout)
    assert "load average" in result.stdout and "4 more" in result.stdout


def check_rows(rows: dict[str, list[str]], stdout: str) -> None:
    assert set(rows) == {"local", "Ray"}, stdout
    for cells in rows.values():  # first batch, records/s and the four CPU columns are numbers
        assert all(float(cell.replace(",", "")) >= 0 for cell in cells[2:8]), cells
        assert float(cells[3].replace(",", "")) > 0
    rate_ratio, cpu_ratio = float(rows["Ray"][8]), float(rows["Ray"][9])
    assert rate_ratio > 0 and cpu_ratio > 0
    assert rows["local"][8:] == ["", ""]
