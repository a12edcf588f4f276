"""Workers are forked by one preloaded server process, a fresh interpreter: nothing of the
training process (its threads, its JAX state, its environment beyond the worker environment)
reaches them, the server forks only while it has one thread, a server that dies takes its
workers with it and the loader says so, and a training process that dies leaves neither a
worker nor a worker's shared memory.

Each test reads real worker processes: a transform returns what it sees in the process that runs
it, and ``/proc`` gives the processes' parents and threads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import grainlite as grain
from grainlite import shm
from grainlite.engine.forkserver_client import WORKER_START_ENV
from grainlite.errors import WorkerDiedError
from grainlite_tests.support.waiting import assert_gone, wait_for

pytestmark = pytest.mark.timeout(120)


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


class WhatTheWorkerHas(grain.MapTransform):
    """Any record -> what the process that runs the transform holds."""

    def map(self, record: int) -> dict[str, object]:
        return {
            "pid": os.getpid(),
            "threads": sorted(t.name for t in threading.enumerate()),
            "native_threads": threads_of(os.getpid()),
            "jax_imported": "jax" in sys.modules,
            "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS"),
            "marker": os.environ.get("H43_SET_AFTER_THE_LOADER_STARTED"),
        }


def loader(records: int = 4, workers: int = 2, operations: list | None = None) -> grain.DataLoader:
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, records, 1),
        sampler=grain.IndexSampler(records, grain.NoSharding(), num_epochs=1),
        operations=operations if operations is not None else [WhatTheWorkerHas()],
        worker_count=workers,
    )


def test_every_worker_is_forked_by_one_server_that_the_training_process_started():
    with iter(loader(workers=3)) as iterator:
        seen = [next(iterator) for _ in range(3)]
        pids = {element["pid"] for element in seen}
        assert len(pids) == 3
        servers = {parent_of(pid) for pid in pids}
        assert len(servers) == 1
        (server,) = servers
        assert server != os.getpid()
        assert parent_of(server) == os.getpid()


def test_the_server_has_one_thread_while_it_forks_and_after():
    with iter(loader(records=100, workers=2)) as iterator:
        worker = next(iterator)["pid"]
        assert threads_of(parent_of(worker)) == 1


@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_nothing_of_the_training_process_reaches_a_worker(api, monkeypatch):
    import jax.numpy as jnp

    assert float(jnp.ones(3).sum()) == 3.0  # JAX is initialised here, with its threads
    stop = threading.Event()
    training_thread = threading.Thread(target=stop.wait, name="training-thread-h43", daemon=True)
    training_thread.start()
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    try:
        if api == "loader":
            stream = iter(loader(workers=2))
        else:
            dataset = grain.MapDataset.range(4).map(WhatTheWorkerHas()).to_iter_dataset()
            stream = iter(dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
        with stream:
            seen = [next(stream) for _ in range(2)]
    finally:
        stop.set()
        training_thread.join()
    for element in seen:
        assert "training-thread-h43" not in element["threads"]
        # Every thread of the worker is one of its own Python threads (the main thread and the
        # parent watch): no native thread of JAX or of the training process came with it.
        assert element["native_threads"] == len(element["threads"])
        assert element["jax_imported"] is False
        assert element["JAX_PLATFORMS"] == "cpu"  # the worker environment


class DrawsFromTheGlobalRandomState(grain.MapTransform):
    """Any record -> a draw of NumPy's global random state in the worker. It holds a
    ``RandomState``, so its pickle names ``numpy.random`` and the server imports it first."""

    def __init__(self) -> None:
        self.held = np.random.RandomState(0)

    def map(self, record: int) -> float:
        return float(np.random.random())


def test_workers_draw_different_numbers_from_numpys_global_random_state():
    with iter(loader(workers=4, operations=[DrawsFromTheGlobalRandomState()])) as iterator:
        draws = [next(iterator) for _ in range(4)]
    assert len(set(draws)) == 4, draws


def test_the_worker_environment_is_the_one_of_the_loader_being_started(monkeypatch):
    monkeypatch.setenv("H43_SET_AFTER_THE_LOADER_STARTED", "first")
    with iter(loader(workers=1)) as iterator:
        assert next(iterator)["marker"] == "first"
    monkeypatch.setenv("H43_SET_AFTER_THE_LOADER_STARTED", "second")
    with iter(loader(workers=1)) as iterator:
        assert next(iterator)["marker"] == "second"


def test_a_killed_server_takes_its_workers_and_the_loader_reports_a_dead_worker():
    iterator = iter(loader(records=100_000, workers=2, operations=[]))
    try:
        next(iterator)
        workers = iterator._stream.pids()
        server = parent_of(workers[0])
        assert server != os.getpid()
        os.kill(server, signal.SIGKILL)
        assert_gone(workers, timeout=5.0)
        with pytest.raises(WorkerDiedError):
            for _ in range(100_000):
                next(iterator)
    finally:
        iterator.close()


def test_the_spawn_start_makes_each_worker_a_child_of_the_training_process(monkeypatch):
    monkeypatch.setenv(WORKER_START_ENV, "spawn")
    with iter(loader(workers=2)) as iterator:
        pids = {next(iterator)["pid"] for _ in range(2)}
        assert {parent_of(pid) for pid in pids} == {os.getpid()}


def test_close_leaves_neither_the_server_nor_a_worker():
    iterator = iter(loader(records=100_000, workers=2, operations=[]))
    next(iterator)
    workers = iterator._stream.pids()
    server = parent_of(workers[0])
    assert server != os.getpid()
    iterator.close()
    assert_gone([server, *workers], timeout=5.0)


# A training process whose two workers, after the first batch, sleep in a transform: there they
# read neither their channel nor their parent pid (the server's, which outlives the training
# process). Each worker marks a file in MARKS once it sleeps. DEAF: the worker blocks SIGTERM
# first, as a C call that holds signals would (its handler can then not run in time).
TRAINING_PROCESS = textwrap.dedent(
    """
    import os, signal, sys, time
    import grainlite as grain

    class SleepsAfterTheFirstBatch(grain.MapTransform):
        def map(self, record):
            if record >= 16:
                if os.environ["DEAF"] == "1":
                    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
                open(os.path.join(os.environ["MARKS"], str(os.getpid())), "w").close()
                time.sleep(120)
            return record

    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 10**6, 1),
        sampler=grain.IndexSampler(10**6, grain.NoSharding(), num_epochs=1),
        operations=[SleepsAfterTheFirstBatch(), grain.Batch(8)],
        worker_count=2,
    )
    iterator = iter(loader)
    next(iterator)
    print(" ".join(str(pid) for pid in iterator._stream.pids()), flush=True)
    time.sleep(120)
    """
)


def segments_of(owner: int) -> list[str]:
    return [name for name in shm.list_segments() if shm.owner_pid(name) == owner]


@contextlib.contextmanager
def training_process(tmp_path, deaf: bool = False, start: str = "forkserver"):
    """Runs TRAINING_PROCESS; yields it and its workers' pids once both sleep in the transform,
    after checking that a segment of it is held (worker 1's first batch, not mapped yet)."""
    env = dict(os.environ, MARKS=str(tmp_path), DEAF="1" if deaf else "0")
    env[WORKER_START_ENV] = start
    process = subprocess.Popen(
        [sys.executable, "-c", TRAINING_PROCESS], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        workers = [int(pid) for pid in process.stdout.readline().split()]
        assert len(workers) == 2
        wait_for(
            lambda: {int(mark.name) for mark in tmp_path.iterdir()} == set(workers),
            "both workers sleep in the transform",
        )
        assert segments_of(process.pid)
        yield process, workers
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()
        for name in segments_of(process.pid):  # a failure leaves no segment to later tests
            shm.unlink(name)


@pytest.mark.parametrize("deaf", [False, True], ids=["worker-ends-on-sigterm", "worker-deaf"])
@pytest.mark.parametrize("kill", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_training_process_killed_mid_epoch_leaves_no_worker_and_no_segment(kill, deaf, tmp_path):
    with training_process(tmp_path, deaf=deaf) as (process, workers):
        server = parent_of(workers[0])
        process.send_signal(kill)
        assert process.wait(30) == -kill
        assert_gone([server, *workers], timeout=10.0)
        assert segments_of(process.pid) == []


@pytest.mark.parametrize("start", ["forkserver", "spawn"])
def test_a_worker_ended_by_sigterm_unlinks_its_slabs_itself(start, tmp_path):
    with training_process(tmp_path, start=start) as (process, workers):
        os.kill(workers[1], signal.SIGTERM)
        assert_gone([workers[1]])
        # Nothing else removed it: the training process sleeps, the server removes segments
        # only as it ends.
        assert segments_of(process.pid) == []
        assert process.poll() is None


def test_the_server_preloads_the_imported_modules_a_pickled_pipeline_names_and_no_other():
    import pickle

    import grainlite.engine.malloc  # noqa: F401  (imported: a name the scan may keep)
    from grainlite.engine.forkserver_client import preloadable_modules

    pipeline = pickle.dumps(
        [
            np.arange(3),  # numpy's reconstructor, by module name
            grain.MapDataset.range(4),
            b"\x00grainlite.engine.malloc\x01",  # a name inside raw bytes counts too
            "grainlite.not_a_module numpy_like xnumpy",  # only imported modules are kept
            os.urandom(1 << 20),
        ]
    )
    found = preloadable_modules(pipeline)
    assert "numpy" in found or any(name.startswith("numpy.") for name in found)
    assert "grainlite.engine.malloc" in found
    assert any(name.startswith("grainlite.dataset") for name in found)
    assert "grainlite.not_a_module" not in found
    assert all(name in sys.modules for name in found)
    assert len(found) == len(set(found))
    assert preloadable_modules(b"nothing to import here") == []


class AddTable(grain.MapTransform):
    """record -> record + the sum of a row of a table the pipeline carries (4 MiB of it)."""

    def __init__(self) -> None:
        self.table = np.arange(1 << 19, dtype=np.int64).reshape(512, 1024)

    def map(self, record: int) -> int:
        return int(record) + int(self.table[record % 512].sum())


@pytest.mark.parametrize("start", ["forkserver", "spawn"])
def test_forked_workers_get_the_pipeline_from_the_server_and_no_init_carries_it(start, monkeypatch):
    from grainlite.engine.process_group import ProcessGroup
    from grainlite.engine.protocol import Init

    monkeypatch.setenv(WORKER_START_ENV, start)
    carried: list[int] = []
    send = ProcessGroup.send

    def send_and_note(group, worker, message):
        if isinstance(message, Init):
            carried.append(len(message.pipeline))
        send(group, worker, message)

    monkeypatch.setattr(ProcessGroup, "send", send_and_note)
    table = AddTable().table
    got = list(loader(records=12, workers=3, operations=[AddTable()]))
    assert got == [record + int(table[record % 512].sum()) for record in range(12)]
    assert len(carried) == 3
    if start == "forkserver":
        assert carried == [0, 0, 0]  # the pipeline went to the server once, in a memory file
    else:
        assert min(carried) > 4 << 20  # each spawned interpreter is sent the pipeline
