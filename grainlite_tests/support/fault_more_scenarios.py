"""More scenarios of the fault suite: a TFDS dataset missing a shard, many loaders in several
processes, a worker killed while it builds a batch, and odd user code and sources.

Imported by ``fault_suite`` (after the DataLoader scenarios), which registers them in order, so
``SCENARIOS`` and the published table hold both. Same rules as there: each scenario builds a
real fault and asserts the promise; ``Unavailable`` only where the machine cannot build it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import grainlite as grain
from grainlite import shm
from grainlite_tests.support.fault_registry import (
    Unavailable,
    damaged_states,
    is_alive,
    job_outcome,
    raised,
    range_loader,
    sampler,
    scenario,
    start_job,
)
from grainlite_tests.support.processes import loader_processes

# --- Corrupted data: a TFDS directory with a missing shard ------------------------------------

TFDS_RECORDS, TFDS_SHARDS = 40, 4


def build_tfds_dataset(data_dir: Path) -> str:
    """Writes a TFDS dataset ``fault_tiny`` (split ``train``: 40 records in 4 array_record shards).

    Record ``i`` before TFDS shuffles them is ``{"x": [i, i, i, i], "label": i}``. No TensorFlow
    is involved. Returns the version folder, where the shard files are.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise Unavailable(f"tensorflow_datasets is not importable ({error})") from None

    class FaultTiny(tfds.core.GeneratorBasedBuilder, skip_registration=True):  # type: ignore[misc, call-arg]
        """Forty small records, enough for four shards."""

        name = "fault_tiny"
        VERSION = tfds.core.Version("1.0.0")
        __module__ = "fault_tiny"  # no dots: TFDS looks for no checksums file beside the builder

        def _info(self) -> Any:
            features = {"x": tfds.features.Tensor(shape=(4,), dtype=np.int64), "label": np.int64}
            return tfds.core.DatasetInfo(
                builder=self, features=tfds.features.FeaturesDict(features)
            )

        def _split_generators(self, dl_manager: Any) -> Any:
            return {"train": self._generate_examples()}

        def _generate_examples(self) -> Any:
            for i in range(TFDS_RECORDS):
                yield i, {"x": np.full(4, i, np.int64), "label": i}

    builder = FaultTiny(data_dir=str(data_dir), file_format="array_record")
    tfds.display_progress_bar(False)
    with contextlib.redirect_stdout(io.StringIO()):  # "Downloading and preparing..."
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(num_shards=TFDS_SHARDS)
        )
    return str(data_dir / "fault_tiny" / "1.0.0")


@scenario(
    "Corrupted data",
    "a TFDS directory with a missing shard, W={workers}",
    "error names the file",
    workers=(0, 2),
)
def tfds_missing_shard(tmp: Path, workers: int) -> str:
    folder = build_tfds_dataset(tmp / "tfds")
    import tensorflow_datasets as tfds

    shards = sorted(Path(folder).glob("fault_tiny-train.array_record-*"))
    assert len(shards) == TFDS_SHARDS, shards
    shards[1].unlink()  # records 10..19
    source = tfds.data_source("fault_tiny", split="train", data_dir=str(tmp / "tfds"))
    loader = grain.DataLoader(data_source=source, sampler=sampler(len(source)),
                              worker_count=workers)  # fmt: skip
    delivered: list[int] = []

    def read_all() -> None:
        for record in loader:
            delivered.append(int(record["label"]))

    error, seconds = raised(read_all, limit_s=10)
    assert isinstance(error, grain.CorruptedDataError), repr(error)
    assert isinstance(error, RuntimeError)  # what Grain raises here (from array_record)
    message = str(error)
    assert f"its file {str(shards[1])!r} does not exist" in message, message
    assert "record key 10:" in message and "download_and_prepare" in message, message
    intact = [int(source[key]["label"]) for key in range(10)]  # the records before the shard
    assert delivered == intact[: len(delivered)], f"garbage delivered: {delivered}"
    return f"CorruptedDataError naming the shard file and record key 10 ({seconds:.2f} s)"


# --- Many and long: several processes, each with many loaders -------------------------------

PROCESSES, LOADERS, ROUNDS = 3, 3, 3


