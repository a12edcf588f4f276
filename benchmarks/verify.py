"""Checks that a run really read and transformed every record it counts.

A loader cannot look fast by skipping work: the verifier sees every batch, and at the end checks
the record count, that every index appears as often as it must (once per epoch; at most once in
a time-limited run), a label checksum against labels recomputed from the indices, and a few
images recomputed from their raw records with the same random generator, compared exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.workloads import augment_image, labels_of


class VerificationError(AssertionError):
    """A run produced something other than what its workload must produce."""


def batch_columns(batch: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The indices, labels and (for images) the images of a batch of either workload."""
    if isinstance(batch, dict):
        return np.asarray(batch["index"]), np.asarray(batch["label"]), batch["image"]
    array = np.asarray(batch)
    if array.ndim != 2 or array.shape[1] != 2:
        raise VerificationError(f"a small-record batch must be (N, 2) int64, got {array.shape}")
    return array[:, 0], array[:, 1], None


class Verifier:
    """Collects what a run reads (cheaply, inside the timed loop) and checks it afterwards.

    Args:
      records: the number of records in the data source.
      batch_size: the batch size; every batch but the epoch's last must be full.
      seed: the workload seed (labels are a function of index and seed).
      full_epoch: True when the run must have read the whole epoch exactly once.
      workers: the loader's worker count. Each worker batches its own share of the records
        (Grain's semantics), so up to ``max(1, workers)`` batches at the end may be short.
      samples_every: keep the first image of every this-many batches (plus the first batch's
        first four) to recompute at the end.
    """

    def __init__(
        self,
        records: int,
        batch_size: int,
        seed: int,
        full_epoch: bool,
        workers: int = 0,
        samples_every: int = 16,
    ) -> None:
        self.records = records
        self.batch_size = batch_size
        self.seed = seed
        self.full_epoch = full_epoch
        self.tail = max(1, workers)
        self.samples_every = samples_every
        self.batches = 0
        self._indices: list[np.ndarray] = []
        self._label_sum = 0
        self._sizes: list[int] = []
        self._samples: list[tuple[int, np.ndarray]] = []

    @property
    def count(self) -> int:
        """Records seen so far."""
        return sum(self._sizes)

    def add(self, batch: Any) -> int:
        """Records one batch; returns its size."""
        indices, labels, images = batch_columns(batch)
        if indices.shape != labels.shape or indices.ndim != 1:
            raise VerificationError(f"index/label shapes {indices.shape} and {labels.shape}")
        self._indices.append(np.array(indices, dtype=np.int64))
        self._label_sum += int(labels.sum(dtype=np.int64))
        self._sizes.append(len(indices))
        if images is not None:
            first = self.batches == 0
            keep = range(4 if first else int(self.batches % self.samples_every == 0))
            for row in keep:
                if row < len(indices):
                    self._samples.append((int(indices[row]), np.array(images[row])))
        self.batches += 1
        return len(indices)

    def finish(
        self,
        read_record: Callable[[int], bytes] | None = None,
        rng_for_key: Callable[[int], np.random.Generator] | None = None,
    ) -> dict[str, Any]:
        """Checks everything; raises VerificationError on the first problem found.

        ``read_record`` and ``rng_for_key`` (the raw record and the generator the loader must
        have used for a key) are needed when images were seen.
        """
        if not self._sizes:
            raise VerificationError("the run produced no batch at all")
        indices = np.concatenate(self._indices)
        if len(indices) != self.count:
            raise VerificationError("batch sizes do not add up to the indices seen")
        body, tail = self._sizes[: -self.tail], self._sizes[-self.tail :]
        if any(size != self.batch_size for size in body) or max(tail) > self.batch_size:
            raise VerificationError(f"batches of the wrong size: {self._sizes[-8:]} at the end")
        if indices.min() < 0 or indices.max() >= self.records:
            raise VerificationError(f"index out of range: {indices.min()}..{indices.max()}")
        times = np.bincount(indices, minlength=self.records)
        if times.max() > 1:
            duplicate = int(np.argmax(times))
            raise VerificationError(f"index {duplicate} was seen {times.max()} times")
        if self.full_epoch and self.count != self.records:
            raise VerificationError(f"read {self.count} records, the epoch has {self.records}")
        if (
            not self.full_epoch
            and self._sizes[-1] != self.batch_size
            and self.count != (self.records)
        ):
            raise VerificationError("a short batch before the end of the epoch")
        expected = int(labels_of(indices, self.seed).sum())
        if expected != self._label_sum:
            raise VerificationError(f"label checksum {self._label_sum} != expected {expected}")
        checked = 0
        for key, image in self._samples:
            if read_record is None or rng_for_key is None:
                raise VerificationError("images were seen but cannot be recomputed")
            want = augment_image(read_record(key), rng_for_key(key))["image"]
            if image.shape != want.shape or image.dtype != want.dtype:
                raise VerificationError(f"image {key}: {image.shape} {image.dtype}")
            if not np.array_equal(image, want):
                raise VerificationError(f"image {key} differs from its recomputed value")
            checked += 1
        return {"records": self.count, "batches": self.batches, "images_checked": checked}
