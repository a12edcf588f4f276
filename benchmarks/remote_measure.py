"""One measured run of the remote benchmark: one library, one workload, two epochs, in this process.

``python -m benchmarks.remote_measure --library L --workload W --data DIR --records N --shards S
--out JSON [--url PREFIX] [--cache-dir DIR]`` is what ``benchmarks.remote_run`` starts, with the
interpreter of the library's environment (.venv, .venv-litdata or .venv-mosaic) and the S3
variables of the proxy in front of the server in its environment. Only numpy, psutil and cv2 are
needed here besides the library (no grainlite in the peers' environments).

The clock starts just before the data source (or streaming dataset) is constructed: what a remote
source reads to open (a listing, indexes, footers) is part of its first batch. Epoch 1 is cold
(empty cache), epoch 2 warm (same source or dataset, same cache). Each epoch is verified as the
suite's runs are (:mod:`benchmarks.verify`: count, every index at most once and, for a whole
epoch, exactly once, label checksum, sampled images recomputed from the raw records). A thread
samples the size of the cache folder; the CPU time of this (training) process and of its whole
tree is reported per record read.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.monitor import TreeMonitor
from benchmarks.remote_data import RawRecords, RemoteData
from benchmarks.verify import Verifier
from benchmarks.workloads import WORKLOADS, Workload

MB = 1024 * 1024
LIBRARIES = {
    "grainlite-local": "benchmarks.remote_lib_grainlite",
    "grainlite-remote": "benchmarks.remote_lib_grainlite",
    "litdata": "benchmarks.remote_lib_litdata",
    "mosaic": "benchmarks.remote_lib_mosaic",
    "grain-fsspec": "benchmarks.remote_lib_grain",
}


class FolderSize:
    """Samples the total size of the files under a folder in a thread; keeps the peak."""

    def __init__(self, folder: Path | None, interval: float = 0.05) -> None:
        self.folder = folder
        self.interval = interval
        self.peak = 0
        self.thread_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cache-size", daemon=True)

    def size(self) -> int:
        total = 0
        if self.folder is None:
            return 0
        for dirpath, _, files in os.walk(self.folder):
            for name in files:
                with contextlib.suppress(OSError):  # removed while we looked
                    total += os.stat(os.path.join(dirpath, name)).st_size
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.size())
        self.thread_cpu = time.thread_time()

    def start(self) -> FolderSize:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self.size())


def run_epoch(
    epoch: Any, verifier: Verifier, start: float, time_limit: float | None
) -> dict[str, Any]:
    """Iterates one epoch's batches into ``verifier``; its timings."""
    first = None
    stopped = False
    for batch in epoch:
        verifier.add(batch)
        now = time.perf_counter()
        if first is None:
            first = now
        if time_limit is not None and now - start >= time_limit:
            stopped = True
            break
    end = time.perf_counter()
    if first is None:
        raise RuntimeError("the epoch produced no batch")
    return {
        "seconds": end - start,
        "first_batch_s": first - start,
        "records": verifier.count,
        "records_per_s": verifier.count / (end - start),
        "stopped_by_time": stopped,
    }


def measure(
    library: str,
    workload: Workload,
    data: RemoteData,
    seed: int,
    url: str,
    cache_dir: Path | None,
    time_limit: float,
    epoch_limit: float | None = None,
) -> dict[str, Any]:
    lib = importlib.import_module(LIBRARIES[library])
    if workload.name == "images":
        import cv2  # noqa: F401  (imported before the clock, like every other import)
    lib.prepare()
    raw = RawRecords(data.root)
    # A whole-epoch workload (images) may still be cut at ``epoch_limit`` (for a peer that reads
    # a record per request): its rate is then that of the part read, and it says so.
    limit = time_limit if workload.time_limited else epoch_limit
    # The peak PSS every 0.25 s, with no RSS-only samples in between (this benchmark reports no
    # RSS). A sample lists the threads of every process of the tree and reads each process's
    # smaps_rollup; the training process has 68 to 102 threads (array_record's pool, the cache's
    # downloads), so the other benchmarks' cadence (20 ms, PSS every 0.1 s) cost it 0.4 to 0.5 s
    # of CPU in a 3 s epoch from local files and 0.65 to 1.0 s in a cold epoch from the bucket.
    monitor = TreeMonitor(interval=0.25, pss_every=1).start()
    cache = FolderSize(cache_dir).start()
    start = time.perf_counter()
    run = lib.Run(library, workload, data, seed, url, cache_dir)
    epochs = []
    try:
        for n in range(2):
            verifier = Verifier(data.records, workload.batch_size, seed, False, workers=lib.WORKERS)
            epoch_start = start if n == 0 else time.perf_counter()
            timings = run_epoch(run.epoch(n), verifier, epoch_start, limit)
            run.end_epoch()
            if not workload.time_limited and not timings["stopped_by_time"]:
                verifier.full_epoch = True  # not cut: the whole epoch, each record once
            checks = finish(verifier, workload, run, raw, n)
            epochs.append({**timings, "verification": checks})
    finally:
        run.close()
    cache.stop()
    cpu = monitor.cpu_seconds()
    cpu["self"] -= cache.thread_cpu
    cpu["total"] -= cache.thread_cpu
    records = sum(e["records"] for e in epochs)
    return {
        "library": library,
        "workload": workload.name,
        "cold_records_per_s": epochs[0]["records_per_s"],
        "warm_records_per_s": epochs[1]["records_per_s"],
        "first_batch_s": epochs[0]["first_batch_s"],
        "partial_epochs": not workload.time_limited and any(e["stopped_by_time"] for e in epochs),
        "peak_cache_mb": cache.peak / MB,
        "cpu_us_per_record": cpu["self"] / records * 1e6,
        "tree_cpu_us_per_record": cpu["total"] / records * 1e6,
        "peak_pss_mb": monitor.peak_pss / MB,
        "epochs": epochs,
        "cpu_s": cpu,
        "details": run.details(),
    }


def finish(verifier: Verifier, workload: Workload, run: Any, raw: RawRecords, n: int) -> Any:
    if workload.name != "images":
        return verifier.finish()
    return verifier.finish(read_record=raw.__getitem__, rng_for_key=run.rng_for_key(n))


def peer_rng(seed: int) -> Any:
    """The streaming peers' per-record generator (their order is their own, so the key is the
    record index): Philox(key=seed + index)."""
    return lambda key: np.random.Generator(np.random.Philox(key=seed + key))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, choices=sorted(LIBRARIES))
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--records", required=True, type=int)
    parser.add_argument("--shards", required=True, type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--url", default="", help="s3://bucket/prefix of this workload's data")
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--time-limit", type=float, default=15.0)
    parser.add_argument("--epoch-limit", type=float, default=None,
                        help="seconds at most per epoch of a whole-epoch workload")  # fmt: skip
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    data = RemoteData(args.data, args.records, args.shards)
    result = measure(
        args.library,
        WORKLOADS[args.workload],
        data,
        args.seed,
        args.url,
        args.cache_dir,
        args.time_limit,
        args.epoch_limit,
    )
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
