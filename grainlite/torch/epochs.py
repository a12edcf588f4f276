"""Epochs as blocks of one sampler: epoch ``e`` of Grain's endless IndexSampler, one rank's share.

A :class:`TorchDataLoader <grainlite.torch.TorchDataLoader>` runs ONE grainlite DataLoader (and
its worker processes) for all epochs. Its sampler is an :class:`EpochSampler`: sampler index
``e * stride + j`` is the ``j``-th record of epoch ``e`` on this rank (``j < L``, the rank's
records per epoch), exactly the record, key and per-record rng of Grain's endless
``IndexSampler(num_records, ShardOptions(rank, world), shuffle, num_epochs=None, seed)``. The
indices ``L <= j < stride`` raise IndexError, so every worker's stream ends at the end of each
epoch (a Batch never straddles two epochs, and partial batches are those of a one-epoch
DataLoader); moving the iterator to the first index of the next epoch (``set_state``) moves the
running workers there. ``stride`` is a multiple of the worker count with at least one gap index
per worker, so worker ``w`` starts every epoch at its own position ``e * stride / W``.

The counting functions say how many batches an epoch gives and where each worker stands after
``b`` of them, when that does not depend on the data (no Filter, FlatMap or custom operation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from grainlite.sampling.index_sampler import IndexSampler
from grainlite.sampling.records import RecordMetadata
from grainlite.sampling.rng import record_rng
from grainlite.sampling.sharding import ShardOptions, even_split

# Operations whose output count depends on the data.
DATA_DEPENDENT = frozenset({"filter", "flat_map", "operation"})
# Operations that use the per-record rng (a custom operation sees the records' metadata).
USES_RNG = frozenset({"random_map", "operation"})


def rank_records(num_records: int, rank: int, world_size: int) -> int:
    """How many records rank ``rank`` of ``world_size`` reads per epoch (Grain's even split)."""
    start, end = even_split(num_records, ShardOptions(rank, world_size))
    return end - start


class EpochSampler:
    """Sampler index ``e * stride + j`` is record ``j`` of epoch ``e`` of this rank's stream.

    Picklable and cheap: the record keys of an epoch are computed once, vectorized, by the
    endless IndexSampler, and kept for the epoch being read. It has no ``__len__``: the stream of
    each worker ends at the IndexError past the end of an epoch.

    Args:
      num_records: records in the data source.
      shard_options: this rank's shard.
      shuffle: shuffle every epoch with seed ``seed + epoch`` (Grain's rule).
      seed: the shuffle and per-record rng seed.
      workers: streams of this rank (the worker count, or 1 without workers).
      with_rngs: give each record its ``Philox(seed + index)`` generator (only RandomMap and
        custom operations use it; making one per record costs microseconds).
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions,
        shuffle: bool,
        seed: int | None,
        workers: int,
        with_rngs: bool,
    ) -> None:
        self._endless = IndexSampler(num_records, shard_options, shuffle, None, seed)
        self._shard_index = shard_options.shard_index
        self._shard_count = shard_options.shard_count
        self._seed = seed if with_rngs else None
        self.epoch_length = rank_records(num_records, self._shard_index, self._shard_count)
        self.workers = workers
        self.stride = (math.ceil(self.epoch_length / workers) + 1) * workers
        self._keys: tuple[int, np.ndarray] | None = None

    def global_indices(self, epoch: int) -> np.ndarray:
        """The endless sampler's global indices of this rank's epoch ``epoch``, in order."""
        positions = epoch * self.epoch_length + np.arange(self.epoch_length, dtype=np.int64)
        return self._shard_index + self._shard_count * positions

    def epoch_keys(self, epoch: int) -> np.ndarray:
        """The record keys of epoch ``epoch`` on this rank, in sampler order."""
        if self._keys is None or self._keys[0] != epoch:
            self._keys = (epoch, self._endless.record_keys(self.global_indices(epoch)))
        return self._keys[1]

    def first_position(self, epoch: int) -> int:
        """Every worker's position (reads done) at the start of epoch ``epoch``."""
        return epoch * self.stride // self.workers

    def __getitem__(self, index: int) -> RecordMetadata:
        """The metadata of record ``j`` of epoch ``e`` for ``index = e * stride + j``."""
        epoch, j = divmod(int(index), self.stride)
        if j >= self.epoch_length or index < 0:
            raise IndexError(f"index {index} is past the end of epoch {epoch}")
        key = int(self.epoch_keys(epoch)[j])
        position = epoch * self.epoch_length + j
        global_index = self._shard_index + self._shard_count * position
        rng = None
        if self._seed is not None:
            rng = record_rng(self._seed + global_index)
        return RecordMetadata(index=global_index, record_key=key, rng=rng)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_keys": None}  # workers compute their own keys

    def __repr__(self) -> str:
        return f"EpochSampler({self._endless!r}, stride={self.stride})"


def outputs_per_worker(records: int, steps: Sequence[tuple[str, Any]]) -> int | None:
    """How many elements a worker makes from ``records`` records, or None if data-dependent."""
    count = records
    for kind, op in steps:
        if kind in DATA_DEPENDENT:
            return None
        if kind == "batch":
            size = op.batch_size
            count = count // size if op.drop_remainder else -(-count // size)
    return count


def records_per_output(steps: Sequence[tuple[str, Any]]) -> int:
    """How many records each (full) element is made of: the product of the batch sizes."""
    return math.prod(op.batch_size for kind, op in steps if kind == "batch")


def worker_records(epoch_length: int, workers: int) -> list[int]:
    """How many of an epoch's records each worker reads (worker ``w`` reads ``j ≡ w mod W``)."""
    return [len(range(w, epoch_length, workers)) for w in range(workers)]


def epoch_batches(epoch_length: int, workers: int, steps: Sequence[tuple[str, Any]]) -> int | None:
    """How many elements one epoch gives on a rank with ``epoch_length`` records, or None."""
    counts = [outputs_per_worker(n, steps) for n in worker_records(epoch_length, workers)]
    if any(c is None for c in counts):
        return None
    return sum(c for c in counts if c is not None)


def positions_after(
    epoch_length: int, workers: int, steps: Sequence[tuple[str, Any]], delivered: int
) -> tuple[list[int], int]:
    """Records read by each worker, and the next worker, after ``delivered`` elements of an epoch.

    The parent takes one element from each worker in turn, skipping finished workers; a worker's
    state after ``k`` elements is the records behind them: ``k`` times the records per element,
    at most all of its records. Only for pipelines whose counts do not depend on the data.
    """
    records = worker_records(epoch_length, workers)
    outputs = [outputs_per_worker(n, steps) or 0 for n in records]
    delivered = min(delivered, sum(outputs))
    rounds = min(delivered // workers, min(outputs))  # rounds in which no worker was finished
    taken = [rounds] * workers
    worker = 0
    for _ in range(delivered - rounds * workers):
        while taken[worker] >= outputs[worker]:
            worker = (worker + 1) % workers
        taken[worker] += 1
        worker = (worker + 1) % workers
    per_output = records_per_output(steps)
    return [min(t * per_output, n) for t, n in zip(taken, records)], worker
