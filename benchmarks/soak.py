"""A long run at 2 workers: memory of every process, shared memory and throughput over time.

``python -m benchmarks.soak`` streams several million small records (64-byte rows stacked into
batches of 256, through shared memory) and samples, every ``--every`` seconds, the RSS of the
parent and of each worker, the number of ``/dev/shm`` segments this run owns and the records/s
since the last sample. It then checks the promises of docs/reliability.md:

- memory: after warm-up (the first ``WARM_UP`` of the run), no process's RSS grows more than
  ``MAX_GROWTH`` from its median in the first window after warm-up to its peak in the last;
- shared memory: the segment count never changes after warm-up;
- throughput: the median rate of the last third is within ``MAX_SLOWDOWN`` of the first third's.

It writes the samples and verdicts as JSON and, with ``--plot`` (matplotlib), the curves as a PNG.
The tests run a short form (``run(records=...)``); the docs quote a full run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import grainlite as grain
from grainlite import shm

WARM_UP = 0.2  # share of the run before memory is expected to be flat
MAX_GROWTH = 0.05
MAX_SLOWDOWN = 0.25
BATCH = 256


class Row(grain.MapTransform):
    """A 64-byte row per record, derived from its index (so every batch is checked)."""

    def map(self, element: int) -> np.ndarray:
        return np.full(8, element, np.int64)


@dataclass
class Sample:
    """One sample of the run."""

    seconds: float
    records: int
    rate: float
    rss_mb: dict[str, float]
    segments: int


@dataclass
class SoakResult:
    """The samples of a run and what they show."""

    records: int
    workers: int
    seconds: float
    samples: list[Sample] = field(default_factory=list)
    growth: dict[str, float] = field(default_factory=dict)
    segment_counts: list[int] = field(default_factory=list)
    slowdown: float = 0.0

    @property
    def verdicts(self) -> dict[str, bool]:
        """Each promise and whether this run kept it."""
        return {
            "memory flat after warm-up": all(g <= MAX_GROWTH for g in self.growth.values()),
            "segment count stable after warm-up": len(set(self.segment_counts)) <= 1,
            "throughput stable": self.slowdown <= MAX_SLOWDOWN,
        }


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run(records: int = 5_000_000, workers: int = 2, every: float = 0.5) -> SoakResult:
    """Streams ``records`` records through ``workers`` workers and samples as it goes."""
    # Each worker batches its own records: a multiple of BATCH per worker leaves no partial batch.
    count = records - records % (BATCH * max(workers, 1))
    loader = grain.DataLoader(
        data_source=grain.RangeDataSource(0, count, 1),
        sampler=grain.IndexSampler(count, grain.NoSharding(), shuffle=False, num_epochs=1, seed=0),
        operations=[Row(), grain.Batch(BATCH, drop_remainder=True)],
        worker_count=workers,
        worker_buffer_size=2,
    )
    result = SoakResult(records=count, workers=workers, seconds=0.0)
    me = os.getpid()
    started = last_time = time.monotonic()
    delivered = last_records = 0
    streams = max(workers, 1)
    with iter(loader) as iterator:
        pids = {}
        for number, batch in enumerate(iterator):
            # Batch b comes from worker b % W, its round b // W: every W-th record from there.
            worker, round_ = number % streams, number // streams
            first = worker + streams * round_ * BATCH
            expected = np.arange(first, first + streams * BATCH, streams)
            assert np.array_equal(batch[:, 0], expected), f"batch {number} is wrong"
            delivered += BATCH
            if not pids:
                pids = {"parent": me} | {
                    f"worker {w}": pid for w, pid in enumerate(iterator._stream.pids())
                }
            now = time.monotonic()
            if now - last_time >= every or delivered == count:
                rss = {name: _rss_mb(pid) for name, pid in pids.items()}
                segments = sum(1 for name in shm.list_segments() if shm.owner_pid(name) == me)
                rate = (delivered - last_records) / (now - last_time)
                result.samples.append(Sample(now - started, delivered, rate, rss, segments))
                last_time, last_records = now, delivered
    result.seconds = time.monotonic() - started
    assert delivered == count, f"delivered {delivered} of {count} records"
    _judge(result)
    return result


def _judge(result: SoakResult) -> None:
    after = [s for s in result.samples if s.records >= WARM_UP * result.records]
    if len(after) < 3:
        after = result.samples[-3:]
    window = max(1, len(after) // 5)
    for name in after[0].rss_mb:
        baseline = statistics.median(s.rss_mb[name] for s in after[:window])
        peak = max(s.rss_mb[name] for s in after[-window:])
        result.growth[name] = peak / baseline - 1
    result.segment_counts = sorted({s.segments for s in after})
    third = max(1, len(result.samples) // 3)
    first = statistics.median(s.rate for s in result.samples[:third])
    last = statistics.median(s.rate for s in result.samples[-third:])
    result.slowdown = max(0.0, 1 - last / first)


def plot(result: SoakResult, path: Path) -> None:
    """Draws RSS per process and throughput over time to ``path`` (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seconds = [s.seconds for s in result.samples]
    figure, (memory, speed) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name in result.samples[0].rss_mb:
        memory.plot(seconds, [s.rss_mb[name] for s in result.samples], label=name)
    memory.set_ylabel("RSS (MiB)")
    memory.set_ylim(bottom=0)
    memory.legend(loc="lower right")
    memory.set_title(
        f"{result.records:,} records, {result.workers} workers, batches of {BATCH} "
        f"({result.seconds:.0f} s)"
    )
    speed.plot(seconds, [s.rate / 1000 for s in result.samples], color="black")
    speed.set_ylabel("thousand records/s")
    speed.set_ylim(bottom=0)
    speed.set_xlabel("seconds")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def summary(result: SoakResult) -> str:
    """The run in a few lines, as quoted in docs/reliability.md."""
    growth = ", ".join(f"{name} {value:+.1%}" for name, value in result.growth.items())
    rates = [s.rate for s in result.samples]
    lines = [
        f"{result.records:,} records at worker_count={result.workers} in {result.seconds:.1f} s "
        f"(median {statistics.median(rates):,.0f} records/s)",
        f"RSS growth after warm-up: {growth}",
        f"segments after warm-up: {result.segment_counts}; slowdown last vs first third: "
        f"{result.slowdown:.1%}",
    ]
    lines += [f"{name}: {'held' if ok else 'BROKEN'}" for name, ok in result.verdicts.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Runs the soak, prints the summary, writes JSON (and a PNG with ``--plot``)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/soak.json"))
    parser.add_argument("--plot", type=Path, help="write the curves here (e.g. docs/soak.png)")
    args = parser.parse_args(argv)
    result = run(args.records, args.workers, args.every)
    print(summary(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = asdict(result) | {"verdicts": result.verdicts}
    args.json.write_text(json.dumps(document, indent=1))
    if args.plot:
        plot(result, args.plot)
    return 0 if all(result.verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
