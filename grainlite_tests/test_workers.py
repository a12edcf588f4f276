"""Worker processes: Grain's order and states, failures surfaced, and no leaks on any exit path."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
import traceback

import numpy as np
import pytest
from leak_check import alive

import grainlite as grain
from grainlite import shm
from grainlite.errors import WorkerDiedError
from grainlite_tests.support.contracts import (
    assert_resumes_at_every_step,
    run_with_states,
    to_plain,
)
from grainlite_tests.support.grain_peer import Config
from grainlite_tests.support.waiting import assert_gone, wait_for

pytestmark = pytest.mark.timeout(180)


def _worker_pids(iterator) -> list[int]:
    return iterator._stream.pids()


PARITY_CONFIGS = [
    Config(16, ops=("map", "filter", "batch"), batch_size=2, worker_count=3),
    Config(16, ops=("map", "filter", "batch"), batch_size=2, worker_count=2),
    Config(
        20,
        shuffle=True,
        seed=7,
        num_epochs=2,
        ops=("random_map", "batch"),
        batch_size=3,
        worker_count=2,
    ),
    Config(17, shard_index=1, shard_count=2, shuffle=True, seed=3, ops=("filter",), worker_count=3),
    Config(
        12,
        shard_index=0,
        shard_count=2,
        ops=("map", "batch"),
        batch_size=4,
        drop_remainder=True,
        worker_count=1,
    ),
    Config(10, ops=("filter", "flat_map", "batch"), batch_size=3, worker_count=2),
]


@pytest.mark.parametrize(
    "config", PARITY_CONFIGS, ids=lambda c: f"W{c.worker_count}-{'-'.join(c.ops)}"
)
def test_workers_match_grain_elements_and_states_at_every_step(config):
    lite = iter(config.build("lite"))
    with lite:
        lite_elements, lite_states = run_with_states(lite)
    grain_elements, grain_states = run_with_states(iter(config.build("grain")))
    assert lite_elements == grain_elements
    assert lite_states == grain_states


class PlusOne(grain.MapTransform):
    def map(self, x):
        return x + 1


class KeepEven(grain.FilterTransform):
    def filter(self, x):
        return x % 2 == 0


@pytest.mark.parametrize(
    "workers, expected",
    [
        (0, [[2, 4], [6, 8], [10, 12], [14, 16]]),
        (2, [[2, 4], [6, 8], [10, 12], [14, 16]]),
        (3, [[4, 10], [2, 8], [6, 12], [16], [14]]),
    ],
)
def test_each_worker_batches_its_own_records_and_the_parent_merges_round_robin(workers, expected):
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 16, 1),
        sampler=grain.IndexSampler(16, grain.NoSharding(), num_epochs=1),
        operations=[PlusOne(), KeepEven(), grain.Batch(2)],
        worker_count=workers,
    )
    with iter(loader) as iterator:
        assert [b.tolist() for b in iterator] == expected


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_restore_resumes_at_the_next_element_for_any_worker_count(workers):
    config = Config(
        14,
        shuffle=True,
        seed=11,
        num_epochs=2,
        ops=("map", "filter", "batch"),
        batch_size=3,
        worker_count=workers,
    )
    steps = None if workers == 0 else [0, 3]
    assert_resumes_at_every_step(lambda: config.build("lite"), new_loader_steps=steps)


def _shared_memory_mappings() -> set[str]:
    """The /dev/shm files this process has mapped now (unlinked ones end in "(deleted)")."""
    with open("/proc/self/maps") as maps:
        fields = (line.split(maxsplit=5) for line in maps)
        return {f[5].strip() for f in fields if len(f) == 6 and f[5].startswith("/dev/shm/")}


def test_batches_arrive_as_plain_arrays_in_reused_shared_memory():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 4096, 1),
        sampler=grain.IndexSampler(4096, grain.NoSharding(), num_epochs=1),
        operations=[grain.Batch(64)],
        worker_count=2,
    )
    before = _shared_memory_mappings()
    batches, most_mapped = 0, 0
    with iter(loader) as iterator:
        for batch in iterator:
            assert type(batch) is np.ndarray and batch.shape == (64,)
            # Workers take turns; worker w's m-th batch holds records w, w + 2, ... from 128 m on.
            worker, m = batches % 2, batches // 2
            assert batch.tolist() == list(range(128 * m + worker, 128 * (m + 1), 2))
            batches += 1
            del batch  # the user is done with it: its slab can be written again
            # Measured while the loader runs: a slab per batch would map 64 segments here.
            most_mapped = max(most_mapped, len(_shared_memory_mappings() - before))
    assert batches == 64
    assert 1 <= most_mapped <= 8, f"{most_mapped} segments mapped for 64 batches: no reuse"


def test_arrays_kept_by_the_user_stay_valid_after_the_loader_closes():
    loader = Config(40, ops=("random_map", "batch"), batch_size=4, seed=1, worker_count=2).build(
        "lite"
    )
    with iter(loader) as iterator:
        kept = [next(iterator) for _ in range(5)]
        expected = [to_plain(b) for b in kept]
        more = [next(iterator) for _ in range(3)]  # the workers keep writing slabs meanwhile
    del more
    gc.collect()
    assert [to_plain(b) for b in kept] == expected
    # Worker 0 batches records 0, 2, 4, 6 and worker 1 records 1, 3, 5, 7: the parent alternates.
    assert [row[0] for row in expected[0][3]] == [0, 2, 4, 6]
    assert [row[0] for row in expected[1][3]] == [1, 3, 5, 7]


class Explode(grain.MapTransform):
    def map(self, x):
        if x == 5:
            raise KeyError(f"boom at {x}")
        return x


def test_a_worker_exception_arrives_with_its_type_message_and_traceback_at_its_place():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 10, 1),
        sampler=grain.IndexSampler(10, grain.NoSharding(), num_epochs=1),
        operations=[Explode()],
        worker_count=2,
    )
    delivered = []
    with iter(loader) as iterator, pytest.raises(KeyError) as caught:
        for x in iterator:
            delivered.append(int(x))
    assert delivered == [0, 1, 2, 3, 4]
    assert caught.value.args == ("boom at 5",)
    notes = "\n".join(caught.value.__notes__)
    assert "raised in worker process 1" in notes and "operations[0] (Explode)" in notes
    printed = "".join(traceback.format_exception(caught.value))  # the worker's frames included
    assert "in map" in printed and "boom at 5" in printed


class ExitAt(grain.MapTransform):
    def __init__(self, at, code):
        self.at, self.code = at, code

    def map(self, x):
        if x == self.at:
            os._exit(self.code)
        return x


def test_a_worker_that_exits_becomes_an_error_naming_it_and_its_exit_code_within_seconds():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 10, 1),
        sampler=grain.IndexSampler(10, grain.NoSharding(), num_epochs=1),
        operations=[ExitAt(3, 7)],
        worker_count=2,
    )
    with iter(loader) as iterator:
        start = time.monotonic()
        with pytest.raises(WorkerDiedError) as caught:
            list(iterator)
        assert time.monotonic() - start < 10
    assert "Worker process 1" in str(caught.value)
    assert "was terminated unexpectedly with exit code 7" in str(caught.value)


def test_a_worker_killed_by_sigkill_is_reported_within_seconds():
    loader = Config(1000, ops=("map",), worker_count=2).build("lite")
    with iter(loader) as iterator:
        next(iterator)
        os.kill(_worker_pids(iterator)[0], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerDiedError, match="exit code -9 \\(killed by SIGKILL\\)"):
            list(iterator)
        assert time.monotonic() - start < 3


class ReturnsALock(grain.MapTransform):
    def map(self, x):
        import threading

        return threading.Lock()


def test_an_unpicklable_result_gets_a_clear_error():
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 4, 1),
        sampler=grain.IndexSampler(4, grain.NoSharding(), num_epochs=1),
        operations=[ReturnsALock()],
        worker_count=1,
    )
    with (
        iter(loader) as iterator,
        pytest.raises(TypeError, match="could not be sent to the parent"),
    ):
        next(iterator)


def test_an_unpicklable_pipeline_is_named_at_the_first_next_as_grain_raises_it():
    import threading

    class HoldsALock(grain.MapTransform):
        def __init__(self):
            self.lock = threading.Lock()

        def map(self, x):
            return x

    loader = grain.DataLoader(  # built as in Grain: the workers (and pickling) start at next()
        data_source=grain.RangeDataSource(0, 4, 1),
        sampler=grain.IndexSampler(4, grain.NoSharding(), num_epochs=1),
        operations=[HoldsALock()],
        worker_count=1,
    )
    with (
        iter(loader) as iterator,
        pytest.raises(TypeError, match=r"cannot pickle '_thread\.lock' object") as caught,
    ):
        next(iterator)
    assert "operations[0] (HoldsALock) cannot be pickled" in caught.value.__notes__[-1]


class RefusesPickling:
    """A data source whose pickling raises a ValueError, as one holding a live handle might."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        return index

    def __reduce__(self):
        raise ValueError("this source stays in its process")


