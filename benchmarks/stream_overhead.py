"""Paired A/B micro-benchmark: the CPU time per record of an ``mp_prefetch`` worker's loop.

``python -m benchmarks.stream_overhead --baseline DIR [--repeats 9] [--records 200000]``

Runs what one worker runs (``DatasetPipeline.iterate`` of its share, here the whole pipeline,
in a fresh process: element, state, element, state ...) without the transport to the parent,
once with the grainlite at ``DIR`` (A: e.g. ``git archive`` of the commit before a change) and
once with this checkout's (B), alternately, ``--repeats`` times each, and prints the median
process CPU time per record of each (the machine may be loaded: CPU time, not wall time).

Also end to end: the same pipelines under ``mp_prefetch(num_workers=1)``, counting the CPU time
of the parent and of its worker process (reaped at ``close()``).

Pipelines: the ``small-mem`` workload's (16-byte records from a list, shuffled, parsed with
``np.frombuffer``, ``MapDataset.batch(1024)``) and the same without the batch (one element per
record: the worst case for a cost paid per element of ``to_iter_dataset``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

_CHILD = """
import json, resource, sys, time
import numpy as np
import grainlite as grain
from grainlite.dataset.mp.pipeline import DatasetPipeline

records, batch, end_to_end = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
source = [np.arange(2, dtype=np.int64).tobytes() for _ in range(records)]
def parse(record):
    return np.frombuffer(record, dtype=np.int64)
ds = grain.MapDataset.source(source).shuffle(seed=1).map(parse)
if batch:
    ds = ds.batch(batch)
def cpu_now():
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
count = 0
begin = cpu_now()
if end_to_end:  # the parent and its worker (reaped at close, so counted)
    iterator = iter(ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=1)))
    for element in iterator:
        count += 1
    iterator.close()
else:  # the worker's loop alone, in this process
    for element, state in DatasetPipeline(ds.to_iter_dataset()).iterate(0, 1, None):
        count += 1
cpu = cpu_now() - begin
print(json.dumps({"cpu_per_record_ns": cpu / records * 1e9, "elements": count}))
"""


def _one(path: str, records: int, batch: int, end_to_end: bool) -> float:
    env = dict(os.environ, PYTHONPATH=path)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(records), str(batch), str(int(end_to_end))],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=path,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return float(result["cpu_per_record_ns"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a grainlite checkout to compare with")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cases = [(1024, False), (0, False), (1024, True), (0, True)]
    for batch, end_to_end in cases:
        times: dict[str, list[float]] = {"A (baseline)": [], "B (this checkout)": []}
        for _ in range(args.repeats):
            times["A (baseline)"].append(_one(args.baseline, args.records, batch, end_to_end))
            times["B (this checkout)"].append(_one(here, args.records, batch, end_to_end))
        name = f"batch({batch})" if batch else "no batch (one element per record)"
        name += (
            ", mp_prefetch(num_workers=1) end to end (CPU of parent and worker)"
            if end_to_end
            else ", the worker's loop alone"
        )
        print(f"{name}: CPU ns per record, median of {args.repeats} (all runs)")
        medians = {}
        for label, values in times.items():
            medians[label] = statistics.median(values)
            runs = ", ".join(f"{v:.0f}" for v in values)
            print(f"  {label}: {medians[label]:.0f}  ({runs})")
        a, b = medians.values()
        print(f"  B / A = {b / a:.3f}")
    print(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))


if __name__ == "__main__":
    main()
