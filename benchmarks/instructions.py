"""Instructions per record, counted by Valgrind: a per-record cost a loaded machine cannot blur.

``python -m benchmarks.instructions [--workload small-mem|small] [--apis bare,loader,dataset]
[--records 50000,150000] [--import-jax]`` runs each API at W=0 under
``valgrind --tool=callgrind`` twice, over the first ``a`` and then the first ``b`` records of
the workload's shuffled epoch, and prints
``(instructions(b) - instructions(a)) / (b - a)``: the marginal instructions per record, with
start-up, imports and one-time costs cancelled out. ``--import-jax`` imports JAX in the measured
process first, as a JAX training program does: the loader's ``jax.profiler`` spans then check
"is a trace recording?" at each ``next()`` (:mod:`grainlite.stats.tracing`; no trace runs).
The pipelines are the benchmark's
(:mod:`benchmarks.lib_bare`, :mod:`benchmarks.lib_grainlite`); ``small-mem`` reads the file's
records from a list (grainlite's ``InMemoryDataSource`` with ``--shm``; the bare loop always
reads the list), ``small`` the ArrayRecord file itself; the DataLoader with ``num_threads=0``
(see :func:`iterate`). Instructions are not time (cache
misses and threads elsewhere do not count, and Valgrind runs threads one at a time), but two
versions of the code compared this way differ only by what they execute. Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
from benchmarks.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parents[1]
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def iterate(api: str, workload: str, data: Path, limit: int, shm: bool = False) -> int:
    """Reads the first ``limit`` records (whole batches) of ``api`` at W=0; returns how many."""
    from benchmarks import lib_bare, lib_grainlite
    from benchmarks.datagen import load_records
    from benchmarks.workloads import Config

    spec = WORKLOADS[workload]
    if spec.storage == "memory":
        source = load_records(data)
        if shm and api != "bare":
            source = lib_grainlite.memory_source(source)
    elif api == "bare":
        source = lib_bare.BareArrayRecord(data)
    else:
        source = lib_grainlite.array_record_source(str(data))
    # The DataLoader reads in its own thread (num_threads=0): under Valgrind every read runs
    # about 50 times slower, so its read policy could otherwise move reads to a reader thread
    # and count the hand-over, which a run at full speed never makes.
    threads = 0 if api == "loader" else None
    config = Config(api, "bare" if api == "bare" else "grainlite", 0, threads, api=api)
    run = (
        lib_bare.BareRun(spec, config, source, 0)
        if api == "bare"
        else lib_grainlite.make_run(spec, config, source, 0)
    )
    count = 0
    for batch in run.iterate():
        count += len(batch)
        if count >= limit:
            break
    run.close()
    return count


def count_instructions(
    api: str, workload: str, data: Path, limit: int, shm: bool = False, import_jax: bool = False
) -> int:
    """The instructions Valgrind counts for one process that reads ``limit`` records (after
    ``import jax`` with ``import_jax``: a JAX program's loader, no trace running)."""
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
        "benchmarks.instructions", "--child", api, "--workload", workload, "--data", str(data),
        "--records", str(limit), *(["--shm"] if shm else []),
        *(["--import-jax"] if import_jax else []),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found = _COLLECTED.search(done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {done.stderr[-500:]}")
    return int(found[1])


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="small-mem", choices=("small-mem", "small"))
    parser.add_argument("--apis", default="bare,loader,dataset")
    parser.add_argument("--records", default="50000,150000", help="the two record counts a,b")
    parser.add_argument("--shm", action="store_true", help="small-mem: InMemoryDataSource")
    parser.add_argument(
        "--import-jax", action="store_true", help="import jax first (no trace running)"
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.import_jax:  # the profiler's "is a trace recording?" check is then live
            import jax  # noqa: F401
        print(iterate(args.child, args.workload, args.data, int(args.records), args.shm))
        return 0
    low, high = (int(n) for n in args.records.split(","))
    workload = WORKLOADS[args.workload]
    data = ensure_data(args.data_dir, workload, workload.records, 0)
    for api in args.apis.split(","):
        a = count_instructions(api, args.workload, data, low, args.shm, args.import_jax)
        b = count_instructions(api, args.workload, data, high, args.shm, args.import_jax)
        source = " InMemoryDataSource" if args.shm and api != "bare" else ""
        source += ", jax imported" if args.import_jax else ""
        print(
            f"{args.workload}{source} {api} W=0: {(b - a) / (high - low):,.0f} instructions per "
            "record"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