def test_an_unpicklable_part_raises_its_own_error_with_a_note_naming_it_as_grain_does():
    from grainlite_tests.support.grain_peer import real_grain

    def build(g):
        return g.DataLoader(
            data_source=RefusesPickling(),
            sampler=g.IndexSampler(4, g.NoSharding(), num_epochs=1),
            worker_count=1,
        )

    with pytest.raises(ValueError) as theirs:
        list(build(real_grain))  # Grain raises it at the first read
    loader = build(grain)  # and so does grainlite, not when the loader is built
    with pytest.raises(ValueError) as ours:
        list(loader)
    assert type(ours.value) is type(theirs.value) is ValueError
    assert str(ours.value) == str(theirs.value) == "this source stays in its process"
    assert ours.value.__notes__ == [
        "grainlite: the DataLoader's data_source (RefusesPickling) cannot be pickled for the "
        "worker processes. Make it picklable with cloudpickle (e.g. open files and locks lazily, "
        "not in __init__), or use worker_count=0."
    ]


def test_workers_never_take_an_accelerator():
    class ReportPlatforms(grain.MapTransform):
        def map(self, x):
            return np.frombuffer(os.environ.get("JAX_PLATFORMS", "").encode(), np.uint8)

    loader = grain.DataLoader(
        data_source=[0],
        sampler=grain.IndexSampler(1, grain.NoSharding(), num_epochs=1),
        operations=[ReportPlatforms()],
        worker_count=1,
    )
    with iter(loader) as iterator:
        assert bytes(next(iterator)) == b"cpu"


