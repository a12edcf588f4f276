"""Start-up and memory, broken down: this tree against an earlier commit, in one run.

``python -m benchmarks.startup [--before REV] [--repeats 5] [--workloads images,small,small-mem]
[--apis loader,dataset] [--seconds 3] [--data-dir DIR] [--write-docs]`` exports ``REV``
(default ``4dfc9bd``) into a temporary folder and runs, interleaved, for each tree:

- **a worker's imports**: ``python -c "import grainlite.engine.child"``, the modules a worker
  process loads before it can read (wall time, and the process's PSS afterwards);
- **worker 0's start-up, step by step**, per workload and API (``--steps``): the parent pickles
  the run's pipeline (timed; the size of what it sends), then a fresh interpreter started as a
  worker is times its imports, the unpickling of the pipeline (with the imports that brings)
  and its first element, in wall and CPU time;
- **a run** per workload and API (``--probe``): :mod:`benchmarks.measure`'s run with 2 workers
  through the ``DataLoader`` or ``mp_prefetch``, in a fresh process: the time from just before
  the pipeline is built to the 1st, 2nd and 4th batch, records/s (small workloads stop after
  ``--seconds``), the parent's CPU time to the first batch, the workers' CPU time, and the peak
  PSS of the process tree with its parts: the parent and the workers, each split into private
  memory (anonymous), mapped files and shared memory (the batches in flight).

Medians over the repeats are printed as Markdown and saved as JSON under
``benchmarks/results/``; ``--write-docs`` puts them in ``docs/performance.md`` between the
``startup`` markers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS_PAGE = ROOT / "docs" / "performance.md"
MARKERS = ("<!-- startup:start -->", "<!-- startup:end -->")
DEFAULT_BEFORE = "4dfc9bd"
_PARTS = ("Pss_Anon", "Pss_File", "Pss_Shmem")


def smaps(pid: int) -> dict[str, float] | None:
    """PSS and its parts (MB) of one process, or None if it is gone."""
    values: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                name, _, rest = line.partition(":")
                if name in ("Pss", *_PARTS):
                    values[name] = int(rest.split()[0]) / 1024
    except OSError:
        return None
    return values


def _roles(parent: int) -> dict[str, dict[str, float] | None]:
    """PSS rows of ``parent``'s descendants by role: the fork server (a child with children of
    its own) and every worker, numbered in pid order."""
    rows: dict[str, dict[str, float] | None] = {}
    workers: list[int] = []
    for child in _direct_children(parent):
        forked = _direct_children(child)
        if forked:
            rows["fork server"] = smaps(child)
            workers += forked
        else:
            workers.append(child)
    for i, pid in enumerate(sorted(workers)):
        rows[f"worker {i}"] = smaps(pid)
    return rows


def _direct_children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [int(child) for child in children.read().split()]
    except OSError:
        return []


_CONFIGS = {"loader": "grainlite-w2", "dataset": "grainlite-ds-w2"}
LOADER_WORKLOADS = ("images", "small", "small-mem")


def probe(
    workload_name: str, api: str, data: str, seconds: float, workers: int = 2
) -> dict[str, Any]:
    """One run in this process (``--probe``): batch times, CPU time and the memory peak.

    The run is :mod:`benchmarks.measure`'s (same source, pipeline and timed region) with
    ``workers`` workers (``--probe-workers``, 2 by default), through the DataLoader
    (``api="loader"``) or ``mp_prefetch`` (``"dataset"``).
    """
    import dataclasses

    import grainlite as grain
    from benchmarks.measure import _build
    from benchmarks.memory import _config
    from benchmarks.workloads import WORKLOADS

    workload = WORKLOADS[workload_name]
    if workload_name == "images":
        import cv2  # noqa: F401  (imported before the clock, as benchmarks.measure does)

    config = dataclasses.replace(_config(workload_name, _CONFIGS[api]), workers=workers)
    _source, run = _build(workload, config, Path(data), 0)
    peak: dict[str, Any] = {"total": 0.0}
    stop = threading.Event()

    def sample() -> None:
        me = os.getpid()
        while not stop.wait(0.05):
            rows = {"parent": smaps(me)} | _roles(me)
            known = {role: row for role, row in rows.items() if row}
            total = sum(row["Pss"] for row in known.values())
            if total > peak["total"]:
                peak.update(total=total, parts=known)

    sampler_thread = threading.Thread(target=sample, daemon=True)
    sampler_thread.start()
    cpu_before = time.process_time()
    start = time.perf_counter()
    times, records = [], 0
    for batch in run.iterate():
        times.append(time.perf_counter() - start)
        if len(times) == 1:
            first_cpu = time.process_time() - cpu_before
        records += len(batch["image"] if workload_name == "images" else batch)
        if times[-1] > seconds and len(times) >= 4:
            break
    run.close()
    stop.set()
    sampler_thread.join()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "grainlite": grain.__file__,
        "first_s": times[0],
        "second_s": times[1],
        "fourth_s": times[3],
        "records_per_s": records / times[-1],
        "parent_cpu_to_first_s": first_cpu,
        "workers_cpu_s": children.ru_utime + children.ru_stime,
        "peak_pss_mb": peak["total"],
        "parts": peak.get("parts", {}),
    }


_STEPS = r"""
import json, os, pickle, sys, time
began, cpu0 = time.time(), time.process_time()
import grainlite.engine.child
try:  # what a worker's main() does before it unpickles (trees that have it)
    from grainlite.engine.packed_records import read_records_in_place
