"""One measured run of one configuration on one workload, in this (fresh) process.

``python -m benchmarks.measure --workload W --config C --data FILE --records N --out JSON`` is what
the runner starts for every run. The clock starts just before the DataLoader (or the Dataset-API
pipeline) is built (the data source already exists, imports are done) and stops when the last
batch is received; the run then joins the loader's workers, verifies everything it read (failing
loudly on any mismatch) and writes its metrics as JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.monitor import TreeMonitor, tree_pids
from benchmarks.verify import Verifier
from benchmarks.workloads import WORKLOADS, Config, Workload, configs_for

MB = 1024 * 1024
_REAP_WAIT_S = 10.0


def _library(config: Config) -> Any:
    if config.library == "grainlite":
        from benchmarks import lib_grainlite

        return lib_grainlite
    if config.library == "grain":
        from benchmarks import lib_grain

        return lib_grain
    from benchmarks import lib_bare

    return lib_bare


def _build(workload: Workload, config: Config, data: Path, seed: int) -> tuple[Any, Any]:
    """The data source and the run object, built before the clock starts."""
    lib = _library(config)
    if workload.storage == "array_record":
        if config.library == "bare":
            source = lib.BareArrayRecord(data)
        else:
            source = lib.array_record_source(str(data))
    else:
        from benchmarks.datagen import load_records

        records = load_records(data)
        source = lib.memory_source(records) if config.shm else records
        del records
        gc.collect()
    if config.library == "bare":
        return source, lib.BareRun(workload, config, source, seed)
    return source, lib.make_run(workload, config, source, seed)


def _wait_for_workers(baseline: set[int]) -> list[int]:
    """Waits until the loader's child processes are gone; returns any that are left."""
    deadline = time.monotonic() + _REAP_WAIT_S
    while True:
        left = sorted(set(tree_pids(os.getpid())[1:]) - baseline)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def measure(
    workload: Workload, config: Config, data: Path, records: int, seed: int, time_limit: float
) -> dict[str, Any]:
    """Runs, times, verifies and reports one configuration."""
    if workload.name == "images":
        import cv2  # noqa: F401  (imported before the clock starts, like every other import)
    source, run = _build(workload, config, data, seed)
    if len(source) != records:
        raise RuntimeError(f"the source has {len(source)} records, expected {records}")
    verifier = Verifier(
        records, workload.batch_size, seed, not workload.time_limited, workers=config.workers
    )
    gc.collect()
    baseline_children = set(tree_pids(os.getpid())[1:])
    monitor = TreeMonitor().start()
    start = time.perf_counter()
    first = None
    stopped_by_time = False
    for batch in run.iterate():
        verifier.add(batch)
        now = time.perf_counter()
        if first is None:
            first = now
            monitor.count_processes()  # every process of the loader is up now
        if workload.time_limited and now - start >= time_limit:
            stopped_by_time = True
            break
    end = time.perf_counter()
    del batch
    run.close()
    left = _wait_for_workers(baseline_children)
    cpu = monitor.cpu_seconds()
    checks = _verify(workload, verifier, run, data, seed)
    close = getattr(source, "close", None)
    if close is not None:
        close()
    if config.library == "grain" and config.shm:
        source.unlink()
    seconds = end - start
    count = verifier.count
    first_size = verifier._sizes[0]
    steady = (count - first_size) / (end - first) if end > first else float("nan")
    return {
        "workload": workload.name,
        "config": config.name,
        "label": config.label,
        "records_total": records,
        "records": count,
        "batches": verifier.batches,
        "seconds": seconds,
        "stopped_by_time": stopped_by_time,
        "records_per_s": count / seconds,
        "batches_per_s": verifier.batches / seconds,
        "steady_records_per_s": steady,
        "time_to_first_batch_s": first - start,
        "peak_pss_mb": monitor.peak_pss / MB,
        "peak_rss_mb": monitor.peak_rss / MB,
        "peak_processes": monitor.peak_processes,
        "memory_samples": monitor.samples,
        "cpu_s": cpu,
        "cpu_us_per_record": cpu["total"] / count * 1e6,
        "children_left_after_close": left,
        "verification": checks,
    }


def _verify(workload: Workload, verifier: Verifier, run: Any, data: Path, seed: int) -> Any:
    if workload.name != "images":
        return verifier.finish()
    from benchmarks.lib_bare import BareArrayRecord

    raw = BareArrayRecord(data)  # An independent reader: the loader's own source is not trusted.
    positions = run.position_of()
    # The DataLoader's rule (Philox(key=seed + position)) unless the run knows its own (the
    # Dataset API's random_map).
    rng_for_position = getattr(run, "rng_for_position", None) or (
        lambda position: np.random.Generator(np.random.Philox(key=seed + position))
    )
    try:
        return verifier.finish(
            read_record=raw.__getitem__,
            rng_for_key=lambda key: rng_for_position(positions[key]),
        )
    finally:
        raw.close()


def main(argv: list[str] | None = None) -> int:
    """Command line of one run (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    parser.add_argument("--config", required=True)
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--records", required=True, type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    workload = WORKLOADS[args.workload]
    configs = {config.name: config for config in configs_for(workload)}
    if args.config not in configs:
        parser.error(f"--config must be one of {sorted(configs)} for {workload.name}")
    result = measure(
        workload, configs[args.config], args.data, args.records, args.seed, args.time_limit
    )
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
