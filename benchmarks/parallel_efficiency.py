"""Parallel efficiency: the rate with W workers against W times the rate in one process.

``python -m benchmarks.parallel_efficiency [--workload images] [--apis loader,dataset]
[--workers 2] [--rounds 5] [--seconds 6]`` runs :mod:`benchmarks.measure`'s pipeline (same
source, transforms and batch size) with ``worker_count=0`` and with ``--workers`` workers,
through the DataLoader and ``mp_prefetch``, each in a fresh process, alternating, ``--rounds``
times. A run takes batches for ``--seconds`` after its fifth, or to the end of the epoch (the
start is :mod:`benchmarks.startup`'s subject), and checks nothing: :mod:`benchmarks.run`
checks every batch in the training process (about 60 µs per record on ``images``), which at
W=2 takes CPU from the workers and at W=0 is part of the one process's work, so its ratio
says as much about the check as about the loader. Each round also runs W processes at W=0 at
once, sharing nothing: their summed rate over W times one alone is the machine's *ceiling* for
any loader's efficiency (a process runs slower when the other cores work too). Printed: records/s
per run, the medians, efficiency = median rate at W / (W x median rate at W=0), the ceiling,
efficiency over the ceiling, and the training process's CPU per record.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.worker_start import compiled_as_installed

ROOT = Path(__file__).resolve().parents[1]
_CONFIGS = {"loader": "grainlite-w2", "dataset": "grainlite-ds-w2"}
_WARM_BATCHES = 5


def probe(
    workload_name: str, api: str, workers: int, seconds: float, data: Path | None = None
) -> dict[str, Any]:
    """One run in this process: records/s over ``seconds`` after the fifth batch, and this
    process's CPU per record over that window. ``data``: the workload's file (None: the
    benchmarks' own, made if missing)."""
    from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
    from benchmarks.measure import _build
    from benchmarks.memory import _config
    from benchmarks.verify import batch_columns
    from benchmarks.workloads import WORKLOADS

    workload = WORKLOADS[workload_name]
    if workload.name == "images":
        import cv2  # noqa: F401  (imported before the run, as in measure)
    if data is None:
        data = ensure_data(DEFAULT_DATA_DIR, workload, workload.records, 0)
    config = dataclasses.replace(_config(workload_name, _CONFIGS[api]), workers=workers)
    _source, run = _build(workload, config, Path(data), 0)
    taken, records, began, cpu_began = 0, 0, 0.0, 0.0
    try:
        for batch in run.iterate():
            taken += 1
            if taken == _WARM_BATCHES:
                began, cpu_began = time.perf_counter(), _cpu()
                continue
            if taken > _WARM_BATCHES:
                records += len(batch_columns(batch)[0])
                if time.perf_counter() - began >= seconds:
                    break
        elapsed, cpu = time.perf_counter() - began, _cpu() - cpu_began
    finally:
        run.close()
    if records == 0:
        raise SystemExit(f"{workload_name} ended before {_WARM_BATCHES} batches")
    return {
        "records_per_s": records / elapsed,
        "parent_cpu_us_per_record": cpu / records * 1e6,
    }


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _probe_command(
    workload: str, api: str, workers: int, seconds: float, data: Path | None
) -> list[str]:
    command = [sys.executable, "-m", "benchmarks.parallel_efficiency", "--probe", workload, api,
               str(workers), str(seconds)]  # fmt: skip
    return command + (["--data", str(data)] if data is not None else [])


def _run_once(
    workload: str, api: str, workers: int, seconds: float, data: Path | None = None
) -> dict[str, Any]:
    env = dict(compiled_as_installed(), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        _probe_command(workload, api, workers, seconds, data),
        env=env, capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_side_by_side(
    workload: str, api: str, count: int, seconds: float, data: Path | None = None
) -> float:
    """``count`` runs at W=0 at once, each in its own process: the sum of their rates. Nothing
    is shared between them, so their sum over ``count`` times one run alone is what this
    machine gives ``count`` busy CPUs (its ceiling for any loader's efficiency): here each
    process runs slower when both cores work."""
    env = dict(compiled_as_installed(), PYTHONPATH=str(ROOT))
    command = _probe_command(workload, api, 0, seconds, data)
    pipe = subprocess.PIPE
    runs = [
        subprocess.Popen(command, env=env, stdout=pipe, stderr=pipe, text=True, cwd=ROOT)
        for _ in range(count)
    ]
    total = 0.0
    for run in runs:
        out, err = run.communicate()
        if run.returncode != 0:
            raise SystemExit(f"a side-by-side run failed: {err[-2000:]}")
        total += json.loads(out.strip().splitlines()[-1])["records_per_s"]
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", nargs=4, metavar=("WORKLOAD", "API", "WORKERS", "SECONDS"))
    parser.add_argument("--data", type=Path, help="the workload's file (default: the benchmarks')")
    parser.add_argument("--workload", default="images")
    parser.add_argument("--apis", default="loader,dataset")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args(argv)
    if args.probe:
        workload, api, workers, seconds = args.probe
        print(json.dumps(probe(workload, api, int(workers), float(seconds), args.data)))
        return 0
    apis, w = args.apis.split(","), args.workers
    rates: dict[tuple[str, int], list[float]] = {}
    side: dict[str, list[float]] = {}
    cpus: dict[tuple[str, int], list[float]] = {}
    for round_ in range(1, args.rounds + 1):
        for api in apis:
            for workers in (0, w):
                result = _run_once(args.workload, api, workers, args.seconds, args.data)
                rates.setdefault((api, workers), []).append(result["records_per_s"])
                cpus.setdefault((api, workers), []).append(result["parent_cpu_us_per_record"])
                print(
                    f"round {round_} {args.workload} {api} W={workers}: "
                    f"{result['records_per_s']:,.0f} records/s",
                    flush=True,
                )
            together = _run_side_by_side(args.workload, api, w, args.seconds, args.data)
            side.setdefault(api, []).append(together)
            print(f"round {round_} {args.workload} {api} {w} x W=0 at once: {together:,.0f} "
                  f"records/s", flush=True)  # fmt: skip
    print()
    print(
        f"| {args.workload}, API | W=0 records/s, median (range) | W={w} records/s, "
        f"median (range) | efficiency | {w} runs at W=0 at once, records/s | ceiling | "
        f"efficiency / ceiling | training process CPU µs/record at W={w} |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for api in apis:
        one, many, both = rates[(api, 0)], rates[(api, w)], side[api]
        efficiency = statistics.median(many) / (w * statistics.median(one))
        ceiling = statistics.median(both) / (w * statistics.median(one))
        print(
            f"| {api} | {statistics.median(one):,.0f} ({min(one):,.0f} to {max(one):,.0f}) | "
            f"{statistics.median(many):,.0f} ({min(many):,.0f} to {max(many):,.0f}) | "
            f"{efficiency:.2f} | {statistics.median(both):,.0f} | {ceiling:.2f} | "
            f"{efficiency / ceiling:.2f} | {statistics.median(cpus[(api, w)]):.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
