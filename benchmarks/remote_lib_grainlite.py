"""grainlite's side of the remote benchmark: its DataLoader over the shards, local or in a bucket.

``grainlite-local`` reads the ArrayRecord shards from local disk (the reference);
``grainlite-remote`` reads the same shards from ``s3://`` through the proxy (the S3 variables in
the environment), with its cache in the run's cache folder.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import grainlite as grain
from benchmarks.lib_grainlite import AugmentImage, ParseSmall
from benchmarks.loader_run import LibraryRun
from benchmarks.remote_data import RemoteData
from benchmarks.workloads import Config, Workload

WORKERS = 2


def prepare() -> None:
    """Nothing to set up before the clock."""


def remote_source(urls: list[str], cache_dir: Path | None) -> Any:
    """grainlite's ArrayRecordDataSource over ``urls`` with its cache in ``cache_dir`` (where the
    source takes a cache folder)."""
    kwargs: dict[str, Any] = {}
    params = inspect.signature(grain.ArrayRecordDataSource).parameters
    if cache_dir is not None and "cache_dir" in params:
        kwargs["cache_dir"] = str(cache_dir)
    return grain.ArrayRecordDataSource(urls, **kwargs)


class Run:
    """Two epochs of a grainlite DataLoader (W=2, shuffled) over one source."""

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
        if library == "grainlite-local":
            self.source = grain.ArrayRecordDataSource([str(p) for p in data.array_record_paths()])
        else:
            names = [p.name for p in data.array_record_paths()]
            self.source = remote_source([url + name for name in names], cache_dir)
        self.transform = AugmentImage() if workload.name == "images" else ParseSmall()
        self.config = Config("remote", "grainlite", WORKERS, None)
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
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def details(self) -> dict[str, Any]:
        return {}
