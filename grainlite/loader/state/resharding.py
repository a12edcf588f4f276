"""Elastic restore of a sampler-sharded ``IndexSampler`` onto another host count.

``IndexSampler(n, shard_options=ShardByJaxProcess(drop_remainder=True), ...)`` gives host ``s``
of ``S`` its own contiguous block of ``L = n // S`` records, shuffled per epoch, and numbers them
per host: host ``s`` reads its global indices ``s + S*p`` for host positions ``p = 0, 1, ...``,
position ``p`` being epoch ``p // L``. Another host count splits the records into other blocks,
so the general rule of :mod:`grainlite.loader.state.elastic` (one index space shared by every
layout) does not apply. The rule for this case, written once here and in
``docs/how-to/checkpointing.md``:

1. **The epoch.** ``E`` is the largest epoch of a record any saving stream had read: its last
   native read, a record partly delivered through a FlatMap, or a hole still to read from an
   earlier resize (``-1`` if none). Records the saving hosts' blocks never held (the ``n mod S``
   dropped by ``drop_remainder``) were never due, so they are not undelivered.
2. **The holes.** Every record of an epoch ``<= E`` that a saving stream had not delivered: its
   unread holes and its native positions from where it stands up to the end of epoch ``E``
   (with the FlatMap skips and delivered failures of the worker-count rule). Each is named by
   the old host count and its old global index (a negative "foreign" index, see
   :mod:`grainlite.sampling.foreign`), and keeps the per-record generator it had.
3. **The deal.** The holes, sorted by (epoch, position in the epoch, old host), are dealt round
   robin to the ``S' * max(W', 1)`` new streams exactly as in the general rule, with the bound
   ``M = S' * (E + 1) * L'`` (``L' = n // S'``): the first index of epoch ``E + 1`` in the new
   layout.
4. **The order.** Each new stream reads its holes, then its native tail from epoch ``E + 1`` on:
   from there every host reads its new block, as a fresh run of ``S'`` hosts would.

The restore compares the sampler up to its shard: the same ``num_records``, ``shuffle``,
``num_epochs``, ``seed`` and ``drop_remainder=True`` (without it blocks differ in size and hosts'
epochs do not line up, so it is refused).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from grainlite.errors import CheckpointMismatchError
from grainlite.loader.state import codec
from grainlite.loader.state import holes_field as pending_field
from grainlite.loader.state.codec import SavedState
from grainlite.loader.state.worker_state import bad, position_of
from grainlite.sampling import foreign
from grainlite.sampling.samplers import IndexSampler
from grainlite.sampling.sharding import NoSharding

_REPR = re.compile(
    r"IndexSampler\(num_records=(?P<num_records>\d+), shard_options=\w+\("
    r"shard_index=(?P<shard_index>\d+), shard_count=(?P<shard_count>\d+), "
    r"drop_remainder=(?P<drop_remainder>True|False)\), shuffle=(?P<shuffle>True|False), "
    r"num_epochs=(?P<num_epochs>None|\d+), seed=(?P<seed>None|\d+)\)"
)
_COMPARED = ("num_records", "shuffle", "num_epochs", "seed", "drop_remainder")


def applies(pipeline: Any, layout: codec.Layout) -> bool:
    """True when the loader shards with its sampler: an ``IndexSampler`` whose own shard options
    are the loader's (and not ``NoSharding``)."""
    sampler = pipeline.sampler
    if type(sampler) is not IndexSampler:
        return False
    options = sampler._shard_options
    if isinstance(options, NoSharding):
        return False
    return (options.shard_index, options.shard_count) == (layout.shard_index, layout.shard_count)


def _fields(sampler_repr: str) -> dict[str, str] | None:
    match = _REPR.fullmatch(sampler_repr)
    return match.groupdict() if match else None


def check_sampler(document: Any, host: int, hosts: int, sampler: IndexSampler) -> None:
    """Refuses the state of old host ``host`` of ``hosts`` unless its sampler is ``sampler`` up to
    its shard; the message names every field that differs."""
    saved = document.get("sampler") if isinstance(document, dict) else None
    if saved is None:  # a FlatMap pipeline's state (Grain's nested form) names no sampler
        return
    mine = _fields(repr(sampler.resharded(host, hosts)))
    assert mine is not None
    theirs = _fields(saved) if isinstance(saved, str) else None
    if theirs == mine:
        return
    if theirs is None:
        what = (
            "the checkpoint's sampler is not an IndexSampler (a custom sampler cannot be split "
            "between another number of hosts)"
        )
    else:
        wrong = [f"{k}={theirs[k]} in the checkpoint, {mine[k]} here" for k in _COMPARED]
        wrong = [w for k, w in zip(_COMPARED, wrong) if theirs[k] != mine[k]]
        if (theirs["shard_index"], theirs["shard_count"]) != (str(host), str(hosts)):
            wrong.append(
                f"the file of process {host} of {hosts} holds the sampler of shard "
                f"{theirs['shard_index']} of {theirs['shard_count']}"
            )
        what = "; ".join(wrong)
    raise CheckpointMismatchError(
        "Sampler in checkpoint does not match dataloader sampler.\n"
        f"sampler in checkpoint (process {host} of {hosts}): {codec._shown_text(saved)}\n"
        f"sampler in dataloader: {sampler!r}\n"
        f"What differs: {what}.\n"
        "Restoring onto another process count compares the sampler up to its shard: build it "
        "with the same num_records, shuffle, num_epochs, seed and drop_remainder."
    )


