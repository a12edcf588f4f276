"""How workers start, compared: one fresh interpreter per worker against the fork server.

``python -m benchmarks.worker_start [--workers 2,8,16] [--workloads images,small-mem]
[--apis loader,dataset] [--repeats 3] [--seconds 3] [--modes spawn,forkserver]`` runs
:func:`benchmarks.startup.probe` (a fresh process per run: the DataLoader or ``mp_prefetch``
built inside the timed region, so *first batch* is the time from constructing the loader to the
first batch in hand) once per mode, workload, API and worker count, interleaved, ``--repeats``
rounds. The mode is ``GRAINLITE_WORKER_START`` (see :mod:`grainlite.engine.forkserver_client`).
It prints the medians as Markdown (first batch, the parent's and the workers' CPU seconds, the
peak PSS of the whole process tree, the workers' part of it, records/s) and saves every run as
JSON under ``benchmarks/results/``. The probes import modules compiled once, as an installed
package's are (:func:`compiled_as_installed`).

``--breakdown`` instead measures what one worker costs in each mode, with a pipeline that does
no work (a ``RangeDataSource``, one ``Map`` that returns the record): in a fresh process per run,
a DataLoader with ``--workers`` workers (each count given) is started and each worker's first
element taken; then the CPU time all the started processes used (server included) per worker,
and the PSS of each worker and of the server, split into anonymous, file and shared pages.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_API_NAMES = {"loader": "DataLoader", "dataset": "Dataset API"}


def compiled_as_installed() -> dict[str, str]:
    """The environment of a probe, its modules compiled once as an installed package's are.

    pip compiles a package's modules as it installs it; an environment that sets
    ``PYTHONDONTWRITEBYTECODE`` (this machine's does) would make every start compile
    grainlite's modules again (about 0.1 s of the training process's CPU before the first
    batch, in no user's install). So the tree is compiled here and the variable dropped."""
    import compileall

    for package in ("grainlite", "benchmarks"):
        compileall.compile_dir(ROOT / package, quiet=1)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_once(mode: str, workload: str, api: str, data: Path, seconds: float, workers: int) -> Any:
    """One probe in a fresh process with ``GRAINLITE_WORKER_START=mode``."""
    env = dict(compiled_as_installed(), GRAINLITE_WORKER_START=mode, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.startup", "--probe", workload, api, str(data),
         str(seconds), "--probe-workers", str(workers)],
        env=env, capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


_BREAKDOWN = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[2])
from benchmarks.startup import smaps, _roles
import grainlite as grain

class Same(grain.MapTransform):
    def map(self, record):
        return record

workers = int(sys.argv[1])
loader = grain.DataLoader(
    data_source=grain.RangeDataSource(0, 10 * workers, 1),
    sampler=grain.IndexSampler(10 * workers, grain.NoSharding(), num_epochs=1),
    operations=[Same()], worker_count=workers)
begin = time.perf_counter()
iterator = iter(loader)
for _ in range(workers):
    next(iterator)
every_first = time.perf_counter() - begin
rows = {role: row for role, row in _roles(os.getpid()).items() if row}
iterator.close()
children = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"every_first_s": every_first, "rows": rows,
                  "children_cpu_s": children.ru_utime + children.ru_stime}))
