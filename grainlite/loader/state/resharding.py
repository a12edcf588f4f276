"""Elastic restore of a sampler-sharded ``IndexSampler`` onto another host count.

``IndexSampler(n, shard_options=ShardByJaxProcess(), ...)`` (with or without
``drop_remainder``) gives host ``s`` of ``S`` its own contiguous block of ``L_s`` records,
shuffled per epoch, and numbers them per host: host ``s`` reads its global indices ``s + S*p`` for
host positions ``p = 0, 1, ...``, position ``p`` being in its epoch ``p // L_s``. With
``drop_remainder=True`` every block has ``L_s = n // S`` records; without it (Grain's default) the
first ``n mod S`` blocks have one more, so a host with a shorter block starts its next epoch
sooner, and with ``num_epochs`` set every host reads its indices below ``num_epochs * n`` (a
shorter block wraps into a partial extra epoch). Another host count splits the records into other
blocks, so the general rule of :mod:`grainlite.loader.state.elastic` (one index space shared by
every layout) does not apply. The rule for this case, written once here and in
``docs/how-to/checkpointing.md``:

1. **The epoch.** ``E`` is the largest epoch (of its own host) of a record any saving stream had
   read: its last native read, a record partly delivered through a FlatMap, or a hole still to
   read from an earlier resize (``-1`` if none). Records the saving hosts' blocks never held (the
   ``n mod S`` dropped by ``drop_remainder``) or that their streams never reach (past the
   sampler's end) were never due, so they are not undelivered.
2. **The holes.** Every record of an epoch ``<= E`` that a saving stream had not delivered: its
   unread holes and its native positions from where it stands up to the end of its host's epoch
   ``E`` (a host behind the others owes all its epochs up to ``E``), with the FlatMap skips and
   delivered failures of the worker-count rule. Each is named by the old host count and its old
   global index (a negative "foreign" index, see :mod:`grainlite.sampling.foreign`), and keeps
   the per-record generator it had.
3. **The deal.** The holes, sorted by (epoch, position in the epoch, old host), are dealt round
   robin to the ``S' * max(W', 1)`` new streams exactly as in the general rule; new host ``s'``
   starts its tail at index ``s' + S' * (E + 1) * L'_s'``, the first of its epoch ``E + 1``
   (``L'_s'`` its block in the new layout), and ``g0`` is the stream whose tail starts with the
   smallest index.
4. **The order.** Each new stream reads its holes, then its native tail from epoch ``E + 1`` on:
   from there every host reads its new block, as a fresh run of ``S'`` hosts would.

The restore compares the sampler up to its shard: the same ``num_records``, ``shuffle``,
``num_epochs``, ``seed`` and ``drop_remainder``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from grainlite.errors import CheckpointMismatchError, shown_text
from grainlite.loader.state.deal import Remainder
from grainlite.loader.state.layout import Layout
from grainlite.loader.state.saved_state import SavedState
from grainlite.loader.state.streams import old_streams, undelivered
from grainlite.loader.state.worker_state import bad, position_of
from grainlite.sampling import foreign
from grainlite.sampling.index_sampler import IndexSampler
from grainlite.sampling.sharding import NoSharding, block_length

_REPR = re.compile(
    r"IndexSampler\(num_records=(?P<num_records>\d+), shard_options=\w+\("
    r"shard_index=(?P<shard_index>\d+), shard_count=(?P<shard_count>\d+), "
    r"drop_remainder=(?P<drop_remainder>True|False)\), shuffle=(?P<shuffle>True|False), "
    r"num_epochs=(?P<num_epochs>None|\d+), seed=(?P<seed>None|\d+)\)"
)
_COMPARED = ("num_records", "shuffle", "num_epochs", "seed", "drop_remainder")


def applies(pipeline: Any, layout: Layout) -> bool:
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
        f"sampler in checkpoint (process {host} of {hosts}): {shown_text(saved)}\n"
        f"sampler in dataloader: {sampler!r}\n"
        f"What differs: {what}.\n"
        "Restoring onto another process count compares the sampler up to its shard: build it "
        "with the same num_records, shuffle, num_epochs, seed and drop_remainder."
    )


class _Epochs:
    """Where a global index of a sampler-sharded ``IndexSampler`` falls (rule 1's epochs).

    Host ``s`` of ``S`` holds a block of ``L_s`` records (:func:`block_length`) and reads the
    global indices ``s + S*p``; position ``p`` is in its epoch ``p // L_s``.
    """

    def __init__(self, num_records: int, drop_remainder: bool, hosts: int) -> None:
        self.num_records, self.drop_remainder, self.hosts = num_records, drop_remainder, hosts

    def block(self, host: int, hosts: int) -> int:
        """``L_s`` of host ``host`` of ``hosts``."""
        return block_length(self.num_records, host, hosts, self.drop_remainder)

    def locate(self, code: int) -> tuple[int, int, int, int]:
        """(epoch, position in the epoch, host, host count) of an index of the saving layout
        (``code >= 0``) or of a foreign code (a hole left by an earlier resize): the order the
        holes are dealt in."""
        hosts, index = foreign.decode_one(code) if code < 0 else (self.hosts, code)
        host, position = index % hosts, index // hosts
        epoch, offset = divmod(position, self.block(host, hosts))
        return epoch, offset, host, hosts

    def epoch(self, code: int) -> int:
        """The epoch of ``code`` (see :meth:`locate`)."""
        return self.locate(code)[0]


def remainder(saved: dict[int, SavedState], hosts: int, layout: Layout, pipeline: Any) -> Remainder:
    """What the ``hosts`` old hosts left (the module's rule), from the saved state of each, by
    host index."""
    sampler: IndexSampler = pipeline.sampler
    n = sampler._num_records
    if hosts > n:
        raise bad(
            f"it was saved by {hosts} processes, more than the sampler's {n} records, which no "
            f"IndexSampler allows"
        )
    streams = []
    for host, state in sorted(saved.items()):
        check_sampler(state.document, host, hosts, sampler)
        old_sampler = sampler.resharded(host, hosts)
        old_pipeline = dataclasses.replace(
            pipeline, sampler=old_sampler, shard_index=host, shard_count=hosts
        )
        old_layout = dataclasses.replace(
            layout,
            shard_index=host,
            shard_count=hosts,
            sampler_repr=state.document.get("sampler", repr(old_sampler)),
            sampler_length=len(old_sampler),
        )
        streams += old_streams(state, host, hosts, old_layout, old_pipeline)
    epochs = _Epochs(n, sampler._shard_options.drop_remainder, hosts)
    last = -1  # rule 1: E
    for stream in streams:
        position = position_of(stream.start)
        if position - 1 >= stream.slice.tail_start:  # its last native read
            last = max(last, epochs.epoch(stream.slice.index(position - 1)))
        # Everything before its tail was read or is a hole: after an earlier resize, the tail
        # starts at the epoch after that resize's E, whose records the older layout delivered.
        last = max(last, epochs.epoch(stream.tail_index) - 1)
        for index in set(stream.skips) | stream.drops | set(stream.slice.head):
            last = max(last, epochs.epoch(index))
    holes = undelivered(
        streams,
        lambda index: epochs.epoch(index) > last,
        code=lambda index: foreign.encode(hosts, index) if index >= 0 else index,
    )
    ordered = sorted(holes.items(), key=lambda hole: epochs.locate(hole[0]))
    # Rule 3: new host s' starts its tail at its position (E + 1) * L'_s', its epoch E + 1.
    new = layout.shard_count
    tails = tuple(s + new * (last + 1) * epochs.block(s, new) for s in range(new))
    return Remainder(ordered, tails, own=False, key=epochs.locate)
