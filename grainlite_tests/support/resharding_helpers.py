"""Helpers for the tests of elastic restore with a sampler-sharded IndexSampler (the form of
Grain's tutorial: ``IndexSampler(n, ShardByJaxProcess(drop_remainder=True), shuffle=True)``).

Every element names its record and its sampler index: :class:`Stamp` turns record ``k`` read at
global index ``i`` into ``k * 10**6 + i``, reading ``i`` back from the record's generator (seeded
``seed + i``). With the host count of a run, ``i`` gives the epoch, so a run's elements form the
ledger of delivered ``(epoch, record)``. The exactly-once check: what the saving run delivered
plus what the restored run delivered equals, as multisets, the uninterrupted saving run's
elements of epochs ``<= E`` plus a fresh run's (of the new host count) of epochs ``> E``, for
one ``E`` (the rule of ``grainlite.loader.state.resharding``).
"""

from __future__ import annotations

import collections
import functools
import json
from typing import Any

import numpy as np

import grainlite as grain
from grainlite_tests.support import elastic_helpers
from grainlite_tests.support.elastic_helpers import Fan, KeepSome, flatten

NUM_RECORDS = 23  # prime: 23 % S records are dropped for every S > 1
EPOCHS = 3
SEED = 5
_SCALE = 10**6


class Stamp(grain.RandomMapTransform):
    """k -> k * 10**6 + i, ``i`` the sampler index (the key of the Philox generator - seed)."""

    def random_map(self, element: Any, rng: np.random.Generator) -> int:
        index = int(rng.bit_generator.state["state"]["key"][0]) - SEED
        return int(element) * _SCALE + index


def operations(spec: tuple[str, ...], batch: int | None) -> list[Any]:
    """Stamp, then the transforms of ``spec`` ("filter", "fan"), then an optional Batch (without
    drop_remainder: nothing is dropped)."""
    ops: list[Any] = [Stamp()]
    for name in spec:
        ops.append(KeepSome(3) if name == "filter" else Fan())
    if batch:
        ops.append(grain.Batch(batch, drop_remainder=False))
    return ops


def sampler(host: int, hosts: int) -> grain.IndexSampler:
    """Host ``host`` of ``hosts``'s sampler, sharded by itself as the tutorial does."""
    options = grain.ShardOptions(host, hosts, drop_remainder=True)
    return grain.IndexSampler(NUM_RECORDS, options, shuffle=True, num_epochs=EPOCHS, seed=SEED)


def loader(ops: list[Any], host: int, hosts: int, workers: int) -> grain.DataLoader:
    """The loader of host ``host`` of ``hosts`` (it takes its shard from the sampler)."""
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, NUM_RECORDS, 1),
        sampler=sampler(host, hosts),
        operations=ops,
        worker_count=workers,
        read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
    )


def epoch(element: int, hosts: int, spec: tuple[str, ...]) -> int:
    """The epoch of an element of a run of ``hosts`` hosts (each Fan adds one digit)."""
    index = element // 10 ** spec.count("fan") % _SCALE
    return index // hosts // (NUM_RECORDS // hosts)


@functools.cache
def uninterrupted(spec: tuple[str, ...], hosts: int) -> dict[int, collections.Counter[int]]:
    """Every element of an uninterrupted run of ``hosts`` hosts, by epoch."""
    by_epoch: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for host in range(hosts):
        for element in flatten(list(loader(operations(spec, None), host, hosts, 0))):
            by_epoch[epoch(element, hosts, spec)][element] += 1
    return by_epoch


def save(
    ops: list[Any], hosts: int, workers: int, steps: list[int]
) -> tuple[list[Any], list[bytes]]:
    """Runs each host for its number of steps; returns what they delivered and their states."""
    return elastic_helpers.save(ops, hosts, workers, steps, make=loader)


def resume(ops: list[Any], states: list[bytes], hosts: int, workers: int) -> list[list[Any]]:
    """Each new host's rest after reading every old host's state, as the Orbax handler does."""
    return elastic_helpers.resume(ops, states, hosts, workers, make=loader, every_state=True)


def matching_epoch(
    spec: tuple[str, ...], delivered: list[int], old_hosts: int, new_hosts: int
) -> int | None:
    """The ``E`` for which ``delivered`` (before + after) is exactly the old run's epochs
    ``<= E`` plus a fresh new run's epochs ``> E``; None if there is none."""
    old, new = uninterrupted(spec, old_hosts), uninterrupted(spec, new_hosts)
    got = collections.Counter(delivered)
    for last in range(-1, EPOCHS):
        expected: collections.Counter[int] = collections.Counter()
        for e in range(EPOCHS):
            expected += old[e] if e <= last else new[e]
        if got == expected:
            return last
    return None


def rule_epoch(states: list[bytes], hosts: int, workers: int) -> int:
    """``E`` as the documented rule says, from the saved states (pipelines without a FlatMap):
    the largest epoch of a record a stream read, or that comes before a stream's next one."""
    streams = max(workers, 1)
    per_host = NUM_RECORDS // hosts
    last = -1
    for state in states:
        for seen in json.loads(state)["last_seen_indices"].values():
            if seen >= 0:
                last = max(last, seen // hosts // per_host)
            following = (seen + hosts * streams) // hosts
            last = max(last, following // per_host - 1)
    return last
