"""LitData's side of the remote benchmark (in .venv-litdata, without obstore): a StreamingDataset
over the chunks in the bucket (``storage_options={"endpoint_url": ...}`` from the proxy's
``AWS_ENDPOINT_URL``), shuffled, read by a StreamingDataLoader with 2 workers, batch 128 or 1024.
Each record gets the workload's work in ``__getitem__`` (in the workers)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from litdata import StreamingDataLoader, StreamingDataset

from benchmarks.remote_data import RemoteData
from benchmarks.workloads import HEADER, Workload, augment_image, parse_small

WORKERS = 2


def prepare() -> None:
    """Nothing to set up before the clock."""


class WorkloadDataset(StreamingDataset):
    """The stored ``{"record": bytes}`` samples with the workload's per-record work."""

    def __init__(self, images: bool, record_seed: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.images = images
        self.record_seed = record_seed

    def __getitem__(self, index: Any) -> Any:
        record = super().__getitem__(index)["record"]
        if not self.images:
            return parse_small(record)
        key = int(np.frombuffer(record, dtype=HEADER, count=1)[0])
        return augment_image(record, np.random.Generator(np.random.Philox(self.record_seed + key)))


class Run:
    def __init__(
        self,
        library: str,
        workload: Workload,
        data: RemoteData,
        seed: int,
        url: str,
        cache_dir: Path | None,
    ) -> None:
        self.seed = seed
        self.dataset = WorkloadDataset(
            workload.name == "images",
            seed,
            input_dir=url.rstrip("/"),
            cache_dir=str(cache_dir),
            shuffle=True,
            seed=seed,
            storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]},
        )
        self.loader = StreamingDataLoader(
            self.dataset, batch_size=workload.batch_size, num_workers=WORKERS
        )
        self._iterator: Any = None

    def epoch(self, n: int) -> Iterator[Any]:
        self._iterator = iter(self.loader)
        return self._iterator

    def end_epoch(self) -> None:
        self._iterator = None

    def rng_for_key(self, n: int) -> Callable[[int], np.random.Generator]:
        seed = self.seed
        return lambda key: np.random.Generator(np.random.Philox(seed + key))

    def close(self) -> None:
        self._iterator = None
        del self.loader

    def details(self) -> dict[str, Any]:
        return {}
