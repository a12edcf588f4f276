"""Elastic restore: resume a state saved with one layout (hosts, workers) in another.

The rule, written once here and in ``docs/how-to/checkpointing.md``:

1. **The old streams.** Host ``s`` of ``S`` with ``W`` workers runs ``max(W, 1)`` streams; stream
   ``(s, w)`` reads the sampler indices ``s + S*w + S*max(W,1)*k``. Each stream's state says
   where it stands: the next index of its native tail, plus (after an earlier resize) the holes
   it had not read yet, plus (with a FlatMapTransform) how many outputs of the record it was
   reading were delivered already.
2. **The remainder.** ``M`` is the largest next index of any old stream, raised past every record
   that needs special care (a partly delivered FlatMap input, a failure already delivered), so
   every index ``>= M`` is undelivered. Below ``M``, the undelivered indices are finitely many
   "holes": each stream's unread holes and its native indices from its next index up to ``M``.
   A partly delivered record stays a hole with "drop the first k outputs" per FlatMap level; a
   record whose failure was delivered is no hole at all.
3. **The deal.** The ``H`` holes, sorted by index, are dealt round robin to the ``n`` new streams,
   numbered ``g = s' + S'*w'`` (Grain's native order): hole ``j`` goes to stream
   ``(g0 - H + j) mod n``, ``g0`` being the stream whose tail starts with the smallest index (so
   g0 comes right after the last hole's stream), and each host's round robin starts at its worker
   with the smallest first index: a one-to-one pipeline on one host delivers the remainder in
   index order. With the same host count each host deals only its own holes among its own
   ``n = max(W', 1)`` workers; with a different host count the holes of all hosts are dealt
   among all ``n = S' * max(W', 1)`` streams (each process reads every process's file).
4. **The order.** Each new stream reads its holes in index order, then its native tail: its
   native indices ``>= M``. Batches are made per stream as always, so a batch at the seam can mix
   holes and tail; with ``drop_remainder=True`` each stream drops only its last short batch.

The same saved state and the same new layout always give the same streams. Once a stream has read
its holes its state is an ordinary Grain v2 position again.

A loader whose ``IndexSampler`` shards by itself numbers its indices per host, so its restore onto
another host count follows the rule of :mod:`grainlite.loader.state.resharding`.

A restore reads top to bottom: the saved states are read once (:func:`restore`,
:func:`restore_hosts`), the rule that applies computes the :class:`~.deal.Remainder` (rules 1 and
2; :mod:`grainlite.loader.state.streams` reads and walks the old streams), and
:func:`~.deal.deal` starts this host's new streams (rules 3 and 4). The arrows run one way:
this module -> ``resharding`` -> ``streams``, ``deal``.
"""

from __future__ import annotations

from typing import Any

from grainlite.engine.position import IteratorPosition
from grainlite.errors import CheckpointMismatchError, GrainliteValueError
from grainlite.loader.state import resharding, saved_state
from grainlite.loader.state.deal import Remainder, deal
from grainlite.loader.state.decoding import compacted, worker_states
from grainlite.loader.state.layout import Layout
from grainlite.loader.state.saved_state import SavedState
from grainlite.loader.state.streams import check_holes, check_resizable, old_streams, undelivered


def restore(state: bytes | str, layout: Layout, pipeline: Any) -> IteratorPosition:
    """The position for ``set_state(state)``: the state parsed once, then placed."""
    return place(saved_state.parse(state, layout.flat_map), layout, pipeline)


def place(saved: SavedState, layout: Layout, pipeline: Any) -> IteratorPosition:
    """The position a saved state gives this loader: exact with the same layout, elastic
    otherwise (this host's part of what the saved layout had not delivered)."""
    if saved.matches(layout):
        fan_outs = getattr(pipeline, "fan_outs", ())
        position = worker_states(saved, layout, pipeline.flat_maps, fan_outs)
        check_holes(position, pipeline.sampler)
        return compacted(position)
    if saved.holes is not None and saved.holes.where[1] != layout.shard_count:
        host, hosts, _ = saved.holes.where
        raise CheckpointMismatchError(
            f"This state holds the holes of host {host} of {hosts}, this loader is host "
            f"{layout.shard_index} of {layout.shard_count}. Restore a checkpoint saved with "
            f"another host count through grain.checkpoint.CheckpointRestore, which reads every "
            f"host's file."
        )
    check_resizable(pipeline)
    hosts = layout.shard_count
    return deal(_remainder({layout.shard_index: saved}, hosts, layout, pipeline), layout, pipeline)


def restore_hosts(
    documents: dict[int, Any], hosts: int, layout: Layout, pipeline: Any
) -> IteratorPosition:
    """The position for a restore from the files of ``hosts`` saving hosts (their parsed JSON,
    by host index): this host's part of what they had not delivered.

    With the same host count each host redistributes its own remainder (rule 3), so only its own
    file is read; with another, every host's is needed.
    """
    check_resizable(pipeline)
    if hosts == layout.shard_count:
        documents = {layout.shard_index: documents[layout.shard_index]}
    elif sorted(documents) != list(range(hosts)):
        raise GrainliteValueError(
            f"Restoring onto another host count needs the states of all {hosts} saving hosts, "
            f"got those of hosts {sorted(documents)}; restore from a folder that holds every "
            f"process_<i>-of-{hosts}.json."
        )
    saved = {
        host: saved_state.read(document, layout.flat_map) for host, document in documents.items()
    }
    if hosts != layout.shard_count and resharding.applies(pipeline, layout):
        remainder = resharding.remainder(saved, hosts, layout, pipeline)
    else:
        remainder = _remainder(saved, hosts, layout, pipeline)
    return deal(remainder, layout, pipeline)


def _remainder(
    saved: dict[int, SavedState], hosts: int, layout: Layout, pipeline: Any
) -> Remainder:
    """Rules 1 and 2: the holes below ``M`` and the bound ``M`` every new tail starts from.

    Args:
      saved: the saved state of each old host, by host index; with the same host count, only
        this host's.
      hosts: the old host count.
      layout: this loader's layout.
      pipeline: this loader's pipeline (its sampler, source and operations).
    """
    streams = []
    for host, state in sorted(saved.items()):
        streams += old_streams(state, host, hosts, layout, pipeline)
    special: set[int] = set()
    for stream in streams:
        special |= set(stream.skips) | stream.drops
    bound = max([s.tail_index for s in streams] + [i + 1 for i in special])
    holes = undelivered(
        streams,
        lambda index: index >= bound,
        end=streams[0].slice.end,
        furthest=f" (the furthest is at sampler index {bound})",
    )
    own = hosts == layout.shard_count
    return Remainder(sorted(holes.items()), (bound,) * layout.shard_count, own)
