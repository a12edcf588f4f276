"""Start-up and memory, broken down: this tree against an earlier commit, in one run.

``python -m benchmarks.startup [--before REV] [--repeats 5] [--write-docs]`` exports ``REV``
(default ``d0fa596``, the commit before the start-up work) into a temporary folder and runs,
interleaved, for each tree:

- **a worker's imports**: ``python -c "import grainlite.engine.child"``, the modules a worker
  process loads before it can read (wall time, and the process's PSS afterwards);
- **a loader**: the ``images`` (one epoch) and ``small`` (3 s) workloads with ``worker_count=2``,
  in a fresh process per run: the time from just before the ``DataLoader`` is built to the
  1st, 2nd and 4th batch, records/s, and the peak PSS of the process tree with its parts: the
  parent and the workers, each split into private memory (anonymous), mapped files and shared
  memory (the batches in flight).

Medians over the repeats are printed as Markdown; ``--write-docs`` puts them in
``docs/performance.md`` between the ``startup`` markers.
"""

from __future__ import annotations

import argparse
import json
import os
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
DEFAULT_BEFORE = "d0fa596"
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


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [int(child) for child in children.read().split()]
    except OSError:
        return []


def probe(workload: str, data: str, seconds: float) -> dict[str, Any]:
    """One loader run in this process (``--probe``): batch times and the memory peak."""
    import grainlite as grain
    from benchmarks import lib_grainlite as lib

    if workload == "images":
        import cv2  # noqa: F401  (imported before the clock, as benchmarks.measure does)

        operations = [lib.AugmentImage(), grain.Batch(128)]
    else:
        operations = [lib.ParseSmall(), grain.Batch(1024)]
    source = grain.ArrayRecordDataSource(data)
    sampler = grain.IndexSampler(
        len(source), grain.NoSharding(), shuffle=True, seed=0, num_epochs=1
    )
    peak: dict[str, Any] = {"total": 0.0}
    stop = threading.Event()

    def sample() -> None:
        me = os.getpid()
        while not stop.wait(0.05):
            rows = {"parent": smaps(me)} | {
                f"worker {i}": smaps(c) for i, c in enumerate(_children(me))
            }
            known = {role: row for role, row in rows.items() if row}
            total = sum(row["Pss"] for row in known.values())
            if total > peak["total"]:
                peak.update(total=total, parts=known)

    sampler_thread = threading.Thread(target=sample, daemon=True)
    sampler_thread.start()
    start = time.perf_counter()
    loader = grain.DataLoader(
        data_source=source, sampler=sampler, operations=operations, worker_count=2
    )
    times, records = [], 0
    with iter(loader) as iterator:
        for batch in iterator:
            times.append(time.perf_counter() - start)
            records += len(batch["image"] if workload == "images" else batch)
            if workload != "images" and times[-1] > seconds:
                break
    stop.set()
    sampler_thread.join()
    return {
        "grainlite": grain.__file__,
        "first_s": times[0],
        "second_s": times[1],
        "fourth_s": times[3],
        "records_per_s": records / times[-1],
        "peak_pss_mb": peak["total"],
        "parts": peak.get("parts", {}),
    }


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


def loader_run(tree: Path, workload: str, data: Path, seconds: float) -> dict[str, Any]:
    """One :func:`probe` in a fresh process importing grainlite from ``tree``."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--probe", workload, str(data),
         str(seconds)],
        env=_env(tree), capture_output=True, text=True, check=True, cwd=tree,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["grainlite"].startswith(str(tree)):
        raise RuntimeError(f"the run imported {result['grainlite']}, not grainlite from {tree}")
    return result


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


def render(results: dict[str, Any], before: str, repeats: int) -> str:
    """The Markdown of a run: worker imports, then the loaders, before and after."""
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
        "| workload, W=2 | 1st batch (s) | 2nd (s) | 4th (s) | records/s | peak PSS tree (MB) "
        "| its parts at the median peak: process PSS (anon / file / shm) |",
        "|---|--:|--:|--:|--:|--:|---|",
    ]
    for workload in results["loaders"]:
        for tree in ("before", "after"):
            runs = results["loaders"][workload][tree]
            lines.append(
                f"| {workload}, {tree} | {_median(runs, 'first_s'):.3f} | "
                f"{_median(runs, 'second_s'):.3f} | {_median(runs, 'fourth_s'):.3f} | "
                f"{_median(runs, 'records_per_s'):,.0f} | {_median(runs, 'peak_pss_mb'):.0f} | "
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
    parser.add_argument("--probe", nargs=3, metavar=("WORKLOAD", "DATA", "SECONDS"))
    parser.add_argument("--before", default=DEFAULT_BEFORE)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    if args.probe:
        workload, data, seconds = args.probe
        print(json.dumps(probe(workload, data, float(seconds))))
        return 0
    from benchmarks.bytecode import compile_tree
    from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
    from benchmarks.workloads import WORKLOADS

    data = {
        name: ensure_data(DEFAULT_DATA_DIR, WORKLOADS[name], WORKLOADS[name].records, 0)
        for name in ("images", "small")
    }
    results: dict[str, Any] = {
        "imports": {"before": [], "after": []},
        "loaders": {name: {"before": [], "after": []} for name in data},
    }
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": export(args.before, Path(tmp)), "after": ROOT}
        for path in trees.values():
            compile_tree(path)
        for repeat in range(args.repeats):
            for tree, path in trees.items():
                results["imports"][tree].append(worker_imports(path))
                for name, file in data.items():
                    run = loader_run(path, name, file, 3.0)
                    results["loaders"][name][tree].append(run)
                    print(f"round {repeat + 1} {tree} {name}: {run['first_s']:.3f} s, "
                          f"{run['peak_pss_mb']:.0f} MB", file=sys.stderr)  # fmt: skip
    markdown = render(results, args.before, args.repeats)
    print(markdown)
    out = ROOT / "benchmarks" / "results" / f"startup-{time.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(results, indent=1))
    if args.write_docs:
        write_docs(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