@pytest.mark.parametrize("how", ["close", "exhaust", "break", "garbage-collect", "exception"])
def test_every_exit_path_leaves_no_process_and_no_shared_memory(how):
    loader = Config(200, ops=("map", "batch"), batch_size=4, worker_count=2).build("lite")
    iterator = iter(loader)
    next(iterator)
    pids = _worker_pids(iterator)
    if how == "close":
        iterator.close()
    elif how == "exhaust":
        list(iterator)
    elif how == "break":
        for _ in iterator:
            break
        del iterator
    elif how == "garbage-collect":
        del iterator
        gc.collect()
    else:
        try:
            for _ in iterator:
                raise RuntimeError("user code failed")
        except RuntimeError:
            pass
        del iterator
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def _script(body: str) -> str:
    return textwrap.dedent(
        """
        import os, sys, time
        import grainlite as grain
        loader = grain.DataLoader(
            data_source=grain.RangeDataSource(0, 10**6, 1),
            sampler=grain.IndexSampler(10**6, grain.NoSharding(), num_epochs=1),
            operations=[grain.Batch(8)],
            worker_count=2,
        )
        iterator = iter(loader)
        next(iterator)
        print(" ".join(str(pid) for pid in iterator._stream.pids()), flush=True)
        """
    ) + textwrap.dedent(body)


def _run_script(body: str, kill: signal.Signals | None) -> tuple[subprocess.Popen, list[int]]:
    process = subprocess.Popen(
        [sys.executable, "-c", _script(body)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    pids = [int(p) for p in line.split()]
    if len(pids) != 2:
        process.kill()
        _, errors = process.communicate()
        raise AssertionError(f"the script printed {line!r}; its stderr:\n{errors}")
    if kill is not None:
        # The body prints "ready" once it is where the signal should find it.
        ready = process.stdout.readline()
        if ready.strip() != "ready":
            process.kill()
            _, errors = process.communicate()
            raise AssertionError(f"the script printed {ready!r}; its stderr:\n{errors}")
        process.send_signal(kill)
    process.wait(30)
    process.stdout.close()
    process.stderr.close()
    return process, pids


def _assert_gone(pids: list[int], owner: int) -> None:
    """The workers have ended and no segment of ``owner`` is left."""
    assert_gone(pids)
    wait_for(
        lambda: not any(shm.owner_pid(n) == owner for n in shm.list_segments()),
        f"no shared-memory segment of process {owner} left",
        timeout=5,
    )


# Bodies that a signal interrupts: each prints "ready" where the signal should find it.
IDLE = 'print("ready", flush=True)\ntime.sleep(60)\n'
READING = 'for i, _ in enumerate(iterator):\n    if i == 10:\n        print("ready", flush=True)\n'


@pytest.mark.parametrize(
    "body, kill",
    [
        ("sys.exit(0)\n", None),
        (IDLE, signal.SIGINT),
        (IDLE, signal.SIGTERM),
        (IDLE, signal.SIGKILL),
        (READING, signal.SIGINT),
    ],
    ids=[
        "interpreter-exit",
        "ctrl-c-while-idle",
        "sigterm",
        "parent-sigkill",
        "ctrl-c-while-reading",
    ],
)
def test_workers_end_when_the_parent_ends_however_it_ends(body, kill):
    process, pids = _run_script(body, kill)
    _assert_gone(pids, process.pid)


@pytest.mark.shm_cleanup  # removes every stale segment of the machine
def test_stale_segments_of_a_killed_owner_are_found_and_removed():
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    segment = shm.Segment.create(128, "test", owner_pid=victim.pid)
    victim.kill()
    victim.wait()
    stale = [s.name for s in shm.stale_segments()]
    assert segment.name in stale
    removed = [s.name for s in grain.remove_stale_segments()]
    assert segment.name in removed and segment.name not in shm.list_segments()


def test_worker_count_none_means_one_worker_per_cpu():
    from grainlite.cpus import usable_cpu_count

    loader = grain.DataLoader(
        data_source=[1, 2],
        sampler=grain.IndexSampler(2, grain.NoSharding(), num_epochs=1),
        worker_count=None,
    )
    assert loader.multiprocessing_options.num_workers == usable_cpu_count()
