"""What the loader's ``jax.profiler`` span hooks cost with no trace running: an A/B of two trees.

``python -m benchmarks.tracing_overhead --baseline DIR [--rounds 2] [--records 100000]
[--configs loader:0,loader:1,dataset:1]`` runs the ``small-mem`` workload at W=0 (the pipelines
of :func:`benchmarks.instructions.iterate`) in fresh processes, once with grainlite from this
repository and once from ``DIR`` (a checkout of the commit before, e.g. made with
``git archive <commit> | tar -x -C DIR``), alternating, and prints each run's records per second
of the process's own CPU time after a warm-up (other jobs on a shared machine count less than in
wall time). A config is ``api:jax``: ``jax`` 1 imports JAX first, as a JAX training program does,
so each ``next()`` asks JAX's profiler whether a trace records (:mod:`grainlite.stats.tracing`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
from benchmarks.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parents[1]


def child(api: str, data: Path, records: int, import_jax: bool) -> float:
    """Records per CPU second of one run (after a warm-up run of 2,000 records)."""
    if import_jax:
        import jax  # noqa: F401

    from benchmarks.instructions import iterate

    iterate(api, "small-mem", data, 2000)
    begin = time.process_time()
    count = iterate(api, "small-mem", data, records)
    return count / (time.process_time() - begin)


def run(tree: Path, api: str, data: Path, records: int, import_jax: bool) -> float:
    """One child run: ``grainlite`` from ``tree``, the benchmark code from this repository (so
    both trees run the same pipelines, and a baseline without this module works)."""
    with tempfile.TemporaryDirectory(prefix="tracing-overhead-") as folder:
        (Path(folder) / "grainlite").symlink_to(tree / "grainlite")
        command = [
            sys.executable, "-m", "benchmarks.tracing_overhead", "--child", api, "--data",
            str(data), "--records", str(records), *(["--import-jax"] if import_jax else []),
        ]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=f"{folder}{os.pathsep}{ROOT}")
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, check=False, cwd=folder
        )
    if done.returncode != 0:
        raise RuntimeError(f"the run of {tree} failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a checkout of the commit to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--configs", default="loader:0,loader:1,dataset:1")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--import-jax", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(f"{child(args.child, args.data, args.records, args.import_jax):.0f}")
        return 0
    if args.baseline is None:
        parser.error("--baseline DIR is needed")
    workload = WORKLOADS["small-mem"]
    data = ensure_data(args.data_dir, workload, workload.records, 0)
    trees = {"baseline": args.baseline.resolve(), "this": ROOT}
    for config in args.configs.split(","):
        api, jax_first = config.split(":")
        rates: dict[str, list[float]] = {name: [] for name in trees}
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
            for name in order:
                rates[name].append(run(trees[name], api, data, args.records, jax_first == "1"))
        medians = {name: statistics.median(values) for name, values in rates.items()}
        print(
            f"small-mem {api} W=0{' (jax imported)' if jax_first == '1' else ''}: "
            + ", ".join(f"{name} {medians[name]:,.0f} rec/CPU-s {rates[name]}" for name in trees)
            + f"; this/baseline {medians['this'] / medians['baseline']:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