@scenario("Many and long", "3 processes at once, each 3 rounds of 3 loaders with W=2", "no leak")
def many_loaders_in_several_processes(tmp: Path) -> str:
    started = time.monotonic()
    jobs = [start_job("many_loaders", str(LOADERS), str(ROUNDS)) for _ in range(PROCESSES)]
    outcomes = [job_outcome(job, 60) for job in jobs]
    seconds = time.monotonic() - started
    workers = []
    for job, outcome in zip(jobs, outcomes):
        assert job.returncode == 0, f"job {job.pid} ended with {job.returncode}"
        rounds = outcome["rounds"]
        assert len(rounds) == ROUNDS, outcome
        for number, done in enumerate(rounds):
            assert done["firsts"] == [0] * LOADERS, done
            assert len(done["workers"]) == 2 * LOADERS, f"round {number}: {done['workers']}"
            assert not done["missing"], f"round {number}: not seen as descendants: {done}"
            processes = done["processes"]  # the workers and their fork servers
            assert len(processes) == LOADERS * loader_processes(2), f"round {number}: {done}"
            assert not done["left"], f"round {number}: workers outlived close(): {done['left']}"
            assert not done["segments"], f"round {number}: segments left: {done['segments']}"
            workers += done["workers"]
        fds = [done["fds"] for done in rounds]
        assert max(fds) <= fds[0], f"file descriptors grew from round to round: {fds}"
    assert not [pid for pid in workers if is_alive(pid)], "workers outlived their process"
    pids = {job.pid for job in jobs}
    left = [name for name in shm.list_segments() if shm.owner_pid(name) in pids]
    assert not left, f"segments left behind: {left}"
    assert seconds < 30, f"took {seconds:.1f} s"
    return (
        f"{len(workers)} workers started and closed in {seconds:.1f} s; file descriptors flat "
        f"across rounds ({fds}); no process or segment left"
    )


# --- Exhausted resources: a worker killed while it builds a batch ------------------------------


class BigWithMarker(grain.MapTransform):
    """16 MB elements; on record 14 (worker 0's second batch of 4 at W=2) writes its pid to
    ``marker``, unless it runs in the process that made it (the parent may make the first
    elements itself, and the scenario must never kill its own process).

    Odd records (worker 1's) are empty arrays, which travel without shared memory, so every
    segment in ``/dev/shm`` belongs to worker 0.
    """

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.parent = os.getpid()

    def map(self, element: int) -> np.ndarray:
        if element % 2:
            return np.zeros(0)
        if element == 14 and os.getpid() != self.parent:
            Path(self.marker + ".tmp").write_text(str(os.getpid()))
            os.rename(self.marker + ".tmp", self.marker)
        return np.full(2 * 2**20, element, np.float64)


def _mine(before: frozenset[str] = frozenset()) -> list[str]:
    """This process's segments (worker buffers carry the parent's pid), less ``before``."""
    mine = (name for name in shm.list_segments() if shm.owner_pid(name) == os.getpid())
    return sorted(name for name in mine if name not in before)


@scenario("Exhausted resources", "a worker SIGKILLed while writing a batch, W=2", "named, no leak")
def worker_killed_writing_a_batch(tmp: Path) -> str:
    marker = str(tmp / "worker-pid")
    loader = range_loader([BigWithMarker(marker), grain.Batch(4)], 2, n=16)
    seen: dict[str, Any] = {}
    before = frozenset(_mine())

    def kill_while_writing() -> None:
        deadline = time.monotonic() + 20
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.001)
        pid = int(Path(marker).read_text())
        assert pid != os.getpid()
        while not _mine(before) and time.monotonic() < deadline:  # the batch's buffer exists
            time.sleep(0.0005)
        os.kill(pid, signal.SIGSTOP)  # hold it mid-write, to see what it holds
        seen.update(pid=pid, segments=_mine(before), killed=time.monotonic())
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_while_writing, daemon=True)
    killer.start()
    with iter(loader) as iterator:
        error, _ = raised(lambda: list(iterator), limit_s=30)
        raised_at = time.monotonic()
    killer.join(5)
    assert seen.get("segments"), f"the worker was not caught holding a batch buffer: {seen}"
    seconds = raised_at - seen["killed"]
    assert seconds < 5, f"the error came {seconds:.2f} s after the kill"
    assert isinstance(error, grain.WorkerDiedError), repr(error)
    assert f"Worker process 0 (pid {seen['pid']})" in str(error), str(error)
    assert "SIGKILL" in str(error), str(error)
    left = _mine(before)
    assert not left, f"segments left behind: {left}"
    return (
        f"WorkerDiedError naming worker 0 and SIGKILL {seconds:.2f} s after the kill; the "
        f"{len(seen['segments'])} segment(s) it held were removed"
    )


