"""``close()`` on a Dataset-API iterator waits for the read threads it started (a read in flight
finishes first), so no daemon read thread is inside array_record's C++ code when the interpreter
exits (that aborted with "terminate called without an active exception", status 134)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from array_record.python import array_record_module

from grainlite.dataset.map_dataset import MapDataset

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[1]
TRIALS = 60
MIN_THREADED_TRIALS = 45


class _SlowSource:
    """Reads that wait (release the interpreter lock), so they move to reader threads."""

    def __len__(self) -> int:
        return 5000

    def __getitem__(self, key: int) -> int:
        time.sleep(0.0003)
        return key


def _threaded_iterator(wrap: bool):
    ds = MapDataset.source(_SlowSource()).to_iter_dataset()
    iterator = iter(ds.map(lambda x: x) if wrap else ds)
    reader = iterator._parent if wrap else iterator
    for _ in range(300):
        next(iterator)
    threads = reader.read_threads
    assert threads, "slow reads should have moved to reader threads"
    return iterator, threads


@pytest.mark.parametrize("wrap", [False, True], ids=["to_iter_dataset", "map_over_it"])
def test_after_close_no_read_thread_of_the_iterator_is_alive(wrap):
    iterator, threads = _threaded_iterator(wrap)
    iterator.close()
    assert [t.name for t in threads if t.is_alive()] == []


def test_set_state_ends_the_old_read_threads_before_it_returns():
    iterator, threads = _threaded_iterator(False)
    iterator.set_state({"next_index": 7})
    assert [t.name for t in threads if t.is_alive()] == []
    assert next(iterator) == 7
    iterator.close()


# cpu_timing: whether a trial's reads move to threads is the read-ahead's timing choice, which two
# busy test processes beside it skew (a clean-clone CI run had 30 of 60 trials threaded, not 45).
@pytest.mark.cpu_timing
def test_reading_array_record_with_16_threads_then_close_and_exit_never_aborts(tmp_path):
    path = tmp_path / "records.array_record"
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    payload = os.urandom(1 << 18)
    for _ in range(120):
        writer.write(payload)
    writer.close()
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # a busy core
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "grainlite_tests.support.close_exit_trials",
                str(path),
                str(TRIALS),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=150,
        )
    finally:
        spinner.kill()
        spinner.wait()
    assert run.returncode == 0, run.stderr[-2000:]
    statuses = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(statuses) == TRIALS
    # 3: that trial's reads stayed in the consuming thread (the read-ahead's timing chose so on
    # a loaded machine), so it proves nothing either way; every other trial must exit cleanly,
    # and enough of them must have had threads for the test to mean something.
    assert [s for s in statuses if s not in (0, 3)] == [], (statuses, run.stderr[-2000:])
    assert statuses.count(0) >= MIN_THREADED_TRIALS, statuses