"""


def breakdown_once(mode: str, workers: int) -> Any:
    """One :data:`_BREAKDOWN` run in a fresh process with ``GRAINLITE_WORKER_START=mode``."""
    env = dict(os.environ, GRAINLITE_WORKER_START=mode, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", _BREAKDOWN, str(workers), str(ROOT)],
        env=env, capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def render_breakdown(results: dict[tuple[int, str], list[Any]], repeats: int) -> str:
    """The medians of the breakdown runs as a Markdown table."""
    lines = [
        f"Medians of {repeats} interleaved runs (`python -m benchmarks.worker_start --breakdown`)"
        f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| W, start | every worker's first element (s) | CPU of the started processes per "
        "worker (s) | PSS per worker: total (anon / file / shm) (MB) | fork server PSS (MB) |",
        "|---|--:|--:|--:|--:|",
    ]
    for (workers, mode), runs in results.items():
        per = {
            key: statistics.median(
                statistics.mean(
                    row.get(key, 0.0) for role, row in r["rows"].items() if role.startswith("w")
                )
                for r in runs
            )
            for key in ("Pss", "Pss_Anon", "Pss_File", "Pss_Shmem")
        }
        server = [r["rows"]["fork server"]["Pss"] for r in runs if "fork server" in r["rows"]]
        lines.append(
            f"| W={workers}, {mode} | {statistics.median(r['every_first_s'] for r in runs):.3f} | "
            f"{statistics.median(r['children_cpu_s'] for r in runs) / workers:.3f} | "
            f"{per['Pss']:.1f} ({per['Pss_Anon']:.1f} / {per['Pss_File']:.1f} / "
            f"{per['Pss_Shmem']:.1f}) | "
            f"{statistics.median(server) if server else 0.0:.1f} |"
        )
    return "\n".join(lines)


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _workers_pss(run: dict[str, Any]) -> float:
    """The PSS of every process but the training process (workers, fork server) at the peak (MB)."""
    return sum(row["Pss"] for role, row in run.get("parts", {}).items() if role != "parent")


def render(results: dict[tuple[str, str, int, str], list[dict[str, Any]]], repeats: int) -> str:
    """The medians as a Markdown table."""
    lines = [
        f"Medians of {repeats} interleaved runs (`python -m benchmarks.worker_start`), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| workload, API, W, start | 1st batch (s) | parent CPU to 1st (s) | workers' CPU (s) "
        "| peak PSS tree (MB) | workers and fork server (MB) | records/s |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for (workload, api, workers, mode), runs in results.items():
        lines.append(
            f"| {workload}, {_API_NAMES[api]}, W={workers}, {mode} | "
            f"{_median(runs, 'first_s'):.3f} | {_median(runs, 'parent_cpu_to_first_s'):.3f} | "
            f"{_median(runs, 'workers_cpu_s'):.2f} | {_median(runs, 'peak_pss_mb'):.0f} | "
            f"{statistics.median(_workers_pss(r) for r in runs):.0f} | "
            f"{_median(runs, 'records_per_s'):,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="2,8,16")
    parser.add_argument("--workloads", default="images,small-mem")
    parser.add_argument("--apis", default="loader,dataset")
    parser.add_argument("--modes", default="spawn,forkserver")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--breakdown", action="store_true", help="one worker's cost per mode")
    args = parser.parse_args(argv)
    if args.breakdown:
        counts = [int(w) for w in args.workers.split(",")]
        modes = args.modes.split(",")
        found: dict[tuple[int, str], list[Any]] = {(w, m): [] for w in counts for m in modes}
        for _ in range(args.repeats):
            for workers, mode in found:
                found[workers, mode].append(breakdown_once(mode, workers))
        print(render_breakdown(found, args.repeats))
        return 0
    from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
    from benchmarks.workloads import WORKLOADS

    data_dir = args.data_dir or DEFAULT_DATA_DIR
    workloads = args.workloads.split(",")
    data = {n: ensure_data(data_dir, WORKLOADS[n], WORKLOADS[n].records, 0) for n in workloads}
    cases = [
        (name, api, int(w), mode)
        for w in args.workers.split(",")
        for name in workloads
        for api in args.apis.split(",")
        for mode in args.modes.split(",")
    ]
    results: dict[tuple[str, str, int, str], list[dict[str, Any]]] = {c: [] for c in cases}
    for repeat in range(args.repeats):
        for case in cases:
            name, api, workers, mode = case
            run = run_once(mode, name, api, data[name], args.seconds, workers)
            results[case].append(run)
            print(f"round {repeat + 1} {name} {api} W={workers} {mode}: {run['first_s']:.3f} s, "
                  f"{run['peak_pss_mb']:.0f} MB", file=sys.stderr, flush=True)  # fmt: skip
    print(render(results, args.repeats))
    out = ROOT / "benchmarks" / "results" / f"worker-start-{time.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({" ".join(map(str, c)): runs for c, runs in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
