"""Programs the fault suite runs as processes: ``python -m grainlite_tests.support.fault_jobs JOB``.

A fault that ends or confines a whole process (SIGTERM, a small or read-only ``/dev/shm`` in a
private mount namespace) cannot be tried inside the test process. Each job builds a real loader,
prints ``ready`` once it is delivering, and reports its outcome on stdout as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

import grainlite as grain


def _report(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _sampler(n: int, num_epochs: int | None = 1) -> grain.IndexSampler:
    return grain.IndexSampler(n, grain.NoSharding(), shuffle=False, num_epochs=num_epochs, seed=0)


class BigArray(grain.MapTransform):
    """Makes elements of 1.2 MB each: a few fill a 2 MB /dev/shm."""

    def map(self, element: int) -> dict[str, np.ndarray]:
        return {"a": np.full(300_000, element, np.float32)}


def _read_and_report(loader: grain.DataLoader) -> None:
    """Reads the whole loader; reports how many elements came, or the error and its classes."""
    started = time.monotonic()
    try:
        count = sum(1 for _ in loader)
    except BaseException as error:  # the outcome is the point of these jobs
        _report(
            error=type(error).__name__,
            bases=[kind.__name__ for kind in type(error).__mro__],
            message=str(error),
            seconds=time.monotonic() - started,
        )
        return
    _report(error=None, count=count, seconds=time.monotonic() - started)


def shm_pressure(workers: int, batch: bool) -> None:
    """Reads big elements through workers; reports the error (or that all came through)."""
    operations: list[Any] = [BigArray()] + ([grain.Batch(4)] if batch else [])
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 64, 1),
        sampler=_sampler(64),
        operations=operations,
        worker_count=workers,
        worker_buffer_size=4,
    )
    _read_and_report(loader)


def serve_forever(workers: int) -> None:
    """Reads an InMemoryDataSource endlessly until a signal ends this process."""
    source = grain.InMemoryDataSource(list(range(1000)))
    loader = grain.DataLoader(
        data_source=source, sampler=_sampler(1000, None), worker_count=workers
    )
    iterator = iter(loader)
    next(iterator)
    _report(ready=True, pid=os.getpid(), source=source.name)
    while True:
        next(iterator)
        time.sleep(0.001)


def fork_then_exit(workers: int) -> None:
    """Forks a child mid-epoch that exits normally (running its exit handlers), then reads on."""
    source = grain.InMemoryDataSource(list(range(200)))
    loader = grain.DataLoader(data_source=source, sampler=_sampler(200), worker_count=workers)
    records: list[int] = []
    try:
        with iter(loader) as iterator:
            records += [next(iterator) for _ in range(10)]
            pid = os.fork()
            if pid == 0:
                sys.exit(0)  # a normal exit: atexit and weakref finalizers run in the child
            os.waitpid(pid, 0)
            records += list(iterator)
    except BaseException as error:  # the outcome is the point of this job
        _report(error=f"{type(error).__name__}: {error}", records=records)
        return
    from grainlite import shm

    _report(error=None, records=records, source_kept=source.name in shm.list_segments())
    source.close()


class Hangs(grain.MapTransform):
    """Hangs forever on record 5 (a deadlock, a network read without a timeout)."""

    def map(self, element: int) -> int:
        if element == 5:
            time.sleep(3600)
        return element


def hang(workers: int) -> None:
    """Reads through a transform that hangs, with a short warning time and worker_timeout_s=2."""
    import logging

    from grainlite import config

    logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="LOG %(message)s")
    config.STALL_WARNING_S = 0.5
    grain.config.update("worker_timeout_s", 2)
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 16, 1),
        sampler=_sampler(16),
        operations=[Hangs()],
        worker_count=workers,
    )
    delivered: list[int] = []
    started = time.monotonic()
    try:
        for element in loader:
            delivered.append(element)
    except BaseException as error:  # the outcome is the point of this job
        _report(
            error=type(error).__name__,
            timeout=isinstance(error, TimeoutError),
            message=str(error),
            delivered=delivered,
            seconds=time.monotonic() - started,
        )
        return
    _report(error=None, delivered=delivered)


def few_descriptors(workers: int) -> None:
    """Starts a loader with only a handful of file descriptors left to this process."""
    import resource

    open_now = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 3, open_now + 3))
    loader = grain.DataLoader(
        data_source=grain.InMemoryDataSource(list(range(64))),
        sampler=_sampler(64),
        operations=[BigArray(), grain.Batch(2)],
        worker_count=workers,
    )
    _read_and_report(loader)


def interrupted(workers: int, delay: float) -> None:
    """Reads until SIGINT arrives from outside after ``delay`` s; reports what it saw."""
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, 10**9, 1),
        sampler=_sampler(10**9),
        operations=[BigArray(), grain.Batch(4)],
        worker_count=workers,
    )
    _report(ready=True)
    count = 0
    try:
        for _ in loader:
            count += 1
    except KeyboardInterrupt:
        _report(interrupted=True, count=count)
        return
    _report(interrupted=False, count=count)


def _live_children() -> list[int]:
    """Pids of this process's live (not zombie) descendants: its workers and fork servers."""
    here = os.path.dirname(os.path.abspath(__file__))  # grainlite_tests/support/
    examples = os.path.normpath(os.path.join(here, os.pardir, os.pardir, "examples"))
    if examples not in sys.path:
        sys.path.insert(0, examples)
    from leak_check import live_children

    return sorted(live_children())


