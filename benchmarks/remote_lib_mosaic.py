"""MosaicML Streaming's side of the remote benchmark (in .venv-mosaic): a StreamingDataset over
the MDS shards in the bucket (``S3_ENDPOINT_URL`` is the proxy), shuffled, read by torch's
DataLoader with 2 ``spawn`` workers (``fork`` wrote wrong shards into its cache here), batch 128
or 1024. Each record gets the workload's work in ``__getitem__`` (in the workers)."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

# ``import streaming`` imports its vision datasets, and so torchvision, whose PyPI wheel is built
# against CUDA torch: with the CPU torch here it fails to load (``operator torchvision::nms does
# not exist``). The benchmark uses none of them: an empty module stands in for streaming.vision.
sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))

from streaming import MDSWriter, StreamingDataset  # noqa: E402

from benchmarks.remote_data import RemoteData  # noqa: E402
from benchmarks.workloads import HEADER, Workload, augment_image, parse_small  # noqa: E402

__all__ = ["MDSWriter", "Run", "WorkloadDataset", "prepare"]

WORKERS = 2


def prepare() -> None:
    """Removes shared memory a killed earlier run may have left, as Streaming advises."""
    from streaming.base.util import clean_stale_shared_memory

    os.environ["S3_ENDPOINT_URL"] = os.environ["AWS_ENDPOINT_URL"]
    clean_stale_shared_memory()


class WorkloadDataset(StreamingDataset):
    """The stored ``{"record": bytes}`` samples with the workload's per-record work."""

    def __init__(self, images: bool, record_seed: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.images = images
        self.record_seed = record_seed

    def __getitem__(self, index: int) -> Any:
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
        from torch.utils.data import DataLoader

        self.seed = seed
        self.dataset = WorkloadDataset(
            workload.name == "images",
            seed,
            remote=url.rstrip("/"),
            local=str(cache_dir),
            shuffle=True,
            shuffle_seed=seed,
            batch_size=workload.batch_size,
        )
        self.loader = DataLoader(
            self.dataset,
            batch_size=workload.batch_size,
            num_workers=WORKERS,
            multiprocessing_context="spawn",
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
