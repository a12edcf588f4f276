"""A sampler sharded by itself restored onto another process count, with real JAX processes.

Two jobs save with one Orbax ``CheckpointManager`` each, at three steps (the processes stand at
different points at each): two processes without workers, and three processes with two workers
each. Then three jobs restore every step: 2 -> 1 (two workers), 2 -> 3 (no workers) and 3 -> 2
(no workers on odd steps, two on even ones). Every process builds ``IndexSampler(n,
ShardByJaxProcess(drop_remainder=...), shuffle=True, seed=...)`` with a Filter and a Batch, in
both forms: Grain's tutorial (``drop_remainder=True``) and Grain's default (without it: 23
records give blocks of unequal length for 2 and for 3 processes). For each step, what the savers
had delivered plus what the restoring processes deliver is the saving run's epochs ``<= E`` plus
a fresh run's later epochs, exactly once, with the ``E`` of the rule. The job script is
``resharding_multihost_job.py``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("orbax.checkpoint")

from grainlite_tests.support import resharding_helpers as helpers
from grainlite_tests.support import resharding_multihost_job as job
from grainlite_tests.support.multihost import free_port, run_processes

JOB = Path(__file__).parent / "support" / "resharding_multihost_job.py"
DEADLINE_S = 150.0
SAVE_WORKERS = {2: 0, 3: 2}
# (saving process count, restoring process count, restoring workers; -1 alternates 0 and 2)
RESTORES = [(2, 1, 2), (2, 3, 0), (3, 2, -1)]
FORMS = {"drop": helpers.TUTORIAL, "default": helpers.DEFAULT}


def _commands(phase, count, folder, outs, workers, form):
    port, tail = str(free_port()), [str(workers), form]
    return [
        [sys.executable, str(JOB), phase, str(i), str(count), port, str(folder), str(out), *tail]
        for i, out in enumerate(outs)
    ]


@pytest.fixture(scope="module", params=job.FORMS)
def jobs(request, tmp_path_factory):
    """For one form of sharding: runs both saving jobs side by side, then the three restoring
    jobs side by side."""
    form = request.param
    deadline = time.monotonic() + DEADLINE_S
    root = tmp_path_factory.mktemp(f"resharding-{form}")
    saves, commands = {}, []
    for count, workers in SAVE_WORKERS.items():
        saves[count] = [root / f"save{count}-{i}.json" for i in range(count)]
        commands += _commands("save", count, root / f"ckpt{count}", saves[count], workers, form)
    run_processes(commands, deadline)
    restores, commands = {}, []
    for old, new, workers in RESTORES:
        restores[old, new] = [root / f"restore{old}to{new}-{i}.json" for i in range(new)]
        folder = root / f"ckpt{old}"
        commands += _commands("restore", new, folder, restores[old, new], workers, form)
    run_processes(commands, deadline)

    def read(paths):
        return [json.loads(path.read_text()) for path in paths]

    saved, restored = (
        {k: read(v) for k, v in saves.items()},
        {k: read(v) for k, v in restores.items()},
    )
    return root, saved, restored, FORMS[form]


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    ("old", "new"), [(2, 1), (2, 3), (3, 2)], ids=["2-to-1", "2-to-3", "3-to-2"]
)
def test_a_sampler_sharded_by_itself_restores_onto_another_process_count_exactly_once(
    jobs, old, new
):
    root, saved, restored, form = jobs
    for step in sorted(job.SAVE_AFTER[old]):
        item = root / f"ckpt{old}" / str(step) / "data"
        states = [(item / f"process_{i}-of-{old}.json").read_bytes() for i in range(old)]
        before = [e for process in saved[old] for e in process[str(step)]]
        after = [e for process in restored[old, new] for e in process[str(step)]]
        last = helpers.matching_epoch(job.SPEC, before + after, old, new, form)
        assert last is not None, f"step {step}: not exactly once"
        assert last == helpers.rule_epoch(states, old, SAVE_WORKERS[old], form), f"step {step}"
    # The save points cover the start of the first epoch and a later one.
    lasts = {
        helpers.rule_epoch(
            [
                (
                    root / f"ckpt{old}" / str(step) / "data" / f"process_{i}-of-{old}.json"
                ).read_bytes()
                for i in range(old)
            ],
            old,
            SAVE_WORKERS[old],
            form,
        )
        for step in job.SAVE_AFTER[old]
    }
    assert len(lasts) > 1
