"""Grain 0.2.18's side of the remote benchmark: its DataLoader over a data source that reads each
record with one ranged GET through fsspec's s3fs (what reading a bucket record by record costs;
Grain's ArrayRecordDataSource itself needs local files).

The source reads the flat copies of the shards (records back to back), with the record offsets
known up front (as a reader that cached the shards' indexes would): one GET per record and no
chunk to decode, the cheapest per-record read there is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.lib_grain import AugmentImage, ParseSmall, grain
from benchmarks.loader_run import LibraryRun
from benchmarks.remote_data import RemoteData
from benchmarks.workloads import Config, Workload

WORKERS = 2


def prepare() -> None:
    """Nothing to set up before the clock (absl flags are marked parsed by lib_grain)."""


class S3RangeSource:
    """A random-access source: record i is one ranged GET of its flat shard (s3fs ``cat_file``).

    The filesystem is made in each process on first use (never shared across a fork) from the
    standard S3 variables.
    """

    def __init__(self, urls: list[str], offsets: np.ndarray, per_shard: int) -> None:
        self.paths = [url.removeprefix("s3://") for url in urls]
        self.offsets = offsets
        self.per_shard = per_shard
        self._fs: Any = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fs": None, "_pid": -1}

    def _filesystem(self) -> Any:
        if self._pid != os.getpid():
            import s3fs

            self._fs = s3fs.S3FileSystem(
                key=os.environ["AWS_ACCESS_KEY_ID"],
                secret=os.environ["AWS_SECRET_ACCESS_KEY"],
                client_kwargs={
                    "endpoint_url": os.environ["AWS_ENDPOINT_URL"],
                    "region_name": os.environ.get("AWS_REGION", "us-east-1"),
                },
                skip_instance_cache=True,
            )
            self._pid = os.getpid()
        return self._fs

    def __getitem__(self, index: int) -> bytes:
        shard = index // self.per_shard
        base = self.offsets[shard * self.per_shard]
        start, end = self.offsets[index] - base, self.offsets[index + 1] - base
        return self._filesystem().cat_file(self.paths[shard], start=int(start), end=int(end))


class Run:
    """Two epochs of a Grain DataLoader (W=2, shuffled, default ReadOptions) over S3RangeSource."""

    def __init__(
        self,
        library: str,
        workload: Workload,
        data: RemoteData,
        seed: int,
        url: str,
        cache_dir: Path | None,
    ) -> None:
        self.workload = workload
        self.seed = seed
        offsets = np.load(data.root / "offsets.npy")
        urls = [url + p.name for p in data.flat_paths()]
        self.source = S3RangeSource(urls, offsets, data.per_shard)
        self.transform = AugmentImage() if workload.name == "images" else ParseSmall()
        self.config = Config("remote", "grain", WORKERS, None)
        self.runs: list[LibraryRun] = []

    def epoch(self, n: int) -> Iterator[Any]:
        run = LibraryRun(
            grain, self.workload, self.config, self.source, self.seed + n, self.transform
        )
        self.runs.append(run)
        return run.iterate()

    def end_epoch(self) -> None:
        self.runs[-1].close()

    def rng_for_key(self, n: int) -> Callable[[int], np.random.Generator]:
        positions = self.runs[n].position_of()
        seed = self.seed + n
        return lambda key: np.random.Generator(np.random.Philox(key=seed + positions[key]))

    def close(self) -> None:
        for run in self.runs:
            run.close()

    def details(self) -> dict[str, Any]:
        return {}