except ImportError:
    pass
else:
    read_records_in_place()
imported, cpu1 = time.time(), time.process_time()
with open(sys.argv[1], "rb") as file:
    blob, state = pickle.load(file)
read, cpu2 = time.time(), time.process_time()
pipeline = pickle.loads(blob)
unpickled, cpu3 = time.time(), time.process_time()
element = next(iter(pipeline.iterate(0, 2, state)))
made, cpu4 = time.time(), time.process_time()
print(json.dumps({"interpreter": began - float(sys.argv[2]), "imports": imported - began,
                  "unpickle": unpickled - read, "first_element": made - unpickled,
                  "interpreter_cpu": cpu0, "imports_cpu": cpu1 - cpu0,
                  "unpickle_cpu": cpu3 - cpu2, "first_element_cpu": cpu4 - cpu3,
                  "grainlite": grainlite.__file__}))
"""


def steps(workload_name: str, api: str, data: str) -> dict[str, Any]:
    """Worker 0's start-up, step by step (``--steps``), in a process started as a worker is.

    This process builds the run and pickles its pipeline (timed: the parent's share of the
    start-up); a fresh interpreter then times its imports, the unpickling of the pipeline and
    the making of its first element (a batch) from the state a worker starts from.
    """
    import pickle
    import subprocess
    import tempfile

    import grainlite as grain
    from benchmarks.measure import _build
    from benchmarks.memory import _config
    from benchmarks.workloads import WORKLOADS

    _source, run = _build(WORKLOADS[workload_name], _config(workload_name, _CONFIGS[api]),
                          Path(data), 0)  # fmt: skip
    iterator = run.iterate()
    pipeline = iterator._pipeline
    state = iterator._position.states[0]
    if hasattr(pipeline, "_blob"):
        pipeline._blob = None  # the Dataset pipeline keeps its bytes: time a fresh pickling
    begin, cpu = time.perf_counter(), time.process_time()
    blob = pipeline.pickled()
    pickled, pickled_cpu = time.perf_counter() - begin, time.process_time() - cpu
    run.close()
    with tempfile.NamedTemporaryFile(suffix=".pkl") as file:
        pickle.dump((blob, state), file, pickle.HIGHEST_PROTOCOL)
        file.flush()
        env = _worker_environment()
        done = subprocess.run(
            [sys.executable, "-c", _STEPS, file.name, repr(time.time())], env=env,
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["grainlite"] != grain.__file__:
        raise RuntimeError(f"the worker imported {result['grainlite']}, not {grain.__file__}")
    result.update(
        pickle=pickled, pickle_cpu=pickled_cpu, blob_mb=len(blob) / 2**20, grainlite=grain.__file__
    )
    return result


def _worker_environment() -> dict[str, str]:
    """The environment this tree gives a worker process (its accelerators hidden, its BLAS
    threads where the tree sets them), for the fresh interpreter that stands in for worker 0."""
    from grainlite.engine import process_group

    make = getattr(process_group, "worker_environment", None)
    return make() if make is not None else dict(os.environ, JAX_PLATFORMS="cpu")


def _env(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(ROOT)]))


def worker_imports(tree: Path) -> dict[str, float]:
    """Wall time and PSS of a process that imports what a worker imports, from ``tree``."""
    code = (
        "import time; s = time.perf_counter(); import grainlite.engine.child; "
        "e = time.perf_counter(); import json, os, sys, grainlite; "
        f"sys.path.insert(0, {str(ROOT)!r}); "
        "from benchmarks.startup import smaps; "
        "print(json.dumps({'seconds': e - s, 'pss_mb': smaps(os.getpid())['Pss'], "
        "'grainlite': grainlite.__file__}))"
    )
    begin = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(tree), capture_output=True, text=True,
        check=True, cwd=tree,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout)
    result["process_s"] = time.perf_counter() - begin
    if not result.pop("grainlite").startswith(str(tree)):
        raise RuntimeError(f"the import did not take grainlite from {tree}")
    return result


def _in_tree(tree: Path, args: list[str]) -> dict[str, Any]:
    """This script with ``args`` in a fresh process importing grainlite from ``tree``."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        env=_env(tree), capture_output=True, text=True, check=True, cwd=tree,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["grainlite"].startswith(str(tree)):
        raise RuntimeError(f"the run imported {result['grainlite']}, not grainlite from {tree}")
    return result


