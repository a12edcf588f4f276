"""Ctrl-C at start-up is never lost: every SIGINT ends a W=2 loop with KeyboardInterrupt.

A SIGINT in the first milliseconds of iteration used to be swallowed about one time in ten
under load (the loop went on loading): the first element was made in the training process,
where a first-use import (NumPy's random module, a C extension) swallowed the KeyboardInterrupt
raised inside it. ``grainlite_tests.support.interrupt_job`` runs 60 trials, each in a fresh forked
process, with SIGINT 1 to 30 ms into the loop, while another process keeps a core busy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRIALS = 60

pytestmark = pytest.mark.timeout(180)


def test_every_sigint_in_the_first_30_ms_ends_the_loop_and_leaves_no_worker_or_segment():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        job = subprocess.run(
            [sys.executable, "-m", "grainlite_tests.support.interrupt_job", str(TRIALS), "27"],
            capture_output=True,
            text=True,
            timeout=150,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            cwd=REPO,
        )
    finally:
        busy.kill()
        busy.wait()
    assert job.returncode == 0, job.stderr[-3000:]
    trials = json.loads(job.stdout.splitlines()[-1])
    assert len(trials) == TRIALS
    failed = [trial for trial in trials if trial["outcome"] != "KeyboardInterrupt"]
    assert not failed, f"{len(failed)} of {TRIALS} SIGINTs did not end the loop: {failed}"
    assert not [trial for trial in trials if trial["workers_left"] or trial["segments_left"]]


IMPORTS_WHILE_ITERATING = """
import sys
import numpy as np
import grainlite as grain

class Rows(grain.MapTransform):  # of __main__: the pipeline is pickled by value
    def map(self, element):
        return np.full(16_384, element, np.float32)

if sys.argv[1] == "DataLoader":
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 10**6, 1),
        sampler=grain.IndexSampler(10**6, grain.NoSharding(), shuffle=False, num_epochs=1),
        operations=[Rows(), grain.Batch(4)],
        worker_count=2,
    )
else:
    loader = (
        grain.MapDataset.range(10**6).map(Rows()).batch(4).to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
built = set(sys.modules)
iterator = iter(loader)
for _ in range(20):
    next(iterator)
print(sorted(set(sys.modules) - built))
iterator.close()
"""


@pytest.mark.parametrize("api", ["DataLoader", "mp_prefetch"])
def test_iterating_a_loader_with_workers_imports_nothing_in_the_training_process(api):
    # CPython ends every import by running a Python weakref callback (the module lock's), and a
    # Ctrl-C that arrives then is raised in it and dropped ("Exception ignored"): a loader built
    # with workers has imported what iterating it needs (grainlite.engine.preload).
    job = subprocess.run(
        [sys.executable, "-c", IMPORTS_WHILE_ITERATING, api],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        cwd=REPO,
    )
    assert job.returncode == 0, job.stderr[-3000:]
    assert job.stdout.strip() == "[]", job.stdout
