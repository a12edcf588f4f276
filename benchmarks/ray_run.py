"""Ray workers against local worker processes at the same worker count: the overhead, as a ratio.

``python -m benchmarks.ray_run [--workloads images,small] [--workers 2] [--repeats 5]
[--images 20000] [--small 200000] [--seconds 8] [--verbose]``

For each workload of :mod:`benchmarks.workloads` (its records, transform and batch size, a
grainlite DataLoader over the ArrayRecord file), the same loader runs with ``worker_count=W``
(local processes) and with ``backend=RayWorkers(num_workers=W)`` on a local Ray instance started
here (``ray.init(num_cpus=W + 1)``), in ``--repeats`` pairs, the order within a pair
alternating. Each run reports the time to the first batch (start-up: processes or actors), the
records per second after it (the steady rate, for at most ``--seconds`` and 90% of the
``images`` records, so the workers are still running when they are read) and the CPU time per
batch of this process, of the workers (``/proc``: the worker processes or the actors) and of
Ray's own processes (raylet with the object store, GCS; idle during local runs). The ratio is
the median over the pairs of Ray's steady rate over the local one's (1.0: no overhead); on a
machine that other work also loads, the CPU per batch is the steadier measure. Nothing here is
asserted: the numbers are printed as Markdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
from benchmarks.lib_grainlite import AugmentImage, ParseSmall
from benchmarks.workloads import WORKLOADS

SEED = 0


def loader(workload: str, path: Path, records: int, workers: int, on_ray: bool) -> Any:
    import grainlite as grain
    from grainlite.ray import RayWorkers

    spec = WORKLOADS[workload]
    transform = AugmentImage() if workload == "images" else ParseSmall()
    sampler = grain.IndexSampler(records, grain.NoSharding(), shuffle=True, num_epochs=1, seed=SEED)
    backend = RayWorkers(num_workers=workers) if on_ray else None
    return grain.DataLoader(
        data_source=grain.ArrayRecordDataSource(str(path)),
        sampler=sampler,
        operations=[transform, grain.Batch(spec.batch_size)],
        worker_count=0 if on_ray else workers,
        worker_buffer_size=2,
        backend=backend,
    )


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds process ``pid`` has used so far (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class CpuMeter:
    """CPU seconds that processes used since the meter began (the last reading of each)."""

    def __init__(self, pids: list[int]) -> None:
        self.first = {pid: cpu_seconds(pid) for pid in pids}
        self.last = dict(self.first)

    def read(self) -> float:
        for pid in self.last:
            now = cpu_seconds(pid)
            if now is not None:
                self.last[pid] = now  # a process that ended keeps its last reading
        return sum((self.last[pid] or 0.0) - (self.first[pid] or 0.0) for pid in self.first)


def ray_system_pids() -> list[int]:
    """The processes of the local Ray instance this script started (raylet, GCS, ...)."""
    import ray

    node = ray._private.worker._global_node
    return [info.process.pid for infos in node.all_processes.values() for info in infos]


class Run(NamedTuple):
    start: float  # seconds to the first batch
    rate: float  # records per second after it
    parent: float  # CPU ms per batch in this process (all its threads, Ray's included)
    workers: float  # CPU ms per batch in the worker processes or actors
    system: float  # CPU ms per batch in Ray's own processes (raylet and object store, GCS)


def measure(workload: str, path: Path, records: int, workers: int, on_ray: bool, seconds: float):
    """One run: start-up time, the steady rate and CPU per batch after the first batch."""
    batch_size = WORKLOADS[workload].batch_size
    system = ray_system_pids()
    began = time.perf_counter()
    with iter(loader(workload, path, records, workers, on_ray)) as iterator:
        next(iterator)
        first = time.perf_counter()
        workers_cpu = CpuMeter(iterator._stream.pids())
        system_cpu = CpuMeter(system)
        parent_cpu = time.process_time()
        count = batches = 0
        stop = records * 9 // 10 if workload == "images" else records
        for _ in iterator:
            count += batch_size
            batches += 1
            if batches % 16 == 0:
                workers_cpu.read()  # worker processes may end before the last batch
            if count >= stop or time.perf_counter() - first > seconds:
                break  # before the end: the worker processes are still there to be read
        end = time.perf_counter()
        used = (time.process_time() - parent_cpu, workers_cpu.read(), system_cpu.read())
    per_batch = [1000 * seconds / max(1, batches) for seconds in used]
    return Run(first - began, count / (end - first), *per_batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="images,small")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--small", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--verbose", action="store_true", help="print every pair too")
    args = parser.parse_args()
    import ray

    ray.init(
        address="local", num_cpus=args.workers + 1, include_dashboard=False, log_to_driver=False
    )
    rows = []
    try:
        for workload in args.workloads.split(","):
            records = args.images if workload == "images" else args.small
            path = ensure_data(DEFAULT_DATA_DIR, WORKLOADS[workload], records, SEED)
            measure(workload, path, records, args.workers, True, 1.0)  # Ray's first actors
            pairs: list[tuple[Run, Run]] = []
            for repeat in range(args.repeats):
                order = (False, True) if repeat % 2 == 0 else (True, False)
                run = {
                    on_ray: measure(workload, path, records, args.workers, on_ray, args.seconds)
                    for on_ray in order
                }
                pairs.append((run[False], run[True]))
            rows.append((workload, pairs))
    finally:
        ray.shutdown()
    print(
        f"W={args.workers}, {args.repeats} interleaved pairs (medians); rates in records per "
        "second after the first batch; CPU in ms per batch (parent: this process; workers: "
        "the worker processes or actors; Ray: raylet, object store, GCS)"
    )
    print(
        "| workload | backend | first batch (s) | records/s | CPU parent | CPU workers "
        "| CPU Ray | Ray / local (paired) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for workload, pairs in rows:
        ratio = statistics.median(remote.rate / local.rate for local, remote in pairs)
        for name, index in (("local", 0), ("Ray", 1)):
            runs = [pair[index] for pair in pairs]
            med = [statistics.median(getattr(r, f) for r in runs) for f in Run._fields]
            shown_ratio = f"{ratio:.2f}" if index else ""
            print(
                f"| {workload} | {name} | {med[0]:.2f} | {med[1]:,.0f} | {med[2]:.1f} | "
                f"{med[3]:.1f} | {med[4]:.1f} | {shown_ratio} |"
            )
        if args.verbose:
            for local, remote in pairs:
                print(f"<!-- {workload} pair: {local} {remote} -->")


if __name__ == "__main__":
    main()
