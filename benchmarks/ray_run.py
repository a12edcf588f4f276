"""Ray workers against local worker processes at the same worker count: the overhead, as a ratio.

``python -m benchmarks.ray_run [--workloads images,small,light] [--workers 2] [--repeats 5]
[--images 20000] [--small 200000] [--warmup 160] [--seconds 8] [--data-dir DIR] [--verbose]``

For each workload of :mod:`benchmarks.workloads` (its records, transform and batch size, a
grainlite DataLoader over the ArrayRecord file, shuffled, epochs repeating), and ``light`` (the
``small`` records with about 125 us of numpy work each, :class:`LightWork`, in batches of 16:
small elements at a high rate, where the cost of each element's trip counts most), the same
loader runs
with ``worker_count=W`` (local processes) and with ``backend=RayWorkers(num_workers=W)`` on a
local Ray instance started here (``ray.init(num_cpus=W + 1)``), in ``--repeats`` pairs, the order
within a pair alternating. Each run reports the time to the first batch (start-up: processes or
actors), then reads ``--warmup`` batches unmeasured and measures the next ``--seconds``: the
records per second and the CPU time per batch of this process, of the workers (``/proc``: the
worker processes or the actors) and of Ray's own processes (raylet with the object store, GCS;
idle during local runs).

The warm-up is the steady state's price of entry, paid once per worker: a new actor's first
writes into each page of the object store fault that page into its address space (thousands of
page faults per ``images`` batch over the actors' first hundred batches or so, then a few
dozen), and local workers create and first touch their shared-memory slabs. A long training run
pays it once; a short measurement that includes it measures mostly it.

Two ratios, Ray over local (1.0: no overhead): the median over the pairs of the steady rates,
and the CPU ratio, local CPU per batch (all processes) over Ray's. When this loader keeps every
core busy (W workers on about W cores, as here), the rate follows the CPU per batch and the two
ratios agree; on a machine that other work also loads, the rates move with that work and the CPU
per batch much less. The load average before and
after is printed with the table. Nothing here is asserted: the numbers are printed as Markdown.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
from benchmarks.lib_grainlite import AugmentImage, ParseSmall
from benchmarks.workloads import WORKLOADS

SEED = 0
LIGHT_BATCH = 16
_LIGHT_GRID = np.linspace(0.0, 1.0, 8192)


class LightWork(ParseSmall):
    """A light per-record transform: the small record parsed, then about 125 us of numpy (a sine
    over 8192 points and a sort: 127 us of CPU per record measured here)."""

    def map(self, element: bytes) -> Any:
        ids = super().map(element)
        wave = np.sort(np.sin(_LIGHT_GRID * float(ids[0] % 1000 + 1)))
        return {"ids": ids, "features": wave[:8].astype(np.float32)}


def batch_size(workload: str) -> int:
    return LIGHT_BATCH if workload == "light" else WORKLOADS[workload].batch_size


def data_of(workload: str) -> str:
    """The workload whose records ``workload`` reads."""
    return "small" if workload == "light" else workload


def loader(workload: str, path: Path, records: int, workers: int, on_ray: bool) -> Any:
    import grainlite as grain
    from grainlite.ray import RayWorkers

    transforms = {"images": AugmentImage, "small": ParseSmall, "light": LightWork}
    transform = transforms[workload]()
    sampler = grain.IndexSampler(
        records, grain.NoSharding(), shuffle=True, num_epochs=None, seed=SEED
    )
    backend = RayWorkers(num_workers=workers) if on_ray else None
    return grain.DataLoader(
        data_source=grain.ArrayRecordDataSource(str(path)),
        sampler=sampler,
        operations=[transform, grain.Batch(batch_size(workload))],
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


def other_threads_cpu() -> float:
    """CPU seconds of this process's threads other than the main one (Ray's core worker and
    I/O threads; the loader's reader threads), live ones only."""
    total = 0.0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != os.getpid():
            try:
                with open(f"/proc/self/task/{tid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def ray_system_pids() -> list[int]:
    """The processes of the local Ray instance this script started (raylet, GCS, ...)."""
    import ray

    node = ray._private.worker._global_node
    return [info.process.pid for infos in node.all_processes.values() for info in infos]


class Run(NamedTuple):
    start: float  # seconds to the first batch
    rate: float  # records per second after the warm-up
    parent: float  # CPU ms per batch in this process (all its threads, Ray's included)
    threads: float  # of which in threads other than the main one (Ray's core worker and I/O)
    workers: float  # CPU ms per batch in the worker processes or actors
    system: float  # CPU ms per batch in Ray's own processes (raylet and object store, GCS)

    @property
    def cpu(self) -> float:
        """CPU ms per batch in all the processes that make and deliver a batch."""
        return self.parent + self.workers + self.system  # threads: part of parent


def measure(
    workload: str, path: Path, records: int, workers: int, on_ray: bool, warmup: int, seconds: float
) -> Run:
    """One run: start-up time; then, after ``warmup`` batches, the rate and CPU per batch."""
    size = batch_size(workload)
    system = ray_system_pids()
    began = time.perf_counter()
    with iter(loader(workload, path, records, workers, on_ray)) as iterator:
        next(iterator)
        first = time.perf_counter()
        for _ in range(warmup):
            next(iterator)
        workers_cpu = CpuMeter(iterator._stream.pids())
        system_cpu = CpuMeter(system)
        parent_cpu = time.process_time()
        threads_cpu = other_threads_cpu()
        steady = time.perf_counter()
        batches = 0
        while time.perf_counter() - steady < seconds:
            next(iterator)
            batches += 1
        end = time.perf_counter()
        used = (
            time.process_time() - parent_cpu,
            other_threads_cpu() - threads_cpu,
            workers_cpu.read(),
            system_cpu.read(),
        )
    per_batch = [1000 * seconds / max(1, batches) for seconds in used]
    return Run(first - began, batches * size / (end - steady), *per_batch)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages of this machine."""
    return " ".join(f"{load:.1f}" for load in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="images,small,light")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--small", type=int, default=200_000)
    parser.add_argument(
        "--warmup", type=int, default=160, help="batches read before measuring, per run"
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="measured, per run")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--verbose", action="store_true", help="print every pair too")
    args = parser.parse_args()
    import ray

    # The instance's files (sessions, logs) go to a temp dir of this run's own, removed at the end.
    ray_dir = tempfile.mkdtemp(prefix="rayrun", dir="/tmp")  # short: Ray's sockets live there
    ray.init(
        address="local",
        num_cpus=args.workers + 1,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=ray_dir,
    )
    rows = []
    load_before = load_average()
    try:
        for workload in args.workloads.split(","):
            records = args.images if workload == "images" else args.small
            path = ensure_data(args.data_dir, WORKLOADS[data_of(workload)], records, SEED)
            measure(workload, path, records, args.workers, True, 0, 1.0)  # Ray's first actors
            pairs: list[tuple[Run, Run]] = []
            for repeat in range(args.repeats):
                order = (False, True) if repeat % 2 == 0 else (True, False)
                run = {
                    on_ray: measure(
                        workload, path, records, args.workers, on_ray, args.warmup, args.seconds
                    )
                    for on_ray in order
                }
                pairs.append((run[False], run[True]))
            rows.append((workload, pairs))
    finally:
        ray.shutdown()
        shutil.rmtree(ray_dir, ignore_errors=True)
    print(
        f"W={args.workers}, {args.repeats} interleaved pairs (medians), each run measured for "
        f"{args.seconds:g} s after the first batch and {args.warmup} more; load average (1, 5, "
        f"15 min) {load_before} before, {load_average()} after. Rates in records per second; "
        "CPU in ms per batch (parent: this process; of it, threads: its threads other than "
        "the main one, Ray's core worker and I/O; workers: the worker processes or actors; "
        "Ray: raylet, object store, GCS). Ray / local: the paired rates' median ratio, and local "
        "CPU per batch (all processes) over Ray's."
    )
    print(
        "| workload | backend | first batch (s) | records/s | CPU parent | of it, threads "
        "| CPU workers | CPU Ray | Ray / local: rate | Ray / local: CPU |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for workload, pairs in rows:
        ratio = statistics.median(remote.rate / local.rate for local, remote in pairs)
        cpu = [statistics.median(pair[index].cpu for pair in pairs) for index in (0, 1)]
        for name, index in (("local", 0), ("Ray", 1)):
            runs = [pair[index] for pair in pairs]
            med = [statistics.median(getattr(r, f) for r in runs) for f in Run._fields]
            ratios = f"{ratio:.2f} | {cpu[0] / cpu[1]:.2f}" if index else " | "
            print(
                f"| {workload} | {name} | {med[0]:.2f} | {med[1]:,.0f} | {med[2]:.1f} | "
                f"{med[3]:.1f} | {med[4]:.1f} | {med[5]:.1f} | {ratios} |"
            )
        if args.verbose:
            for local, remote in pairs:
                print(f"<!-- {workload} pair: {local} {remote} -->")


if __name__ == "__main__":
    main()
