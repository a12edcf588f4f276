"""Twin pipelines for the differential tests: the same configuration built with grainlite and with
the real ``grain`` package (the ``peer`` extra), so outputs and states can be compared. What the
twins compute lives in :mod:`peer_ops`, which workers import without importing either library."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import absl.flags
import grain.python as real_grain

import grainlite as lite
from grainlite_tests.support.peer_ops import (
    BoundedRange,
    not_multiple_of_three,
    times_ten_plus_one,
    two_or_none,
    with_noise,
)

absl.flags.FLAGS.mark_as_parsed()  # grain 0.2.18 reads absl flags; they must count as parsed


def _twins(name: str, kind: str, body: dict[str, Any]) -> dict[str, type]:
    bases = {
        "map": (lite.MapTransform, real_grain.MapTransform),
        "random_map": (lite.RandomMapTransform, real_grain.RandomMapTransform),
        "filter": (lite.FilterTransform, real_grain.FilterTransform),
        "flat_map": (lite.FlatMapTransform, real_grain.experimental.FlatMapTransform),
    }[kind]
    return {
        "lite": type(name, (bases[0],), dict(body)),
        "grain": type(name, (bases[1],), dict(body)),
    }


TRANSFORMS = {
    "map": _twins("TimesTenPlusOne", "map", {"map": times_ten_plus_one}),
    "random_map": _twins("WithNoise", "random_map", {"random_map": with_noise}),
    "filter": _twins("DropMultiplesOfThree", "filter", {"filter": not_multiple_of_three}),
    "flat_map": _twins("TwoOrNone", "flat_map", {"flat_map": two_or_none, "max_fan_out": 2}),
}


@dataclasses.dataclass(frozen=True)
class Config:
    """One loader configuration, buildable with either library."""

    num_records: int = 10
    shard_index: int = 0
    shard_count: int = 1
    drop_remainder_shards: bool = False
    num_epochs: int | None = 1
    shuffle: bool = False
    seed: int | None = None
    ops: tuple[str, ...] = ()
    batch_size: int | None = None
    drop_remainder: bool = False
    worker_count: int = 0
    sequential: bool = False

    @property
    def shard_has_no_records(self) -> bool:
        """True where this host's shard has no record: grain fails at its first read or yields an
        empty stream; grainlite yields an empty stream and warns (test_samplers pins it)."""
        if self.num_records >= self.shard_count:
            return False
        return self.drop_remainder_shards or self.shard_index >= self.num_records

    def build(self, library: str) -> Any:
        g = lite if library == "lite" else real_grain
        if self.shard_count == 1 and self.shard_index == 0 and not self.drop_remainder_shards:
            shard = g.NoSharding()
        else:
            shard = g.ShardOptions(self.shard_index, self.shard_count, self.drop_remainder_shards)
        if self.sequential:
            sampler = g.SequentialSampler(self.num_records, shard, seed=self.seed)
        else:
            sampler = g.IndexSampler(
                self.num_records, shard, self.shuffle, self.num_epochs, self.seed
            )
        operations: list[Any] = []
        for op in self.ops:
            if op == "batch":
                operations.append(g.Batch(self.batch_size or 2, self.drop_remainder))
            else:
                operations.append(TRANSFORMS[op][library]())
        return g.DataLoader(
            data_source=(
                BoundedRange(self.num_records)
                if self.num_epochs is None and not self.sequential
                else g.RangeDataSource(0, self.num_records, 1)
            ),
            sampler=sampler,
            operations=operations,
            worker_count=self.worker_count,
        )

    @property
    def grain_drops_the_remainder(self) -> bool:
        """True where grain 0.2.18's known bug makes it read fewer records."""
        if self.shard_count == 1 or (self.num_epochs is None and not self.sequential):
            return False
        epochs = 1 if self.sequential else self.num_epochs
        length = self.num_records * epochs
        if self.drop_remainder_shards:
            per_shard = self.num_records // self.shard_count
            length = min(length, per_shard * self.shard_count * epochs)
            if self.sequential:
                length = (self.num_records // self.shard_count) * self.shard_count
        return length % self.shard_count != 0


def states_equal_ignoring_formatting(a: bytes, b: bytes) -> bool:
    return json.loads(a) == json.loads(b)