def loader_run(tree: Path, workload: str, api: str, data: Path, seconds: float) -> dict[str, Any]:
    """One :func:`probe` in a fresh process importing grainlite from ``tree``."""
    return _in_tree(tree, ["--probe", workload, api, str(data), str(seconds)])


def steps_run(tree: Path, workload: str, api: str, data: Path) -> dict[str, Any]:
    """One :func:`steps` in a fresh process importing grainlite from ``tree``."""
    return _in_tree(tree, ["--steps", workload, api, str(data)])


def export(rev: str, into: Path) -> Path:
    """The files of commit ``rev`` in a fresh folder (``git archive``)."""
    archive = into / "tree.tar"
    subprocess.run(["git", "archive", "-o", str(archive), rev], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _parts(runs: list[dict[str, Any]]) -> str:
    """The parts of the median run's peak (by total): parent and workers, anon/file/shm."""
    run = sorted(runs, key=lambda r: r["peak_pss_mb"])[len(runs) // 2]
    cells = []
    for role in sorted(run["parts"]):
        row = run["parts"][role]
        cells.append(
            f"{role} {row['Pss']:.0f} ({row.get('Pss_Anon', 0):.0f} / "
            f"{row.get('Pss_File', 0):.0f} / {row.get('Pss_Shmem', 0):.0f})"
        )
    return "; ".join(cells)


_API_NAMES = {"loader": "DataLoader", "dataset": "Dataset API"}
_STEP_KEYS = ("pickle", "interpreter", "imports", "unpickle", "first_element")


def render(results: dict[str, Any], before: str, repeats: int) -> str:
    """The Markdown of a run: worker imports, the worker's start-up steps, then the runs."""
    lines = [
        f"Measured with `python -m benchmarks.startup --before {before} --repeats {repeats}` on "
        f"{time.strftime('%Y-%m-%d')}; medians of {repeats} interleaved runs. *before* is commit "
        f"`{before}`, *after* this tree.",
        "",
        "| worker imports | wall (s) | process start to exit (s) | PSS after imports (MB) |",
        "|---|--:|--:|--:|",
    ]
    for tree in ("before", "after"):
        runs = results["imports"][tree]
        lines.append(
            f"| {tree} | {_median(runs, 'seconds'):.3f} | {_median(runs, 'process_s'):.3f} | "
            f"{_median(runs, 'pss_mb'):.1f} |"
        )
    lines += [
        "",
        "| worker 0's start-up, W=2, wall / CPU (s) | parent: pickle the pipeline | its size "
        "(MB) | worker: interpreter | imports | unpickle | first element |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for (workload, api), by_tree in results["steps"].items():
        for tree in ("before", "after"):
            runs = by_tree[tree]
            cells = [
                f"{_median(runs, key):.3f} / {_median(runs, key + '_cpu'):.3f}"
                for key in _STEP_KEYS
            ]
            lines.append(
                f"| {workload}, {_API_NAMES[api]}, {tree} | {cells[0]} | "
                f"{_median(runs, 'blob_mb'):.1f} | {' | '.join(cells[1:])} |"
            )
    lines += [
        "",
        "| workload, W=2 | 1st batch (s) | 2nd (s) | 4th (s) | records/s | parent CPU to the 1st "
        "batch (s) | workers' CPU (s) | peak PSS tree (MB) "
        "| its parts at the median peak: process PSS (anon / file / shm) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for (workload, api), by_tree in results["loaders"].items():
        for tree in ("before", "after"):
            runs = by_tree[tree]
            lines.append(
                f"| {workload}, {_API_NAMES[api]}, {tree} | {_median(runs, 'first_s'):.3f} | "
                f"{_median(runs, 'second_s'):.3f} | {_median(runs, 'fourth_s'):.3f} | "
                f"{_median(runs, 'records_per_s'):,.0f} | "
                f"{_median(runs, 'parent_cpu_to_first_s'):.3f} | "
                f"{_median(runs, 'workers_cpu_s'):.2f} | {_median(runs, 'peak_pss_mb'):.0f} | "
                f"{_parts(runs)} |"
            )
    return "\n".join(lines)


def write_docs(markdown: str) -> None:
    """Puts ``markdown`` between the startup markers of docs/performance.md."""
    page = DOCS_PAGE.read_text()
    head, _, rest = page.partition(MARKERS[0])
    _, _, tail = rest.partition(MARKERS[1])
    DOCS_PAGE.write_text(f"{head}{MARKERS[0]}\n{markdown}\n{MARKERS[1]}{tail}")


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", nargs=4, metavar=("WORKLOAD", "API", "DATA", "SECONDS"))
    parser.add_argument("--probe-workers", type=int, default=2, help="workers of a --probe")
    parser.add_argument("--steps", nargs=3, metavar=("WORKLOAD", "API", "DATA"))
    parser.add_argument("--before", default=DEFAULT_BEFORE)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workloads", default=",".join(LOADER_WORKLOADS))
    parser.add_argument("--apis", default="loader,dataset")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of a small run")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    if args.probe:
        workload, api, file, seconds = args.probe
        print(json.dumps(probe(workload, api, file, float(seconds), args.probe_workers)))
        return 0
    if args.steps:
        print(json.dumps(steps(*args.steps)))
        return 0
    from benchmarks.bytecode import compile_tree
    from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
    from benchmarks.workloads import WORKLOADS

    data_dir = args.data_dir or DEFAULT_DATA_DIR
    workloads = args.workloads.split(",")
    apis = args.apis.split(",")
    data = {
        name: ensure_data(data_dir, WORKLOADS[name], WORKLOADS[name].records, 0)
        for name in workloads
    }
    cases = [(name, api) for name in workloads for api in apis]
    results: dict[str, Any] = {
        "imports": {"before": [], "after": []},
        "steps": {case: {"before": [], "after": []} for case in cases},
        "loaders": {case: {"before": [], "after": []} for case in cases},
    }
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": export(args.before, Path(tmp)), "after": ROOT}
        for path in trees.values():
            compile_tree(path)
        for repeat in range(args.repeats):
            for tree, path in trees.items():
                results["imports"][tree].append(worker_imports(path))
                for name, api in cases:
                    results["steps"][name, api][tree].append(steps_run(path, name, api, data[name]))
                    run = loader_run(path, name, api, data[name], args.seconds)
                    results["loaders"][name, api][tree].append(run)
                    print(f"round {repeat + 1} {tree} {name} {api}: {run['first_s']:.3f} s, "
                          f"{run['peak_pss_mb']:.0f} MB", file=sys.stderr)  # fmt: skip
    markdown = render(results, args.before, args.repeats)
    print(markdown)
    out = ROOT / "benchmarks" / "results" / f"startup-{time.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(exist_ok=True)
    saved = {
        part: {f"{name} {api}": runs for (name, api), runs in results[part].items()}
        for part in ("steps", "loaders")
    }
    out.write_text(json.dumps({"imports": results["imports"], **saved}, indent=1))
    if args.write_docs:
        write_docs(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
