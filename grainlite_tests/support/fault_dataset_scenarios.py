"""Scenarios of the fault suite for the Dataset API and for a parent killed while its workers
start: a transform error in a block read, a flat map before a batch under ``mp_prefetch``, a
damaged ``mp_prefetch`` state.

Imported by ``fault_suite`` (after the DataLoader scenarios), which registers them in order, so
``SCENARIOS`` and the published table hold them. Same rules as there: each scenario builds a
real fault and asserts the promise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import grainlite as grain
from grainlite_tests.support.fault_registry import REPO, scenario


def _raises_at_500(x: int) -> int:
    if x == 500:
        raise ValueError("record 500 is bad")
    return x


def _skip_loop(iterator: Any) -> tuple[list[int], int]:
    """The usual loop that skips a failed element: what it delivered and how many errors."""
    delivered, errors = [], 0
    while True:
        try:
            delivered.append(next(iterator))
        except StopIteration:
            return delivered, errors
        except ValueError:
            errors += 1
            if errors > 5:  # the same error again and again: the loop would never end
                return delivered, errors


def _block_error(workers: int) -> str:
    dataset = grain.MapDataset.range(1000).map(_raises_at_500).to_iter_dataset()
    if workers:
        dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    with iter(dataset) as iterator:
        delivered, errors = _skip_loop(iterator)
    assert errors == 1, f"{errors} errors"
    assert sorted(delivered) == [x for x in range(1000) if x != 500], f"{len(delivered)} delivered"
    return "999 records delivered once, the error raised once at its place, then the stream went on"


@scenario(
    "Odd user code",
    "a transform raises for 1 of 1000 records, to_iter_dataset, W=0",
    "error once, nothing lost",
)
def block_error_in_process(tmp: Path) -> str:
    return _block_error(0)


@scenario(
    "Odd user code",
    "a transform raises for 1 of 1000 records, mp_prefetch, W=2",
    "error once, nothing lost",
)
def block_error_in_workers(tmp: Path) -> str:
    return _block_error(2)


class _One(grain.experimental.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element: int) -> list[int]:
        return [element]


@scenario(
    "Odd user code",
    "FlatMap before batch(2, drop_remainder=True), mp_prefetch W=2",
    "same batches as W=0, or warned",
)
def flat_map_before_a_batch_in_workers(tmp: Path) -> str:
    def batches(workers: int) -> tuple[list[list[int]], list[str]]:
        dataset = grain.experimental.FlatMapMapDataset(grain.MapDataset.range(10), _One())
        stream = dataset.to_iter_dataset().batch(2, drop_remainder=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if workers:
                stream = stream.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
            with iter(stream) as iterator:
                out = [batch.tolist() for batch in iterator]
        return out, [str(warning.message) for warning in caught]

    in_workers, warned = batches(2)
    assert in_workers == batches(0)[0], in_workers
    assert any("each worker drops its own partial batch" in w for w in warned), warned
    return f"the {len(in_workers)} batches of one process, and the warning about partial batches"


@scenario(
    "Hostile checkpoints",
    "mp_prefetch state with a damaged worker entry ({}, 'garbage', [1], None)",
    "ValueError naming the field",
)
def damaged_mp_prefetch_worker_entry(tmp: Path) -> str:
    dataset = (
        grain.MapDataset.range(20)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    with iter(dataset) as iterator:
        next(iterator)
        state = iterator.get_state()
    longest = 0
    for damage in ({}, "garbage", [1], None, "x" * 1_000_000):
        bad = json.loads(json.dumps(state))
        bad["iterators_in_use_states"][0] = damage
        with iter(dataset) as iterator:
            try:
                iterator.set_state(bad)
            except ValueError as error:
                assert "iterators_in_use_states[0]" in str(error), str(error)
                longest = max(longest, len(str(error)))
            else:
                raise AssertionError(f"a worker entry {damage!r:.40} was accepted")
    assert longest < 2000, longest
    return f"ValueError naming iterators_in_use_states[0] each time (longest message {longest})"


STARTING_JOB = textwrap.dedent(
    """
    import grainlite as grain

    class DropAll(grain.FilterTransform):
        # The workers never send an element, so nothing but the parent's death can end them.
        def filter(self, x):
            return False

    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 1000, 1),
        sampler=grain.IndexSampler(1000, grain.NoSharding(), num_epochs=None, seed=0),
        operations=[DropAll()],
        worker_count=2,
    )
    print("starting", flush=True)
    for _ in loader:
        pass
    """
)


def processes_with(mark: str) -> list[int]:
    """Pids of the processes whose environment holds ``mark`` (a job and its workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def processes_left_with(mark: str, timeout: float = 5.0, quiet_s: float = 0.5) -> list[int]:
    """Waits up to ``timeout`` s until no process holds ``mark`` for ``quiet_s`` s in a row;
    returns the pids still seen then ([] once none is).

    One empty look is not enough: a process in ``execve`` (a worker or fork server the killed
    job had just started) has an empty ``/proc/PID/environ`` for a moment, and then appears
    with the mark (after 4 of 126 kills at 0 s with the fork server, 1 of 120 with spawned
    workers: a look found none, the next one a process, which saw its parent gone and exited
    within 0.3 s). A process that stays is seen at every look."""
    deadline = time.monotonic() + timeout
    quiet_since = None
    while True:
        left = processes_with(mark)
        now = time.monotonic()
        if left:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        if quiet_since is not None and now - quiet_since >= quiet_s:
            return []
        if now >= deadline:
            return left
        time.sleep(0.05)


@scenario(
    "Signals",
    "SIGKILL to a job while its 2 workers start (8 moments in 0.4 s)",
    "no worker left",
)
def sigkill_while_workers_start(tmp: Path) -> str:
    for trial in range(8):
        mark = f"grainlite-fault-{os.getpid()}-{trial}-{time.monotonic_ns()}"
        job = subprocess.Popen(
            [sys.executable, "-c", STARTING_JOB],
            env=dict(os.environ, PYTHONPATH=str(REPO), GRAINLITE_FAULT_MARK=mark),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert job.stdout is not None and job.stdout.readline().strip() == "starting"
            time.sleep(0.05 * trial)
            job.send_signal(signal.SIGKILL)
            job.wait()
            left = processes_left_with(mark)
            assert not left, f"workers {left} outlived the job killed after {0.05 * trial:.2f} s"
        finally:
            for pid in processes_with(mark):
                os.kill(pid, signal.SIGKILL)
            if job.poll() is None:
                job.kill()
                job.wait()
            assert job.stdout is not None
            job.stdout.close()
    return "8 kills from 0 to 0.35 s after iter(): every worker gone within 5 s"
