"""Rank sharding from torch.distributed, with real gloo ranks; the plain-torch DDP example."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grainlite.torch import ShardByTorchRank
from grainlite_tests.support.example_runs import run_example

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(30)
def test_without_a_process_group_it_is_one_shard_of_one():
    shard = ShardByTorchRank(drop_remainder=True)
    assert (shard.shard_index, shard.shard_count, shard.drop_remainder) == (0, 1, True)
    assert repr(shard) == "ShardByTorchRank(shard_index=0, shard_count=1, drop_remainder=True)"


@pytest.mark.timeout(60)
def test_shard_by_jax_process_never_imports_torch_itself():
    code = (
        "import sys, warnings; warnings.simplefilter('error'); import grainlite as grain; "
        "grain.ShardByJaxProcess(); print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True
    )
    assert result.stdout.strip() == "False"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_gloo_ranks_get_their_own_shards_gather_filtered_states_and_jax_warns_once(tmp_path):
    out = tmp_path / "ranks.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "grainlite_tests" / "support" / "torch_ranks_job.py"),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = json.loads(out.read_text())
    for rank, report in enumerate(ranks):
        assert report["shard"] == (
            f"ShardByTorchRank(shard_index={rank}, shard_count=2, drop_remainder=False)"
        )
        assert report["loader"] == [rank, 2, 1]
        assert (
            report["jax"]
            == ["ShardByJaxProcess(shard_index=0, shard_count=1, drop_remainder=False)"] * 2
        )
        assert report["warnings"] == [
            "ShardByJaxProcess() is (0, 1) because JAX runs one process, but torch.distributed "
            "runs 2 ranks: every rank reads every record. Pass "
            "shard_options=grainlite.torch.ShardByTorchRank() to give each rank its own shard."
        ]
        assert report["gathered"] == ["from rank 0", "from rank 1"]
        assert report["filtered"] == {
            "world_size": 2,
            "own_state_saved": True,
            "states_differ": True,
            "resumed_exactly": True,
        }
    first, second = ({i for batch in report["epoch"] for i in batch} for report in ranks)
    assert first | second == set(range(10)) and not first & second


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_plain_torch_ddp_example_trains_on_disjoint_shards_and_resumes_exactly():
    output = run_example("train_torch_ddp.py")
    assert (
        "verified: 2 ranks x 6 batches per epoch, disjoint shards covering all 40 records" in output
    )