def check_holes(position: codec.IteratorPosition, sampler: Any) -> None:
    """Refuses a restored position (its states typed, see
    :func:`~grainlite.loader.state.codec.worker_states`) whose holes name records of another
    layout (negative indices) that ``sampler`` cannot read."""
    problem = getattr(sampler, "foreign_problem", None)
    options = getattr(sampler, "_shard_options", None)
    readable = problem is not None and getattr(options, "drop_remainder", False)
    for state in position.states:
        if state.plan is None:
            continue
        for code in state.plan.head:
            if code >= 0:
                continue
            if problem is None or not readable:  # only a sampler-sharded IndexSampler writes one
                raise bad(
                    f"{pending_field.FIELD}: a hole index must be an integer >= 0, got {code}"
                )
            why = problem(code)
            if why is not None:
                raise bad(f"{pending_field.FIELD} holds the hole {why}")


def _epoch(code: int, num_records: int) -> tuple[int, int, int, int]:
    """A foreign hole's sort key: (epoch, position in the epoch, old host, old host count)."""
    count, index = foreign.decode_one(code)
    position, per_host = index // count, num_records // count
    return position // per_host, position % per_host, index % count, count


def remainder(
    documents: dict[int, SavedState | Any], hosts: int, layout: codec.Layout, pipeline: Any
) -> codec.IteratorPosition:
    """This host's new position from the states of all ``hosts`` old hosts (the module's rule);
    ``documents`` as :func:`grainlite.loader.state.elastic.remainder` takes them."""
    from grainlite.loader.state import elastic  # elastic imports this module: imported when used

    sampler: IndexSampler = pipeline.sampler
    if not sampler._shard_options.drop_remainder:
        raise CheckpointMismatchError(
            f"This checkpoint was saved by {hosts} JAX processes and this run has "
            f"{layout.shard_count}; the sampler shards by itself without drop_remainder "
            f"({sampler!r}), so hosts' blocks differ in size and their epochs do not line "
            f"up. Restore with {hosts} processes, or build the sampler with "
            f"ShardByJaxProcess(drop_remainder=True) (or shard with the DataLoader's "
            f"shard_options over a NoSharding sampler) before saving."
        )
    n = sampler._num_records
    if hosts > n:
        raise bad(
            f"it was saved by {hosts} processes, more than the sampler's {n} records, which no "
            f"IndexSampler allows"
        )
    streams = []
    for host, entry in sorted(documents.items()):
        document = entry.document if isinstance(entry, SavedState) else entry
        check_sampler(document, host, hosts, sampler)
        old_sampler = sampler.resharded(host, hosts)
        old_pipeline = dataclasses.replace(
            pipeline, sampler=old_sampler, shard_index=host, shard_count=hosts
        )
        old_layout = dataclasses.replace(
            layout,
            shard_index=host,
            shard_count=hosts,
            sampler_repr=document.get("sampler", repr(old_sampler)),
            sampler_length=len(old_sampler),
        )
        host_streams = elastic._old_streams(entry, host, hosts, old_layout, old_pipeline)
        elastic.resolve_cursors(host_streams, old_pipeline)
        streams += host_streams
    per_host = n // hosts

    def epoch_of(index: int) -> int:
        return _epoch(index, n)[0] if index < 0 else index // hosts // per_host

    last = -1  # rule 1: E
    for stream in streams:
        position = position_of(stream.start)
        if position - 1 >= stream.slice.tail_start:  # its last native read
            last = max(last, epoch_of(stream.slice.index(position - 1)))
        # Everything before its tail was read or is a hole: after an earlier resize, the tail
        # starts at the epoch after that resize's E, whose records the older layout delivered.
        last = max(last, epoch_of(stream.tail_index) - 1)
        for index in set(stream.skips) | stream.drops | set(stream.slice.head):
            last = max(last, epoch_of(index))
    holes = elastic.undelivered(
        streams,
        lambda index: epoch_of(index) > last,
        code=lambda index: foreign.encode(hosts, index) if index >= 0 else index,
    )
    ordered = sorted(holes.items(), key=lambda hole: _epoch(hole[0], n))
    bound = layout.shard_count * (last + 1) * (n // layout.shard_count)
    return elastic._deal(ordered, bound, hosts, layout, pipeline, key=lambda i: _epoch(i, n))
