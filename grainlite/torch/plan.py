"""One rank's plan: its epoch sampler, the grainlite DataLoader over it, and batch counts.

Made at a :class:`~grainlite.torch.TorchDataLoader`'s first use (``len()`` or the first batch),
when ``torch.distributed`` knows this process's rank. Everything that follows from the rank, the
world size and the operations lives here: which records each epoch holds, how many batches an
epoch has on every rank, and (when counts do not depend on the data) the Grain state of any rank
at any ``(epoch, batch)``, computed rather than gathered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grainlite.engine.position import IteratorPosition
from grainlite.errors import GrainliteValueError
from grainlite.loader.data_loader import DataLoader, DataLoaderIterator
from grainlite.loader.stages import Steps, initial_state
from grainlite.loader.state.encoding import dump
from grainlite.loader.state.layout import Layout
from grainlite.options import ReadOptions
from grainlite.sampling.sharding import NoSharding, ShardOptions
from grainlite.torch.epochs import (
    DATA_DEPENDENT,
    USES_RNG,
    EpochSampler,
    epoch_batches,
    positions_after,
    rank_records,
)


@dataclass(frozen=True)
class Settings:
    """A TorchDataLoader's arguments, checked; shared by every rank's plan."""

    data_source: Any
    operations: tuple[Any, ...]
    steps: Steps
    shuffle: bool
    seed: int | None
    worker_count: int
    worker_buffer_size: int
    read_options: ReadOptions | None
    batches_per_epoch: int | None

    @property
    def data_dependent(self) -> bool:
        """True when a Filter, FlatMap or custom operation makes batch counts data-dependent."""
        return any(kind in DATA_DEPENDENT for kind, _ in self.steps)

    @property
    def workers(self) -> int:
        """Streams per rank: the worker count, or 1 without workers."""
        return max(self.worker_count, 1)

    def sampler(self, shard: ShardOptions) -> EpochSampler:
        """The epoch sampler of the rank ``shard`` describes."""
        with_rngs = any(kind in USES_RNG for kind, _ in self.steps)
        num_records = len(self.data_source)
        return EpochSampler(num_records, shard, self.shuffle, self.seed, self.workers, with_rngs)


class Plan:
    """This rank's DataLoader over its :class:`EpochSampler`, and the epoch arithmetic."""

    def __init__(self, settings: Settings, shard: ShardOptions) -> None:
        self.settings = settings
        self.rank, self.world_size = shard.shard_index, shard.shard_count
        self.sampler = settings.sampler(ShardOptions(self.rank, self.world_size))
        self.loader = DataLoader(
            data_source=settings.data_source,
            sampler=self.sampler,
            operations=settings.operations,
            worker_count=settings.worker_count,
            worker_buffer_size=settings.worker_buffer_size,
            shard_options=NoSharding(),
            read_options=settings.read_options,
        )
        self.natural = self._natural_batches()
        self.batches_per_epoch = self._batches_per_epoch()

    def _natural_batches(self) -> int | None:
        """Batches per epoch on the smallest rank, or None if the data decides."""
        counts = [
            epoch_batches(
                rank_records(len(self.settings.data_source), r, self.world_size),
                self.settings.workers,
                self.settings.steps,
            )
            for r in range(self.world_size)
        ]
        if any(count is None for count in counts):
            return None
        return min(count for count in counts if count is not None)

    def _batches_per_epoch(self) -> int | None:
        wanted = self.settings.batches_per_epoch
        if wanted is not None and self.natural is not None and wanted > self.natural:
            raise GrainliteValueError(
                f"batches_per_epoch={wanted} is more than an epoch holds: with "
                f"{len(self.settings.data_source)} records on {self.world_size} rank(s) and "
                f"{self.settings.workers} stream(s) per rank, the smallest rank makes "
                f"{self.natural} batches per epoch. Pass batches_per_epoch <= {self.natural}, "
                f"or None for {self.natural}."
            )
        return self.natural if wanted is None else wanted

    def check_iterable(self) -> None:
        """Raises if epochs could differ in length between ranks (DDP would hang)."""
        if self.batches_per_epoch is None and self.world_size > 1:
            kinds = sorted({kind for kind, _ in self.settings.steps if kind in DATA_DEPENDENT})
            raise GrainliteValueError(
                f"TorchDataLoader: with {'/'.join(kinds)} operations the number of batches per "
                f"epoch depends on the data, and with {self.world_size} ranks a rank with one "
                f"batch more than the others would hang distributed training. Pass "
                f"batches_per_epoch=N, with N at most the batches the smallest rank makes, so "
                f"that every rank stops after N batches."
            )

    def state_at(self, epoch: int, batch: int, rank: int | None = None) -> bytes:
        """The Grain state of ``rank`` (default: this one) after ``batch`` batches of ``epoch``.

        ``batch`` must be 0 when counts depend on the data (the state then comes from the
        iterator itself).
        """
        rank = self.rank if rank is None else rank
        sampler = (
            self.sampler
            if rank == self.rank
            else self.settings.sampler(ShardOptions(rank, self.world_size))
        )
        steps = self.settings.steps
        workers = self.settings.workers
        first = sampler.first_position(epoch)
        if batch:
            read, next_worker = positions_after(sampler.epoch_length, workers, steps, batch)
        else:
            read, next_worker = [0] * workers, 0
        states = [initial_state(steps, first + r) for r in read]
        layout = Layout.of(
            self.settings.worker_count,
            sampler,
            self.settings.data_source,
            any(kind == "flat_map" for kind, _ in steps),
        )
        position = IteratorPosition(states, next_worker, [False] * workers)
        return dump(position, layout)


class EpochsIterator(DataLoaderIterator):
    """A DataLoaderIterator whose worker processes outlive the end of an epoch's stream.

    They wait there until ``set_state`` moves them to the next epoch, or until ``close()``.
    """

    def _start(self) -> Any:
        stream = super()._start()
        stream.linger_at_end = True  # no effect on the in-process driver
        return stream


def check_steps(operations: Sequence[Any]) -> Steps:
    """Classifies the operations once (a clear error for anything that is not a transform)."""
    from grainlite.transforms.base import classify

    return tuple((classify(op), op) for op in operations)
