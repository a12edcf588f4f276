"""The real ``grain`` package's side (0.2.18, ``grain.python``); each worker imports this module."""

from __future__ import annotations

from typing import Any

import absl.flags
import grain.python as grain
import numpy as np

from benchmarks.dataset_run import DatasetRun
from benchmarks.loader_run import LibraryRun
from benchmarks.workloads import Config, Workload, augment_image, parse_small

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags; they must count as parsed.


class ParseSmall(grain.MapTransform):
    """The small-record work: the record as an int64 ``[index, label]`` array."""

    def map(self, element: bytes) -> np.ndarray:
        return parse_small(element)


class AugmentImage(grain.RandomMapTransform):
    """The image work: decode, random crop and flip, normalize."""

    def random_map(self, element: bytes, rng: np.random.Generator) -> dict[str, Any]:
        return augment_image(element, rng)


def array_record_source(path: str) -> Any:
    """grain's ArrayRecordDataSource (array_record's own class)."""
    return grain.ArrayRecordDataSource(path)


def memory_source(records: list[bytes]) -> Any:
    """grain's InMemoryDataSource (a ShareableList; loses trailing zero bytes, CPython #96779)."""
    return grain.InMemoryDataSource(records)


def make_run(workload: Workload, config: Config, source: Any, seed: int) -> LibraryRun | DatasetRun:
    """A grain DataLoader run, or a Dataset-API run for ``config.api == "dataset"``."""
    transform = AugmentImage() if workload.name == "images" else ParseSmall()
    if config.api == "dataset":
        return DatasetRun(grain, workload, config, source, seed, transform)
    return LibraryRun(grain, workload, config, source, seed, transform)
