"""Shared helpers for the elastic-restore tests: pipelines whose elements name their record, and
the exactly-once check (before + after a resize == the uninterrupted run, as multisets).

The loader here shards one global sampler with the DataLoader's shard options; the tests of a
sampler-sharded ``IndexSampler`` (``resharding_helpers``) reuse the transforms, :func:`flatten`,
:func:`save` and :func:`resume` with their own loader.

Every pipeline starts with :class:`Tag`, which turns record key ``k`` at sampler index ``i`` into
``k * 1000 + (a draw of i's rng)``: the element names both the record and (through the rng,
seeded by ``seed + i``) its sampler index, and stays the same whichever worker reads it. The later
transforms are pure functions of their input, as the elastic rule requires.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from typing import Any

import numpy as np

import grainlite as grain

NUM_RECORDS = 23  # prime: no layout divides it evenly
EPOCHS = 2
SEED = 11

# Builds host ``host`` of ``hosts``'s loader with ``workers`` workers: (ops, host, hosts, workers).
MakeLoader = Callable[[list[Any], int, int, int], grain.DataLoader]


class Tag(grain.RandomMapTransform):
    """k -> k * 1000 + a draw of the record's rng (which is seeded by its sampler index)."""

    def random_map(self, element: Any, rng: np.random.Generator) -> int:
        return int(element) * 1000 + int(rng.integers(1000))


class KeepSome(grain.FilterTransform):
    """Drops about a third of the elements (a pure function of the element)."""

    def __init__(self, modulus: int) -> None:
        self.modulus = modulus

    def filter(self, element: Any) -> bool:
        return bool((int(element) // 7) % self.modulus)


class Fan(grain.FlatMapTransform):
    """0, 1, 2 or 3 outputs per input, each naming the input and its output number."""

    max_fan_out = 3

    def flat_map(self, element: Any) -> Any:
        for j in range(int(element) % 4):
            yield int(element) * 10 + j


def operations(spec: tuple[str, ...], batch: tuple[int, bool] | None) -> list[Any]:
    """The transforms for ``spec`` (names: "filter", "fan"), after Tag, then an optional Batch."""
    ops: list[Any] = [Tag()]
    for name in spec:
        ops.append(KeepSome(3) if name == "filter" else Fan())
    if batch is not None:
        ops.append(grain.Batch(batch[0], drop_remainder=batch[1]))
    return ops


def loader(ops: list[Any], host: int, hosts: int, workers: int) -> grain.DataLoader:
    """Host ``host`` of ``hosts``: one global sampler, sharded by the loader's shard options."""
    sampler = grain.IndexSampler(
        NUM_RECORDS, grain.NoSharding(), shuffle=True, num_epochs=EPOCHS, seed=SEED
    )
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, NUM_RECORDS, 1),
        sampler=sampler,
        operations=ops,
        worker_count=workers,
        shard_options=grain.ShardOptions(host, hosts),
        read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
    )


def flatten(elements: list[Any]) -> list[int]:
    """The record-level elements: batches unpacked."""
    out: list[int] = []
    for element in elements:
        out += np.asarray(element).reshape(-1).tolist()
    return out


def save(
    ops: list[Any], hosts: int, workers: int, steps: list[int], make: MakeLoader | None = None
) -> tuple[list[Any], list[bytes]]:
    """Runs each host for its number of steps; returns what they delivered and their states.

    ``make(ops, host, hosts, workers)`` builds each host's loader (:func:`loader` when None).
    """
    make = loader if make is None else make
    delivered: list[Any] = []
    states = []
    for host in range(hosts):
        with iter(make(ops, host, hosts, workers)) as iterator:
            for _ in range(steps[host]):
                try:
                    delivered.append(next(iterator))
                except StopIteration:
                    break
            states.append(iterator.get_state())
    return delivered, states


def resume(
    ops: list[Any],
    states: list[bytes],
    hosts: int,
    workers: int,
    make: MakeLoader | None = None,
    every_state: bool = False,
) -> list[list[Any]]:
    """Restores the saved states on ``hosts`` hosts with ``workers`` workers; each host's rest.

    With the saving host count each host restores its own state (``set_state``) unless
    ``every_state``; with another (or ``every_state``), each host reads every host's state, as the
    Orbax handler does. ``make`` builds each host's loader as in :func:`save`.
    """
    make = loader if make is None else make
    rests = []
    for host in range(hosts):
        with iter(make(ops, host, hosts, workers)) as iterator:
            if hosts == len(states) and not every_state:
                iterator.set_state(states[host])
            else:
                documents = {s: json.loads(state) for s, state in enumerate(states)}
                iterator.restore_hosts(documents, len(states))
            rests.append(list(iterator))
    return rests


def uninterrupted(spec: tuple[str, ...]) -> collections.Counter[int]:
    """Every record-level element of one uninterrupted run (no batching: nothing dropped)."""
    return collections.Counter(flatten(list(loader(operations(spec, None), 0, 1, 0))))
