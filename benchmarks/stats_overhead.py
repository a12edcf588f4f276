"""What the always-on stats counters cost: the ``small`` workload with timing on and off.

``python -m benchmarks.stats_overhead [--configs grainlite-w0,grainlite-ds-w0] [--repeats 7]
[--time-limit 5] [--quick]`` runs each configuration in fresh subprocesses
(:mod:`benchmarks.measure`, the same runs as :mod:`benchmarks.run`) with ``GRAINLITE_STATS=1``
and ``GRAINLITE_STATS=0`` (see :mod:`grainlite.stats.counters`), alternating which goes first in
each round, and prints the median records/s of each and the overhead ``1 - on / off``. The
target (issue 14) is an overhead under 2% on the small-record workload.

``--in-process`` measures the same pipelines in this one process instead, switching the timing
on and off between short runs (the module flags ``GRAINLITE_STATS`` sets), many rounds, so that
the noise of a shared machine hits both sides alike, and rates are records per second of this
process's CPU time (what other jobs take does not count); the overhead is the median over rounds
of the on/off ratio of the two runs of a round (slow drift of the machine cancels in a pair).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
from benchmarks.run import run_one
from benchmarks.workloads import WORKLOADS


def measure(
    config: str, data: Any, records: int, time_limit: float, stats: bool, seed: int = 0
) -> float:
    """Records/s of one run of ``config`` with the counters' timing on or off."""
    previous = os.environ.get("GRAINLITE_STATS")
    os.environ["GRAINLITE_STATS"] = "1" if stats else "0"
    try:
        result = run_one("small", config, data, records, seed, time_limit)
    finally:
        if previous is None:
            del os.environ["GRAINLITE_STATS"]
        else:
            os.environ["GRAINLITE_STATS"] = previous
    if "error" in result:
        raise RuntimeError(f"{config} (stats {'on' if stats else 'off'}): {result['error']}")
    return float(result["records_per_s"])


def _set_timing(on: bool) -> None:
    """Turns the counters' timing on or off in this process (what GRAINLITE_STATS=0 does)."""
    from grainlite.dataset import map as _map  # noqa: F401  # loads the modules that read it
    from grainlite.loader import pipeline
    from grainlite.stats import chain, collect

    pipeline.STATS_ENABLED = chain.ENABLED = collect.ENABLED = on


def _pipelines(data: Any, records: int) -> dict[str, Any]:
    """The small workload's DataLoader and Dataset API pipelines, without workers."""
    import grainlite as grain
    from benchmarks.lib_grainlite import ParseSmall

    source = grain.ArrayRecordDataSource(str(data))
    batch = WORKLOADS["small"].batch_size

    def loader() -> Any:
        sampler = grain.IndexSampler(
            records, grain.NoSharding(), shuffle=True, num_epochs=1, seed=0
        )
        return grain.DataLoader(
            data_source=source, sampler=sampler, operations=[ParseSmall(), grain.Batch(batch)]
        )

    def dataset() -> Any:
        ds = grain.MapDataset.source(source)[:records].shuffle(seed=0).to_iter_dataset()
        return ds.map(ParseSmall()).batch(batch)

    return {"grainlite-w0": loader, "grainlite-ds-w0": dataset}


def in_process(args: argparse.Namespace, data: Any) -> int:
    """The comparison in this process (see the module docstring)."""
    import time

    pipelines = _pipelines(data, args.records)
    runs: dict[tuple[str, bool], list[float]] = {}
    for round_ in range(args.repeats):
        for name, make in pipelines.items():
            order = (True, False) if round_ % 2 == 0 else (False, True)
            for stats in order:
                _set_timing(stats)
                begin = time.process_time()  # CPU time: other jobs on the machine do not count
                with iter(make()) as batches:
                    count = sum(len(batch) for batch in batches)
                rate = count / (time.process_time() - begin)
                runs.setdefault((name, stats), []).append(rate)
    _set_timing(True)
    for name in pipelines:
        on, off = runs[(name, True)], runs[(name, False)]
        paired = statistics.median(a / b for a, b in zip(on, off))  # slow drift cancels in pairs
        print(
            f"{name} (in-process A/B, {args.records:,} records a run): stats on "
            f"{statistics.median(on):,.0f} records per CPU second, off "
            f"{statistics.median(off):,.0f}, overhead {1 - paired:+.2%} (median of "
            f"{args.repeats} paired rounds)"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the comparison and prints one line per configuration."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="grainlite-w0,grainlite-ds-w0")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="tiny data, for tests")
    parser.add_argument("--in-process", action="store_true", help="A/B in this one process")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument(
        "--records", type=int, default=100_000, help="records per run with --in-process"
    )
    args = parser.parse_args(argv)
    workload = WORKLOADS["small"]
    records = workload.quick_records if args.quick else workload.records
    data = ensure_data(args.data_dir, workload, records, 0)
    if args.in_process:
        args.records = min(args.records, records)
        return in_process(args, data)
    runs: dict[tuple[str, bool], list[float]] = {}
    for round_ in range(args.repeats):
        for config in args.configs.split(","):
            order = (True, False) if round_ % 2 == 0 else (False, True)
            for stats in order:
                rate = measure(config, data, records, args.time_limit, stats)
                runs.setdefault((config, stats), []).append(rate)
                print(f"[{round_ + 1}/{args.repeats}] {config} stats={'on' if stats else 'off'}: "
                      f"{rate:,.0f} records/s", flush=True)  # fmt: skip
    for config in args.configs.split(","):
        on = statistics.median(runs[(config, True)])
        off = statistics.median(runs[(config, False)])
        print(
            f"{config}: stats on {on:,.0f} records/s, off {off:,.0f} records/s, overhead "
            f"{1 - on / off:+.2%} (medians of {args.repeats})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
