"""``python -m benchmarks.remote_run`` runs end to end on tiny data: a real SeaweedFS server, the
fault proxy at 20 ms per request, every column that can run here verified (speed is never
asserted). LitData and MosaicML Streaming run only where their environments were made
(scripts/litdata-venv.sh, scripts/mosaic-venv.sh: minutes each, so CI does not make them), as
benchmarks/convert_run.py does with .venv-beam."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.remote_run import LIBRARIES, python_of

pytest.importorskip("s3fs", reason="the s3test extra (pip install 'grainlite[s3test]')")

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(
    tmp_path: Path, libraries: list[str], workloads: tuple[str, ...], records: int = 256
) -> tuple[dict, str]:
    from grainlite_tests.support.seaweed import SeaweedError, weed_binary

    try:
        weed_binary()
    except SeaweedError as e:
        pytest.skip(str(e))
    command = [
        sys.executable, "-m", "benchmarks.remote_run", f"--workloads={','.join(workloads)}",
        f"--records={records}", "--shards=2", "--repeats=1", "--time-limit=600",
        f"--libraries={','.join(libraries)}", f"--data-dir={tmp_path / 'data'}",
        f"--results-dir={tmp_path / 'results'}",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=580)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [saved] = (tmp_path / "results").glob("remote-*.json")
    return json.loads(saved.read_text()), result.stdout


def check_runs(
    saved: dict, libraries: list[str], workloads: tuple[str, ...], records: int = 256
) -> None:
    ran = [lib for lib in libraries if lib not in saved["skipped"]]
    assert {(r["workload"], r["library"]) for r in saved["runs"]} == {
        (w, lib) for w in workloads for lib in ran
    }
    for run in saved["runs"]:
        assert "error" not in run, run
        for epoch in run["epochs"]:
            assert epoch["verification"]["records"] == epoch["records"] > 0
        assert [e["records"] for e in run["epochs"]] == [records, records]  # whole epochs
        if run["workload"] == "images":
            assert run["epochs"][0]["verification"]["images_checked"] > 0
        assert run["cold_records_per_s"] > 0 and run["first_batch_s"] > 0


@pytest.mark.timeout(600)
def test_the_remote_benchmark_runs_and_verifies_grainlite_local_and_from_the_bucket(tmp_path):
    libraries = ["grainlite-local", "grainlite-remote"]
    saved, stdout = run_benchmark(tmp_path, libraries, ("images", "small"))
    check_runs(saved, libraries, ("images", "small"))
    assert "| grainlite, local disk |" in stdout and "cold (epoch 1) / grainlite local" in stdout


@pytest.mark.timeout(600)
def test_the_remote_benchmark_runs_and_verifies_grain_reading_a_record_per_request(tmp_path):
    saved, stdout = run_benchmark(tmp_path, ["grain-fsspec"], ("images",), records=128)
    check_runs(saved, ["grain-fsspec"], ("images",), records=128)
    assert saved["proxy"]["requests"] >= 2 * 128  # a GET per record, through the proxy
    assert "| Grain 0.2.18 + s3fs (a GET per record) |" in stdout


@pytest.mark.timeout(600)
def test_the_remote_benchmark_runs_and_verifies_litdata_and_mosaic(tmp_path):
    peers = [lib for lib in ("litdata", "mosaic") if python_of(lib).exists()]
    if not peers:
        pytest.skip("no .venv-litdata nor .venv-mosaic (scripts/litdata-venv.sh, mosaic-venv.sh)")
    saved, _ = run_benchmark(tmp_path, peers, ("images", "small"))
    check_runs(saved, peers, ("images", "small"))
    assert set(peers) <= set(LIBRARIES)