def many_loaders(count: int, rounds: int) -> None:
    """``rounds`` times: ``count`` loaders with 2 workers each alive at once, read, then closed.

    Reports, for every round, the loaders' workers while they were open, those of them not among
    this process's live descendants then, the descendants then (the workers and their fork
    servers), the descendants still alive after close (waited for up to 5 s), the open file
    descriptors and this process's segments after close.
    """
    from grainlite import shm

    started = time.monotonic()
    report = []
    for _ in range(rounds):
        loaders = [
            grain.DataLoader(
                data_source=grain.RangeDataSource(0, 40, 1), sampler=_sampler(40), worker_count=2
            )
            for _ in range(count)
        ]
        iterators = [iter(loader) for loader in loaders]
        firsts = [next(iterator) for iterator in iterators]
        workers = sorted(pid for iterator in iterators for pid in iterator._stream.pids())
        processes = _live_children()
        missing = sorted(set(workers) - set(processes))  # a worker not seen as a descendant
        for iterator in iterators:
            iterator.close()
        deadline = time.monotonic() + 5
        while _live_children() and time.monotonic() < deadline:
            time.sleep(0.02)
        mine = [name for name in shm.list_segments() if shm.owner_pid(name) == os.getpid()]
        report.append(
            {
                "firsts": firsts,
                "workers": workers,
                "missing": missing,
                "processes": processes,
                "left": _live_children(),
                "fds": len(os.listdir("/proc/self/fd")),
                "segments": mine,
            }
        )
    _report(rounds=report, pid=os.getpid(), seconds=time.monotonic() - started)


class HugeSource:
    """2**40 records, made on demand: record ``key`` is ``key``."""

    def __len__(self) -> int:
        return 2**40

    def __getitem__(self, key: int) -> int:
        return key


def _peak_rss_mb(who: int) -> float:
    import resource

    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports kilobytes


def huge_shuffle(workers: int) -> None:
    """The first elements of 2**40 shuffled records; reports time and peak memory growth.

    A shuffled loader of 1,000 records is read first, so the imports, the workers' start and
    their buffers are in the baseline; the growth is what 2**40 records add. Each worker makes
    two elements (the parent may make the first). Workers' peaks are read from
    RUSAGE_CHILDREN once they are closed and reaped.
    """
    import resource

    def first(n: int, source: Any) -> tuple[Any, float]:
        shuffled = grain.IndexSampler(n, grain.NoSharding(), shuffle=True, num_epochs=1, seed=0)
        loader = grain.DataLoader(data_source=source, sampler=shuffled, worker_count=workers)
        started = time.monotonic()
        with iter(loader) as iterator:
            element = next(iterator)
            seconds = time.monotonic() - started
            for _ in range(2 * workers):
                next(iterator)
        deadline = time.monotonic() + 5
        while _live_children() and time.monotonic() < deadline:
            time.sleep(0.02)
        return (element, shuffled[0].record_key), seconds

    first(1000, list(range(1000)))
    parent, children = _peak_rss_mb(resource.RUSAGE_SELF), _peak_rss_mb(resource.RUSAGE_CHILDREN)
    (element, expected), seconds = first(2**40, HugeSource())
    _report(
        element=element,
        expected=expected,
        seconds=seconds,
        parent_mb=_peak_rss_mb(resource.RUSAGE_SELF) - parent,
        workers_mb=_peak_rss_mb(resource.RUSAGE_CHILDREN) - children,
        baseline_mb=[parent, children],
    )


def main(argv: list[str]) -> None:
    """Runs the job named by ``argv[0]`` with its arguments."""
    job, *args = argv
    if job == "shm_pressure":
        shm_pressure(int(args[0]), args[1] == "batch")
    elif job == "few_descriptors":
        few_descriptors(int(args[0]))
    elif job == "interrupted":
        interrupted(int(args[0]), float(args[1]))
    elif job == "hang":
        hang(int(args[0]))
    elif job == "fork_then_exit":
        fork_then_exit(int(args[0]))
    elif job == "serve_forever":
        serve_forever(int(args[0]))
    elif job == "many_loaders":
        many_loaders(int(args[0]), int(args[1]))
    elif job == "huge_shuffle":
        huge_shuffle(int(args[0]))
    else:
        raise SystemExit(f"unknown job {job!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
