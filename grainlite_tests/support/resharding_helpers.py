"""Helpers for the tests of elastic restore with a sampler-sharded IndexSampler: the form of
Grain's tutorial, ``IndexSampler(n, ShardByJaxProcess(drop_remainder=True), shuffle=True)``
(:data:`TUTORIAL`), and Grain's default sharding, ``ShardByJaxProcess()`` without
``drop_remainder`` (:data:`DEFAULT`, blocks of unequal length). :class:`Form` says which, and the
record count.

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
import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Form:
    """How the sampler shards itself: ``drop_remainder`` and the record count."""

    drop_remainder: bool = True
    num_records: int = NUM_RECORDS

    def block(self, host: int, hosts: int) -> int:
        """How many records host ``host`` of ``hosts``'s block holds (Grain's ``even_split``)."""
        per_host, extra = divmod(self.num_records, hosts)
        return per_host + (0 if self.drop_remainder or host >= extra else 1)

    def epoch_of(self, index: int, hosts: int) -> int:
        """The epoch of global index ``index`` of ``hosts`` hosts (of the host that reads it)."""
        return index // hosts // self.block(index % hosts, hosts)


TUTORIAL = Form()  # ShardByJaxProcess(drop_remainder=True), as Grain's DataLoader tutorial writes
DEFAULT = Form(drop_remainder=False)  # ShardByJaxProcess(), Grain's default


def sampler(host: int, hosts: int, form: Form = TUTORIAL) -> grain.IndexSampler:
    """Host ``host`` of ``hosts``'s sampler, sharded by itself."""
    options = grain.ShardOptions(host, hosts, drop_remainder=form.drop_remainder)
    return grain.IndexSampler(form.num_records, options, shuffle=True, num_epochs=EPOCHS, seed=SEED)


def loader(
    ops: list[Any], host: int, hosts: int, workers: int, form: Form = TUTORIAL
) -> grain.DataLoader:
    """The loader of host ``host`` of ``hosts`` (it takes its shard from the sampler)."""
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, form.num_records, 1),
        sampler=sampler(host, hosts, form),
        operations=ops,
        worker_count=workers,
        read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
    )


def epoch(element: int, hosts: int, spec: tuple[str, ...], form: Form = TUTORIAL) -> int:
    """The epoch of an element of a run of ``hosts`` hosts (each Fan adds one digit)."""
    return form.epoch_of(element // 10 ** spec.count("fan") % _SCALE, hosts)


@functools.cache
def uninterrupted(
    spec: tuple[str, ...], hosts: int, form: Form = TUTORIAL
) -> dict[int, collections.Counter[int]]:
    """Every element of an uninterrupted run of ``hosts`` hosts, by epoch."""
    by_epoch: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for host in range(hosts):
        for element in flatten(list(loader(operations(spec, None), host, hosts, 0, form))):
            by_epoch[epoch(element, hosts, spec, form)][element] += 1
    return by_epoch


def save(
    ops: list[Any], hosts: int, workers: int, steps: list[int], form: Form = TUTORIAL
) -> tuple[list[Any], list[bytes]]:
    """Runs each host for its number of steps; returns what they delivered and their states."""
    make = functools.partial(loader, form=form)
    return elastic_helpers.save(ops, hosts, workers, steps, make=make)


def resume(
    ops: list[Any], states: list[bytes], hosts: int, workers: int, form: Form = TUTORIAL
) -> list[list[Any]]:
    """Each new host's rest after reading every old host's state, as the Orbax handler does."""
    make = functools.partial(loader, form=form)
    return elastic_helpers.resume(ops, states, hosts, workers, make=make, every_state=True)


def matching_epoch(
    spec: tuple[str, ...],
    delivered: list[int],
    old_hosts: int,
    new_hosts: int,
    form: Form = TUTORIAL,
) -> int | None:
    """The ``E`` for which ``delivered`` (before + after) is exactly the old run's epochs
    ``<= E`` plus a fresh new run's epochs ``> E``; None if there is none. (Without
    drop_remainder a shorter block wraps into partial epochs ``>= EPOCHS``.)"""
    old, new = uninterrupted(spec, old_hosts, form), uninterrupted(spec, new_hosts, form)
    got = collections.Counter(delivered)
    top = max([*old, *new, EPOCHS - 1])
    for last in range(-1, top + 1):
        expected: collections.Counter[int] = collections.Counter()
        for e in range(top + 1):
            expected += old[e] if e <= last else new[e]
        if got == expected:
            return last
    return None


def rule_epoch(states: list[bytes], hosts: int, workers: int, form: Form = TUTORIAL) -> int:
    """``E`` as the documented rule says, from the saved states (pipelines without a FlatMap):
    the largest epoch of a record a stream read, or that comes before a stream's next one."""
    streams = max(workers, 1)
    last = -1
    for state in states:
        for seen in json.loads(state)["last_seen_indices"].values():
            if seen >= 0:
                last = max(last, form.epoch_of(seen, hosts))
            last = max(last, form.epoch_of(seen + hosts * streams, hosts) - 1)
    return last
