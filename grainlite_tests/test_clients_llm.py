"""MaxText- and torchtitan-style trainers, written for ``import grain`` and run unchanged through
``install_as_grain()``: the same batches, the same checkpoint files and losses as under the real
Grain 0.2.18, checkpoints that restore across the two libraries, and an exact resume. Each
program runs in a fresh interpreter (grainlite_tests/support/maxtext_client_job.py,
grainlite_tests/support/torchtitan_client_job.py), where ``grain`` is not imported yet."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).parent / "support"


def _start(job: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env.pop("GRAINLITE_AS_GRAIN", None)
    return subprocess.Popen(
        [sys.executable, str(HERE / job), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(process: subprocess.Popen[str]) -> dict[str, Any]:
    try:
        out, err = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err[-3000:]
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_maxtext_style_pipeline_gives_grains_batches_and_checkpoints_restoring_across_both(
    tmp_path,
):
    ours_dir, grain_dir = str(tmp_path / "grainlite"), str(tmp_path / "grain")
    ours = _result(_start("maxtext_client_job.py", "grainlite", ours_dir))
    theirs = _result(_start("maxtext_client_job.py", "grain", grain_dir, ours_dir))
    ours_again = _result(_start("maxtext_client_job.py", "grainlite", ours_dir + "2", grain_dir))
    assert ours["active"].startswith("grainlite ") and ours_again["active"] == ours["active"]
    assert theirs["active"] == "grain 0.2.18"
    batches = ours["batches"]
    assert len(batches) >= 10
    assert batches[0]["inputs_segment_ids"][0] == "int32"
    assert theirs["batches"] == batches
    state = "process_0-of-1.json"
    assert json.loads(ours["files"][state]) == json.loads(theirs["files"][state])
    assert ours["restored"] == batches[4:]  # saved after 4 batches
    assert theirs["cross"] == batches[4:]  # grainlite's checkpoint, restored by Grain
    assert ours_again["cross"] == batches[4:]  # Grain's checkpoint, restored by grainlite


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs the torch extra")
def test_a_torchtitan_style_loop_resumes_exactly_and_trains_as_under_grain():
    ours_process = _start("torchtitan_client_job.py", "grainlite")
    grain_process = _start("torchtitan_client_job.py", "grain")
    ours, theirs = _result(ours_process), _result(grain_process)
    assert ours["resumed_batches"] == ours["full_batches"]
    assert ours["resumed_losses"] == ours["full_losses"]
    assert ours["resumed_parameters"] == ours["full_parameters"]
    assert ours["data_state"]["dp_rank_0"] == theirs["data_state"]["dp_rank_0"]
    assert ours.pop("active").startswith("grainlite ")
    assert theirs.pop("active") == "the real grain"
    assert ours == theirs
