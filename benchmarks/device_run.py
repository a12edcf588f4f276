"""Benchmark of ``grainlite.device_put``: what the device iterator adds to the time per batch.

The images workload (benchmarks/workloads.py: 128x128 JPEGs in ArrayRecord, decode, random crop
and flip, float32 normalize, Batch(128), a shuffled epoch) read three ways, on JAX's CPU backend
with 8 virtual devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``, set here before
JAX is imported):

- host: the ``DataLoader`` alone, each batch taken as numpy;
- device: ``grainlite.device_put(loader, sharding=jax.devices()[0], prefetch=2)``, each batch
  waited for with ``block_until_ready``;
- mesh: the same with ``sharding=batch_sharding()``, the batch axis split over the 8 devices.

Each configuration reads the same ``--batches`` batches per run; the runs are interleaved (host,
device, mesh, then the next repeat in a rotated order) so a busy moment of the machine hits all
three alike, and the median time per batch of each is reported with its ratio to the host's.
Target: the device iterator adds < 5% (ratio < 1.05). The CPU "devices" share the host's memory,
so this measures the iterator's own cost (thread, queue, placement), not a PCIe copy.

The images runs share the machine with their decoding, so their medians move with its load. The
iterator's own cost is also measured apart, with no decoding: a source whose every record is one
ready batch of the workload's shape (128 x 112 x 112 x 3 float32, 19 MB), read with
``worker_count=0`` alone (``ready-host``) and through ``device_put`` onto one device
(``ready-device``); the difference is what the iterator adds per batch, in milliseconds.

Usage: ``python -m benchmarks.device_run [--records 2000] [--batches 12] [--workers 2]``
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
from benchmarks.workloads import WORKLOADS

CONFIGS = ("host", "device", "mesh")
READY = ("ready-host", "ready-device")


class ReadyBatches:
    """A source whose every record is the same ready batch: the loader does no work."""

    def __init__(self, count: int) -> None:
        self.count = count
        rng = np.random.default_rng(0)
        self.batch = {
            "image": rng.random((128, 112, 112, 3), dtype=np.float32),
            "label": np.arange(128, dtype=np.int32),
        }

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return self.batch


def run_ready(config: str, batches: int) -> float:
    import jax

    import grainlite as grain

    loader = grain.DataLoader(
        data_source=ReadyBatches(batches + 1),
        sampler=grain.IndexSampler(batches + 1, grain.NoSharding(), num_epochs=1),
        worker_count=0,
    )
    if config == "ready-host":
        with iter(loader) as host:
            return timed(host, batches, lambda b: b["image"][-1, -1, -1, -1])
    with grain.device_put(loader, sharding=jax.devices()[0], prefetch=2) as placed:
        return timed(placed, batches, jax.block_until_ready)


def make_loader(path: Path, records: int, workers: int, seed: int) -> Any:
    import grainlite as grain
    from benchmarks.lib_grainlite import AugmentImage

    return grain.DataLoader(
        data_source=grain.ArrayRecordDataSource(str(path)),
        sampler=grain.IndexSampler(
            records, grain.NoSharding(), shuffle=True, num_epochs=1, seed=seed
        ),
        operations=[
            AugmentImage(),
            grain.Batch(WORKLOADS["images"].batch_size, drop_remainder=True),
        ],
        worker_count=workers,
    )


def timed(batches: Any, count: int, wait: Callable[[Any], Any]) -> float:
    """Seconds per batch over ``count`` batches after the first (start-up is not counted)."""
    wait(next(batches))
    start = time.perf_counter()
    for _ in range(count):
        wait(next(batches))
    return (time.perf_counter() - start) / count


def run_once(config: str, path: Path, args: argparse.Namespace) -> float:
    import jax

    import grainlite as grain
    from grainlite.device import batch_sharding

    loader = make_loader(path, args.records, args.workers, args.seed)
    if config == "host":
        with iter(loader) as batches:
            return timed(batches, args.batches, lambda b: b["image"].sum(dtype=np.float64))
    sharding = jax.devices()[0] if config == "device" else batch_sharding()
    with grain.device_put(loader, sharding=sharding, prefetch=2) as batches:
        return timed(batches, args.batches, jax.block_until_ready)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=12, help="timed batches per run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)
    # Each worker batches its own records: the last batch of each is partial and dropped.
    if (args.batches + 1 + args.workers) * WORKLOADS["images"].batch_size > args.records:
        parser.error(f"--records {args.records} is too few for {args.batches + 1} batches of 128")
    import jax

    path = ensure_data(args.data_dir, WORKLOADS["images"], args.records, args.seed)
    times: dict[str, list[float]] = {config: [] for config in CONFIGS + READY}
    for repeat in range(args.repeats):
        order = CONFIGS[repeat % 3 :] + CONFIGS[: repeat % 3]
        for config in order:
            times[config].append(run_once(config, path, args))
        for config in READY[repeat % 2 :] + READY[: repeat % 2]:
            times[config].append(run_ready(config, 4 * args.batches))
    host = statistics.median(times["host"])
    print(
        f"images workload, {args.workers} workers, {args.batches} batches of 128 per run, "
        f"{args.repeats} interleaved repeats, {jax.device_count()} {jax.devices()[0].platform} "
        f"devices"
    )
    for config in CONFIGS:
        median = statistics.median(times[config])
        runs = ", ".join(f"{t * 1e3:.1f}" for t in times[config])
        print(
            f"{config:7s} median {median * 1e3:7.1f} ms/batch  ratio {median / host:5.3f}  "
            f"(runs: {runs})"
        )
    ready_host, ready_device = (statistics.median(times[c]) for c in READY)
    print(
        f"ready batches (no decoding, {4 * args.batches} per run): host "
        f"{ready_host * 1e3:.2f} ms/batch, device_put {ready_device * 1e3:.2f} ms/batch: the "
        f"iterator adds {(ready_device - ready_host) * 1e3:.2f} ms per 19 MB batch "
        f"({(ready_device - ready_host) / host:.1%} of the images host time per batch)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
