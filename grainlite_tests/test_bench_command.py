"""python -m grainlite bench: runs a user's loader factory at several worker counts and
recommends settings; the example factory file works with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grainlite.__main__ import main as grainlite_main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "bench_pipeline.py"


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grainlite", "bench", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.timeout(150)
def test_bench_on_the_example_factory_prints_rates_tables_and_a_recommendation():
    done = run_command(
        f"{EXAMPLE}:make_loader", "--seconds", "0.3", "--workers", "0,1", "--buffer-sizes", "1,2"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rates = [line for line in lines if " records/s (" in line]
    assert rates[0].startswith("worker_count=0: ")
    assert rates[1].startswith("worker_count=1: ")
    assert any(line.startswith("grainlite stats: in-process (worker_count=0)") for line in lines)
    assert any(line.startswith("grainlite stats: 1 worker process(es)") for line in lines)
    assert any(line.startswith("Square ") for line in lines)  # the transform's row
    recommendation = [line for line in lines if line.startswith("recommendation: ")]
    assert len(recommendation) == 1
    assert recommendation[0].startswith("recommendation: worker_count=")
    assert "worker_buffer_size=" in recommendation[0]
    assert lines[-1].startswith("diagnosis at that setting: ")


def test_bench_takes_a_module_path_and_a_dataset_api_factory(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    status = grainlite_main(
        ["bench", "bench_pipeline:make_dataset", "--seconds", "0.2", "--workers", "0", "--quiet"]
    )
    out = capsys.readouterr().out.splitlines()
    assert status == 0
    assert out[0].startswith("worker_count=0: ") and "records/s" in out[0]
    assert out[1].startswith("recommendation: worker_count=0, worker_buffer_size=1")


def test_bench_with_a_factory_that_is_not_there_exits_2_and_says_what_to_pass(capsys):
    assert grainlite_main(["bench", "no_colon_here"]) == 2
    assert capsys.readouterr().err.strip() == (
        "bench: FACTORY must be path/to/file.py:function or "
        "package.module:function (got 'no_colon_here'); e.g. python -m grainlite bench "
        "examples/bench_pipeline.py:make_loader"
    )
    assert grainlite_main(["bench", f"{EXAMPLE}:missing"]) == 2
    assert "has no function 'missing'" in capsys.readouterr().err


@pytest.mark.timeout(150)
def test_the_example_factory_file_benchmarks_itself_when_run():
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "recommendation: worker_count=" in done.stdout
