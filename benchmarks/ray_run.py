"""Ray workers against local worker processes at the same worker count: the overhead, as a ratio.

``python -m benchmarks.ray_run [--workloads images,small] [--workers 2] [--repeats 2]
[--images 2048] [--small 200000] [--seconds 8]``

For each workload of :mod:`benchmarks.workloads` (its records, transform and batch size, a
grainlite DataLoader over the ArrayRecord file), the same loader runs with ``worker_count=W``
(local processes) and with ``backend=RayWorkers(num_workers=W)`` on a local Ray instance started
here (``ray.init(num_cpus=W + 1)``), the two interleaved ``--repeats`` times. Each run reports
the time to the first batch (start-up: processes or actors) and the records per second after it
(the steady rate; ``small`` stops after ``--seconds``). The ratio is Ray's steady rate over the
local one's (1.0: no overhead). Nothing here is asserted: the numbers are printed as Markdown.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

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


def measure(workload: str, path: Path, records: int, workers: int, on_ray: bool, seconds: float):
    """(seconds to the first batch, records per second after it) for one run."""
    batch_size = WORKLOADS[workload].batch_size
    began = time.perf_counter()
    with iter(loader(workload, path, records, workers, on_ray)) as iterator:
        next(iterator)
        first = time.perf_counter()
        count = 0
        for _ in iterator:
            count += batch_size
            if workload != "images" and time.perf_counter() - first > seconds:
                break
        end = time.perf_counter()
    return first - began, count / (end - first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="images,small")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--small", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=8.0)
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
            runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
            for _ in range(args.repeats):
                for on_ray in (False, True):
                    runs[on_ray].append(
                        measure(workload, path, records, args.workers, on_ray, args.seconds)
                    )
            local = statistics.median(rate for _, rate in runs[False])
            remote = statistics.median(rate for _, rate in runs[True])
            rows.append(
                (
                    workload,
                    statistics.median(start for start, _ in runs[False]),
                    local,
                    statistics.median(start for start, _ in runs[True]),
                    remote,
                    remote / local,
                )
            )
    finally:
        ray.shutdown()
    print(
        f"W={args.workers}, {args.repeats} runs each (medians), records per second after the "
        "first batch"
    )
    print(
        "| workload | local: first batch (s) | local records/s | Ray: first batch (s) "
        "| Ray records/s | Ray / local |"
    )
    print("|---|---|---|---|---|---|")
    for workload, local_start, local, ray_start, remote, ratio in rows:
        print(
            f"| {workload} | {local_start:.2f} | {local:,.0f} | {ray_start:.2f} | "
            f"{remote:,.0f} | {ratio:.2f} |"
        )


if __name__ == "__main__":
    main()