# --- Odd user code -----------------------------------------------------------------------------


class ReturnsLock(grain.MapTransform):
    """Returns a ``threading.Lock``, which cannot be pickled, for record 3 (a worker's)."""

    def map(self, element: int) -> Any:
        return threading.Lock() if element == 3 else element


class ReturnsLambda(grain.MapTransform):
    """Returns a dict holding a lambda under ``"f"`` for record 3 (a worker's)."""

    def map(self, element: int) -> dict[str, Any]:
        return {"x": element, "f": (lambda: element) if element == 3 else None}


@scenario("Odd user code", "a transform returns a lock or a lambda, W=2", "error names it")
def transform_returns_unpicklable(tmp: Path) -> str:
    times = []
    for transform, needles in [
        (ReturnsLock(), ["An element", "of type _thread.lock"]),
        (ReturnsLambda(), ["The leaf at ['f']", "of type function"]),
    ]:
        with iter(range_loader([transform], 2)) as iterator:
            delivered: list[Any] = []
            error, seconds = raised(lambda: delivered.extend(iterator))  # noqa: B023
        assert isinstance(error, grain.GrainliteTypeError), repr(error)
        for needle in [*needles, "cannot be pickled", "worker_count=0"]:
            assert needle in str(error), str(error)
        assert "worker process 1" in " ".join(getattr(error, "__notes__", [])), error
        assert len(delivered) <= 3, f"records after the bad one were delivered: {delivered}"
        times.append(seconds)
    return f"GrainliteTypeError naming the leaf, its type and the fix (slowest {max(times):.2f} s)"


class KeysChange(grain.MapTransform):
    """Dicts with keys ``a, b``, but ``a, c`` for record 5."""

    def map(self, element: int) -> dict[str, int]:
        return {"a": element, "c" if element == 5 else "b": element}


@scenario(
    "Odd user code",
    "dict keys change between elements into Batch, W={workers}",
    "error names them",
    workers=(0, 2),
)
def keys_change_into_batch(tmp: Path, workers: int) -> str:
    error, seconds = raised(lambda: list(range_loader([KeysChange(), grain.Batch(2)], workers)))
    assert isinstance(error, grain.GrainliteValueError), repr(error)
    # At W=0 the batch is records [4, 5]; at W=2 worker 1 batches its records [5, 7].
    missing, extra, last = ("b", "c", 5) if workers == 0 else ("c", "b", 7)
    difference = f"no key '{missing}' (missing ['{missing}'], extra ['{extra}'])"
    assert difference in str(error), str(error)
    notes = " ".join(getattr(error, "__notes__", []))
    assert "operations[1] (Batch)" in notes and f"record key {last}." in notes, notes
    return f"GrainliteValueError naming the missing and extra keys and the record ({seconds:.2f} s)"


