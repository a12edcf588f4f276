"""A real Lightning Trainer with 2 DDP ranks on CPU over a TorchDataLoader, killed and resumed.

``examples/train_lightning.py`` runs the fits in subprocesses (Lightning's ddp strategy re-executes
``sys.argv`` for rank 1, so a fit never runs inside pytest): a first fit is SIGKILLed right after
the checkpoint of step 4 (mid-epoch 0), a second resumes from it and is SIGKILLed after step 12
(the last batch of epoch 1), a third resumes from that to the end of epoch 3. Its report says what
every rank trained on, step by step.
"""

from __future__ import annotations

import json

import grain.python as reference
import pytest
from leak_check import alive

from grainlite import shm
from grainlite_tests.support.example_runs import run_example

NUM_RECORDS, EPOCHS, BATCHES, SEED = 48, 4, 6, 7


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The example's report, from one run of its three fits."""
    workdir = tmp_path_factory.mktemp("lightning")
    output = run_example(
        "train_lightning.py", "--workdir", str(workdir), "--report", str(workdir / "report.json")
    )
    assert "verified: both ranks trained on the 24 batches of an uninterrupted run" in output
    return json.loads((workdir / "report.json").read_text())


def grain_epoch(rank: int, epoch: int) -> set[int]:
    """Record keys of epoch ``epoch`` on ``rank`` in Grain's endless IndexSampler."""
    sampler = reference.IndexSampler(
        NUM_RECORDS, reference.ShardOptions(rank, 2), shuffle=True, num_epochs=None, seed=SEED
    )
    per_rank = NUM_RECORDS // 2
    return {sampler[rank + 2 * (epoch * per_rank + j)].record_key for j in range(per_rank)}


pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def test_each_rank_trains_on_exactly_the_batches_of_an_uninterrupted_run(report):
    for rank in report["ranks"]:
        assert rank["steps"] == list(range(1, EPOCHS * BATCHES + 1))  # no step lost or repeated
        assert rank["trained"] == rank["expected"]


def test_the_runs_were_killed_mid_epoch_and_after_the_last_batch_of_an_epoch(report):
    for rank in report["ranks"]:
        phases = rank["phases"]
        assert phases.count("killed-mid-epoch") == 4  # steps 1-4: 4 of epoch 0's 6 batches
        assert phases.count("killed-at-epoch-end") == 8  # steps 5-12: the rest of epoch 0, epoch 1
        assert phases.count("finished") == 12


def test_ranks_read_disjoint_shards_covering_every_record_once_per_epoch(report):
    for epoch in range(EPOCHS):
        shards = [
            {i for batch in rank["trained"][epoch * BATCHES : (epoch + 1) * BATCHES] for i in batch}
            for rank in report["ranks"]
        ]
        assert shards[0] | shards[1] == set(range(NUM_RECORDS))
        assert not shards[0] & shards[1]
        assert shards == [grain_epoch(0, epoch), grain_epoch(1, epoch)]


def test_every_epoch_comes_in_a_new_order(report):
    for rank in report["ranks"]:
        epochs = [str(rank["trained"][e * BATCHES : (e + 1) * BATCHES]) for e in range(EPOCHS)]
        assert len(set(epochs)) == EPOCHS
        assert rank["epochs"] == [e for e in range(EPOCHS) for _ in range(BATCHES)]


def test_lightning_counts_len_loader_batches_and_training_step_gets_tensors(report):
    for rank in report["ranks"]:
        assert rank["starts"] == [{"len": BATCHES, "num_training_batches": BATCHES}] * 3
        assert rank["tensors"]


def test_no_loader_worker_is_left_once_trainer_fit_returns(report):
    for rank in report["ranks"]:
        assert rank["workers_left_after_fit"] == []


def test_the_killed_runs_left_no_process_and_no_shared_memory(report):
    assert report["killed_pids"]  # both ranks and their workers, twice
    assert not [pid for pid in report["killed_pids"] if alive(pid)]
    owners = set(report["killed_pids"])
    assert not [name for name in shm.list_segments() if shm.owner_pid(name) in owners]
