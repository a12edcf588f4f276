"""One worker's loop on the images workload, in one process: time per batch and page faults.

``python -m benchmarks.worker_loop [--batches 40] [--repeats 3]`` runs, in a fresh process per
run (glibc reads its malloc settings at start), what worker 0 of 2 does: its share of the images
pipeline, each batch exported to shared memory as the engine sends it and its memory given back
at once (no parent, no transport). Interleaved, with medians over the repeats:

- ``loader``: the ``DataLoader``'s pipeline (its last ``Batch`` fills rows in shared memory);
- ``dataset``: the Dataset API's ``MapDataset ... batch(128).to_iter_dataset()`` under
  ``mp_prefetch``, its batch filled in shared memory when sent;
- ``dataset, stacked``: the same, stacked in private memory and copied into shared memory (what
  a worker did before the rows, and still does for batches the rows do not take);

each with glibc's malloc defaults and with the settings of
:func:`grainlite.engine.malloc.keep_freed_memory` from the start (grainlite applies them only in
a worker that fills a ``MapDataset.batch`` when it is sent: the second row). It separates a
worker's own cost from the parent's and the machine's, which a whole run (:mod:`benchmarks.run`)
mixes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUNS = (
    ("loader", "rows"),
    ("dataset", "rows"),
    ("dataset", "stacked"),
)
MALLOC = ("glibc defaults", "freed memory kept")


def probe(api: str, batches: str, malloc: str, data: str, count: int) -> dict[str, Any]:
    """Runs worker 0 of 2 for ``count`` batches in this process; ms per batch and faults."""
    import cv2  # noqa: F401  (imported before the clock, as in every run)

    from benchmarks import lib_grainlite
    from benchmarks.workloads import WORKLOADS, configs_for
    from grainlite.engine import malloc as settings
    from grainlite.engine.transport import SlabPool

    if malloc == "freed memory kept":
        if not settings.keep_freed_memory():
            raise RuntimeError("this C library has no mallopt, or MALLOC_* variables are set")
    else:
        settings._kept = False  # as if already asked: never applied in this process

    workload = WORKLOADS["images"]
    configs = {config.name: config for config in configs_for(workload)}
    source = lib_grainlite.array_record_source(data)
    if api == "dataset":
        from grainlite.dataset.mp.pipeline import DatasetPipeline

        run = lib_grainlite.make_run(workload, configs["grainlite-ds-w2"], source, 0)
        pipeline: Any = DatasetPipeline(run.iterate()._dataset._parent)
        state = None
    else:
        run = lib_grainlite.make_run(workload, configs["grainlite-w2"], source, 0)
        loader = run.loader_class(
            data_source=run.source, sampler=run.sampler, operations=run.operations, worker_count=2
        )
        pipeline = loader._pipeline
        state = pipeline.initial_state()
    pool = SlabPool("bench", os.getpid())
    allocate = pool.allocate if batches == "rows" and pipeline.batches_last else None
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    begin = time.perf_counter()
    made = 0
    for element, _ in pipeline.iterate(0, 2, state, allocate):
        pool.export(element)
        slabs, _ = pool.finish_element()
        pool.release(slabs)
        made += 1
        if made == count:
            break
    seconds = time.perf_counter() - begin
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    pool.close()
    return {"ms_per_batch": 1000 * seconds / made, "page_faults": faults}


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", nargs=5, metavar=("API", "BATCHES", "MALLOC", "DATA", "COUNT"))
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.probe:
        api, batches, malloc, data, count = args.probe
        print(json.dumps(probe(api, batches, malloc, data, int(count))))
        return 0
    from benchmarks.bytecode import compile_tree
    from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
    from benchmarks.workloads import WORKLOADS

    compile_tree(ROOT)
    data = ensure_data(DEFAULT_DATA_DIR, WORKLOADS["images"], WORKLOADS["images"].records, 0)
    results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for _ in range(args.repeats):
        for api, batches in RUNS:
            for malloc in MALLOC:
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks.worker_loop", "--probe", api, batches,
                     malloc, str(data), str(args.batches)],
                    capture_output=True, text=True, check=True, cwd=ROOT,
                )  # fmt: skip
                run = json.loads(done.stdout.strip().splitlines()[-1])
                results.setdefault((api, batches, malloc), []).append(run)
                print(f"{api} {batches} {malloc}: {run['ms_per_batch']:.1f} ms", file=sys.stderr)
    print(f"Worker 0 of 2, {args.batches} batches of the images workload; medians of "
          f"{args.repeats} interleaved runs.\n")  # fmt: skip
    print("| worker | malloc | ms per batch | page faults |\n|---|---|--:|--:|")
    for (api, batches, malloc), runs in results.items():
        ms = statistics.median(run["ms_per_batch"] for run in runs)
        faults = statistics.median(run["page_faults"] for run in runs)
        name = "DataLoader" if api == "loader" else f"Dataset API, {batches}"
        print(f"| {name} | {malloc} | {ms:.1f} | {faults:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