class FailsForOneKey:
    """Ten records; ``__getitem__`` raises KeyError for key 5 (a record missing from a store)."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, key: int) -> int:
        if key == 5:
            raise KeyError(f"no record {key}")
        return key


@scenario(
    "Odd user code",
    "a source's __getitem__ raises for one key, W={workers}",
    "note names the key",
    workers=(0, 2),
)
def source_fails_for_one_key(tmp: Path, workers: int) -> str:
    delivered: list[int] = []

    def read_all() -> None:
        loader = grain.DataLoader(data_source=FailsForOneKey(), sampler=sampler(10),
                                  worker_count=workers)  # fmt: skip
        for record in loader:
            delivered.append(record)

    error, seconds = raised(read_all)
    assert type(error) is KeyError, repr(error)  # the source's own error, as the user raised it
    notes = " ".join(getattr(error, "__notes__", []))
    assert "FailsForOneKey failed reading record key 5" in notes, notes
    assert delivered == list(range(len(delivered))) and len(delivered) <= 5, delivered
    return f"the source's KeyError, with a note naming record key 5 ({seconds:.2f} s)"


@scenario("Samplers", "a sampler of 0 records", "refused with a fix")
def zero_records(tmp: Path) -> str:
    options = grain.NoSharding()
    for build in (
        lambda: grain.IndexSampler(0, options, shuffle=False, num_epochs=1, seed=0),
        lambda: grain.SequentialSampler(0, options),
    ):
        error, _ = raised(build)
        assert isinstance(error, grain.GrainliteValueError), repr(error)
        assert "Got 0 records" in str(error) and "num_records=len(data_source)" in str(error)
    return "GrainliteValueError at construction: 0 records, pass num_records=len(data_source)"


class StartsProcesses(grain.MapTransform):
    """In a worker process, starts a ``cat`` for every element and keeps it running.

    Each ``cat`` ends when its stdin closes, that is when the worker that started it is gone;
    their pids go to ``pids_file`` so the scenario can watch them end. Elements made in the
    scenario's own process (the parent may make the first) start none.
    """

    started: ClassVar[list[Any]] = []  # the worker's cats, alive as long as the worker

    def __init__(self, pids_file: str) -> None:
        self.pids_file = pids_file
        self.parent = os.getpid()

    def map(self, element: int) -> int:
        import subprocess

        if os.getpid() != self.parent:
            cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
            self.started.append(cat)
            with open(self.pids_file, "a") as pids:
                pids.write(f"{cat.pid}\n")
        return element


@scenario("Odd user code", "a transform starts processes that never end, W=2", "closes promptly")
def transform_starts_processes(tmp: Path) -> str:
    pids_file = tmp / "pids"
    pids_file.touch()
    loader = range_loader([StartsProcesses(str(pids_file))], 2)
    started = time.monotonic()
    with iter(loader) as iterator:
        assert list(iterator) == list(range(8))
    closed = time.monotonic() - started
    assert closed < 10, f"reading 8 records and closing took {closed:.1f} s"
    pids = [int(line) for line in pids_file.read_text().split()]
    assert len(pids) >= 6, pids  # the parent may make some elements itself
    deadline = time.monotonic() + 5  # their stdin closed with the workers: they end on their own
    while [pid for pid in pids if is_alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if is_alive(pid)], "the workers did not end (their cats live)"
    return (
        f"all records delivered and the loader closed in {closed:.2f} s; the transform's "
        f"{len(pids)} processes ended with their workers"
    )


# --- Hostile checkpoints: the Orbax restore of damaged files ----------------------------------


@scenario(
    "Hostile checkpoints", "Orbax restore of 65 damaged files and another loader's", "refused"
)
def orbax_restore_fuzzed(tmp: Path) -> str:
    import random

    import orbax.checkpoint as ocp

    with iter(range_loader([], 0, n=30)) as other:
        next(other)
        another_loaders = other.get_state()
    loader = range_loader([], 0, n=20)
    refused, accepted, slowest = 0, 0, 0.0
    with ocp.CheckpointManager(tmp / "checkpoints") as manager, iter(loader) as iterator:
        next(iterator)
        manager.save(1, args=grain.GrainCheckpointSave(iterator))
        manager.wait_until_finished()
        path = tmp / "checkpoints" / "1" / "default" / "process_0-of-1.json"
        valid = json.loads(path.read_text())
        cases = [*damaged_states(valid, random.Random(19)), ("another loader", another_loaders)]
        for name, raw in cases:
            path.write_bytes(raw)
            started = time.monotonic()
            try:
                manager.restore(1, args=grain.GrainCheckpointRestore(iterator))
            except grain.GrainliteError as error:
                assert isinstance(error, ValueError), f"{name}: {error!r}"
                if name == "another loader":
                    assert isinstance(error, grain.CheckpointMismatchError), repr(error)
                refused += 1
            else:
                accepted += 1  # a mutation can leave a valid state: the loader reads on
                assert name != "another loader", "a state of a loader of 30 records was accepted"
                assert set(iterator) <= set(range(20)), name
            slowest = max(slowest, time.monotonic() - started)
    assert slowest < 2, f"a damaged file took {slowest:.2f} s"
    return (
        f"{refused} refused with a ValueError (another loader's: CheckpointMismatchError), "
        f"{accepted} still valid; slowest {slowest * 1000:.0f} ms"
    )
