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
