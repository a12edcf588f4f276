"""Where the memory of a run goes: per process (parent, each worker) and per kind of page.

``python -m benchmarks.memory --workload images --config grainlite-w2 [--records N] [--data F]``
runs one configuration the way :mod:`benchmarks.measure` does (same source, same pipeline, same
consumer) and samples the process tree every ``--interval`` seconds. At the sample where the PSS
of the whole tree is highest it prints, for every process (the parent, the fork server where
workers are forked, each worker):

- ``Pss_Anon``: the heap: interpreter objects, imported modules' data, numpy buffers;
- ``Pss_File``: mapped files (shared libraries, the interpreter binary), split between the
  processes that map them;
- ``Pss_Shmem``: shared memory (the workers' slabs, a shared-memory data source), split the same
  way, with the number and total size of the ``/dev/shm`` mappings it holds.

``--imports`` instead starts one fresh interpreter the way a worker starts
(``python -m grainlite.engine.child``'s imports, then the pickled pipeline of the configuration)
and prints its PSS after each step, then the cost of each top-level package it imported
(imported one by one, in first-import order, in another fresh interpreter: a package's cost
includes what it imports that no earlier one did).

PSS is what the benchmark reports (``peak_pss_mb``): a page shared by k processes counts 1/k in
each, so the sum over the tree counts every page once.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from benchmarks.datagen import DEFAULT_DATA_DIR, data_path
from benchmarks.monitor import tree_pids
from benchmarks.workloads import WORKLOADS, Config, configs_for

KB = 1024
MB = 1024 * 1024
_FIELDS = ("Pss", "Pss_Anon", "Pss_File", "Pss_Shmem", "Rss")


def smaps_rollup(pid: int) -> dict[str, int]:
    """The PSS/RSS fields of ``/proc/PID/smaps_rollup``, in bytes (empty if the process is gone)."""
    values: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                name, _, rest = line.partition(":")
                if name in _FIELDS:
                    values[name] = int(rest.split()[0]) * KB
    except OSError:
        return {}
    return values


def shm_mappings(pid: int) -> tuple[int, int]:
    """How many distinct ``/dev/shm`` files ``pid`` maps, and their total mapped size."""
    sizes: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                if "/dev/shm/" not in line:
                    continue
                fields = line.split(maxsplit=5)
                low, high = (int(x, 16) for x in fields[0].split("-"))
                sizes[fields[5].strip()] = sizes.get(fields[5].strip(), 0) + high - low
    except OSError:
        return 0, 0
    return len(sizes), sum(sizes.values())


# The role of each pid seen so far: a worker that is exiting has an empty command line (the
# kernel drops it with the process's memory map) while its pages still count, so it keeps the
# role it had when it was last seen whole.
_roles: dict[int, str] = {}


def _parent(pid: int) -> int | None:
    """The parent pid of ``pid`` (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def _role(pid: int, me: int) -> str:
    if pid == me:
        return "parent"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            words = cmdline.read().split(b"\0")
    except OSError:
        return _roles.get(pid, "gone")
    if not any(words):
        return _roles.get(pid, "exiting")
    if b"grainlite.engine.child" in words:
        role = "worker"
    elif b"grainlite.engine.forkserver" in words:
        # A forked worker keeps its fork server's command line: the server is this process's
        # child, the workers are the server's.
        role = "fork server" if _parent(pid) == me else "worker"
    else:
        role = b" ".join(words[:3]).decode(errors="replace")[:40]
    _roles[pid] = role
    return role


def snapshot(me: int) -> list[dict[str, Any]]:
    """One sample of the tree of ``me``: a row per live process."""
    rows = []
    for pid in tree_pids(me):
        fields = smaps_rollup(pid)
        if not fields:
            continue
        count, size = shm_mappings(pid)
        rows.append(
            {"pid": pid, "role": _role(pid, me), **fields, "shm_maps": count, "shm_size": size}
        )
    return rows


class PeakSampler:
    """Samples :func:`snapshot` in a thread and keeps the sample with the highest total PSS."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.peak: list[dict[str, Any]] = []
        self.peak_pss = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._me = os.getpid()

    def sample(self) -> None:
        rows = snapshot(self._me)
        total = sum(row.get("Pss", 0) for row in rows)
        self.samples += 1
        if total > self.peak_pss:
            self.peak_pss, self.peak = total, rows

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> PeakSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.sample()
        self._stop.set()
        self._thread.join()


def _config(workload: str, name: str) -> Config:
    configs = {config.name: config for config in configs_for(WORKLOADS[workload])}
    if name not in configs:
        raise SystemExit(f"--config must be one of {sorted(configs)} for {workload}")
    return configs[name]


def tree_breakdown(
    workload_name: str, config: Config, data: Path, records: int, interval: float
) -> dict[str, Any]:
    """Runs the configuration as :func:`benchmarks.measure.measure` does; the peak sample."""
    from benchmarks.measure import _build

    workload = WORKLOADS[workload_name]
    if workload.name == "images":
        import cv2  # noqa: F401  (as in measure: imported before the run)
    source, run = _build(workload, config, data, 0)
    if len(source) != records:
        raise SystemExit(f"the source has {len(source)} records, expected {records}")
    gc.collect()
    before = snapshot(os.getpid())
    count = 0
    with PeakSampler(interval) as sampler:
        for batch in run.iterate():
            leaves = batch.values() if isinstance(batch, dict) else [batch]
            count += len(next(iter(leaves)))
            if workload.time_limited and count >= 200_000:
                break
        del batch, leaves
        run.close()
    close = getattr(source, "close", None)
    if close is not None:
        close()
    return {
        "workload": workload_name, "config": config.name, "records": count,
        "samples": sampler.samples, "before": before, "peak": sampler.peak,
        "peak_pss_mb": sampler.peak_pss / MB,
    }  # fmt: skip


def print_tree(result: dict[str, Any]) -> None:
    """The peak sample as a Markdown table (MB)."""
    print(
        f"{result['workload']} {result['config']}: peak PSS of the tree "
        f"{result['peak_pss_mb']:.1f} MB ({result['samples']} samples, {result['records']} records)"
    )
    print(f"parent before the run: PSS {result['before'][0]['Pss'] / MB:.1f} MB")
    print("| process | PSS | anon | file | shmem | /dev/shm maps (count, MB mapped) | RSS |")
    print("|---|---|---|---|---|---|---|")
    totals = dict.fromkeys(_FIELDS, 0)
    for row in result["peak"]:
        for field in _FIELDS:
            totals[field] += row.get(field, 0)
        print(
            f"| {row['role']} {row['pid']} | {row['Pss'] / MB:.1f} | {row['Pss_Anon'] / MB:.1f} "
            f"| {row['Pss_File'] / MB:.1f} | {row['Pss_Shmem'] / MB:.1f} "
            f"| {row['shm_maps']}, {row['shm_size'] / MB:.1f} | {row['Rss'] / MB:.1f} |"
        )
    print(
        f"| **tree** | {totals['Pss'] / MB:.1f} | {totals['Pss_Anon'] / MB:.1f} "
        f"| {totals['Pss_File'] / MB:.1f} | {totals['Pss_Shmem'] / MB:.1f} | "
        f"| {totals['Rss'] / MB:.1f} |"
    )


# Worker start-up, step by step ---------------------------------------------------------------
_STEPS = r"""
import os, pickle, sys
def pss():
    with open(f"/proc/{os.getpid()}/smaps_rollup") as f:
        return {l.split(":")[0]: int(l.split()[1]) for l in f if l.startswith(("Pss", "Rss"))}
steps = [("interpreter", pss(), list(sys.modules))]
import grainlite.engine.child
steps.append(("import grainlite.engine.child", pss(), list(sys.modules)))
with open(sys.argv[1], "rb") as blob:
    pipeline = pickle.loads(blob.read())
steps.append(("unpickle the pipeline", pss(), list(sys.modules)))
print(repr(steps))
"""

_ONE_BY_ONE = r"""
import importlib, os, sys
def anon():
    with open(f"/proc/{os.getpid()}/smaps_rollup") as f:
        return sum(int(l.split()[1]) for l in f if l.startswith(("Pss_Anon", "Pss_File")))
costs = []
for name in sys.argv[1:]:
    before = anon()
    try:
        importlib.import_module(name)
    except Exception as error:
        costs.append((name, -1))
        continue
    costs.append((name, anon() - before))
print(repr(costs))
"""


def _pipeline_blob(workload_name: str, config: Config, data: Path, records: int) -> bytes:
    """What the parent sends a worker for this configuration (the pickled pipeline)."""
    from benchmarks.measure import _build

    _source, run = _build(WORKLOADS[workload_name], config, data, 0)
    iterator = run.iterate()
    blob = iterator._pipeline.pickled()  # both APIs' iterators keep the pipeline they send
    run.close()
    return blob


def import_breakdown(
    workload_name: str, config: Config, data: Path, records: int
) -> dict[str, Any]:
    """A fresh interpreter's PSS (kB) after each start-up step of a worker, and per package."""
    import ast
    import tempfile

    blob = _pipeline_blob(workload_name, config, data, records)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    with tempfile.NamedTemporaryFile(suffix=".pkl") as file:
        file.write(blob)
        file.flush()
        out = subprocess.run(
            [sys.executable, "-c", _STEPS, file.name], env=env, capture_output=True, text=True,
            check=True,
        ).stdout  # fmt: skip
    steps = ast.literal_eval(out.strip().splitlines()[-1])
    seen = set(steps[0][2])
    order = []
    for _, _, modules in steps[1:]:
        for name in modules:
            top = name.split(".")[0]
            if name not in seen and top not in order and top not in seen:
                order.append(top)
            seen.add(name)
    costs = ast.literal_eval(
        subprocess.run(
            [sys.executable, "-c", _ONE_BY_ONE, *order], env=env, capture_output=True, text=True,
            check=True,
        ).stdout.strip().splitlines()[-1]
    )  # fmt: skip
    return {
        "blob_bytes": len(blob),
        "steps": [(name, fields, len(modules)) for name, fields, modules in steps],
        "packages": costs,
    }


def print_imports(result: dict[str, Any]) -> None:
    """The worker start-up steps and the per-package costs (MB)."""
    print(f"pickled pipeline: {result['blob_bytes'] / KB:.1f} kB")
    print("| step | PSS | anon | file | modules |")
    print("|---|---|---|---|---|")
    for name, fields, modules in result["steps"]:
        print(
            f"| {name} | {fields['Pss'] / KB:.1f} | {fields['Pss_Anon'] / KB:.1f} "
            f"| {fields['Pss_File'] / KB:.1f} | {modules} |"
        )
    print("\nTop-level packages, imported one by one in a fresh interpreter (anon + file PSS):")
    costs = sorted(result["packages"], key=lambda item: -item[1])
    for name, cost in costs[:12]:
        print(f"  {name:32s} {cost / KB:7.1f} MB")
    rest = sum(cost for _, cost in costs[12:] if cost > 0)
    print(f"  {len(costs) - 12} others together {rest / KB:7.1f} MB")


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="images", choices=sorted(WORKLOADS))
    parser.add_argument("--config", default="grainlite-w2")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--interval", type=float, default=0.01)
    parser.add_argument("--imports", action="store_true", help="worker start-up steps instead")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)
    workload = WORKLOADS[args.workload]
    records = args.records or workload.records
    data = args.data or data_path(DEFAULT_DATA_DIR, workload, records, 0)
    if not data.exists():
        raise SystemExit(f"{data} does not exist: make it with python -m benchmarks.run once")
    config = _config(args.workload, args.config)
    if args.imports:
        result = import_breakdown(args.workload, config, data, records)
        print_imports(result)
    else:
        result = tree_breakdown(args.workload, config, data, records, args.interval)
        print_tree(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
