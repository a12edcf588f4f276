"""Which elements each ``mp_prefetch`` worker reads: the walk that gives one worker its share.

Grain's rule, kept here: worker ``w`` of ``W`` runs the whole ``IterDataset`` pipeline, with every
``to_iter_dataset`` in it reading the elements ``[w::W]`` of its ``MapDataset`` (with
``sequential_slice=True``, the ``w``-th of ``W`` contiguous ranges, sized as
``numpy.array_split`` sizes them). The walk follows the ``parents`` of every ``IterDataset`` node,
users' subclasses included, so both branches of a ``mix`` are sliced. A branch that ends in an
``IterDataset`` without parents (a user's own source) cannot be sliced: with ``W > 1`` that is a
ValueError, as in Grain; with ``W == 1`` nothing is sliced.

One rule differs from Grain, where Grain loses data (google/grain#1129): when the nodes between
``mp_prefetch`` and a ``to_iter_dataset`` are batches (at least one with
``drop_remainder=True``) and one-to-one maps only, and the ``MapDataset`` has no filter, each
worker reads whole batches' worth of indices: blocks of ``B`` consecutive indices (``B`` the
product of the batch sizes), block ``k`` going to worker ``k % W`` (or contiguous runs of blocks
with ``sequential_slice``). Every worker's batches are then full except the stream's last one, so
the workers together give exactly the batches of one worker, in the same order. Grain instead
slices element by element, and each worker drops its own partial batch. Where the rule cannot
apply (a filter, a flat map or a user's node under the batch: which indices make a full batch is
known only once read), grainlite warns when the iterator is made and names the fix: batch after
``mp_prefetch``, in the parent, to lose nothing but the stream's last partial batch.

The slicing happens in the worker, on its private unpickled copy of the pipeline: each
``to_iter_dataset`` node takes its share in place, through its ``set_block_share`` hook (Grain's
``set_slice`` where no batch rule applies). Any other ``IterDataset`` node with Grain's in-place
slicing hook ``set_slice(sl, sequential_slice)`` (an ``InterleaveIterDataset``, which then reads
``datasets[w::W]``; a ``ParquetIterDataset``, its files ``[w::W]``; a user's node) takes its share
itself too, through ``set_slice(slice(w, None, W), sequential_slice)``, and the walk does not go
below it, as in Grain.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, TypeGuard

from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import first_hole_maker
from grainlite.errors import GrainliteValueError


class SharedOut(Protocol):
    """A node that reads a ``MapDataset`` and takes a worker's share of it in place (a
    ``to_iter_dataset``: :meth:`~grainlite.dataset.to_iter.PrefetchIterDataset.set_block_share`)."""

    parents: Any

    def set_block_share(
        self, block: int, worker: int, workers: int, sequential: bool = False
    ) -> None: ...


def is_to_iter(node: Any) -> TypeGuard[SharedOut]:
    """Whether ``node`` is a ``to_iter_dataset`` node: it reads a ``MapDataset``, and takes a
    worker's share of it through its ``set_block_share`` hook."""
    return callable(getattr(node, "set_block_share", None))


def slices_itself(node: Any) -> bool:
    """Whether ``node`` takes a worker's share in place: a ``to_iter_dataset`` node, or any
    other node with Grain's ``set_slice`` hook (an interleave, a user's node). The walk that
    shares the pipeline out stops there."""
    return is_to_iter(node) or callable(getattr(node, "set_slice", None))


def iter_nodes(root: IterDataset) -> Iterator[IterDataset]:
    """Every ``IterDataset`` node of the pipeline once, from ``root`` towards the sources, down
    to the nodes that take their share themselves (:func:`slices_itself`)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        if not slices_itself(node):
            stack.extend(p for p in node.parents if isinstance(p, IterDataset))


def check_sliceable(root: IterDataset, workers: int) -> None:
    """Raises a ValueError if ``workers > 1`` cannot share ``root`` (a branch has no MapDataset)."""
    if workers <= 1:
        return
    for node in iter_nodes(root):
        if not slices_itself(node) and not any(isinstance(p, IterDataset) for p in node.parents):
            raise GrainliteValueError(
                f"Cannot slice `IterDataset` source. {type(node)} has no MapDataset below it, so "
                f"mp_prefetch cannot give each of its {workers} workers a share of the elements. "
                "Build the pipeline from a MapDataset (MapDataset.source(...).to_iter_dataset()), "
                "or pass MultiprocessingOptions(num_workers=1)."
            )


def batch_block(root: IterDataset) -> int:
    """The batch-aligned block size of the #1129 rule for ``root``, or 1 where it does not apply:
    between ``root`` and the ``to_iter_dataset`` only batches and nodes that are ``one_to_one``,
    and no node that leaves or may leave ``None`` holes in the ``MapDataset`` below it (the one
    rule of :func:`~grainlite.dataset.map_dataset.first_hole_maker`). A batch tells through its
    ``fixed_batch`` and ``drop_remainder``."""
    block, drops, node = 1, False, root
    while True:
        if is_to_iter(node):
            if not drops or block == 1:
                return 1
            return block if first_hole_maker(node.parents[0], count_unknown=True) is None else 1
        if slices_itself(node) or len(node.parents) != 1:  # an interleave: its own share
            return 1
        if (size := getattr(node, "fixed_batch", None)) is not None:
            block *= size
            drops = drops or getattr(node, "drop_remainder", False)
        elif not getattr(node, "one_to_one", False):  # a filter, a flat map or a user's node
            return 1
        node = node.parents[0]


def drops_a_partial_batch_per_worker(root: IterDataset, workers: int) -> bool:
    """True if ``workers`` workers would each drop a partial batch of ``root`` (google/grain#1129)
    because the batch rule above cannot apply (a filter, flat map or user's node lies under a
    ``batch(drop_remainder=True)``): then up to ``workers - 1`` more partial batches are lost
    than with one worker."""
    if workers <= 1 or batch_block(root) > 1:
        return False
    return any(getattr(node, "drop_remainder", False) is True for node in iter_nodes(root))


def slice_for_worker(root: IterDataset, worker: int, workers: int, sequential: bool) -> None:
    """Restricts every node of ``root`` that takes a share (:func:`slices_itself`) to worker
    ``worker``'s share, in place."""
    if workers <= 1:
        return
    check_sliceable(root, workers)
    block = batch_block(root)
    for node in list(iter_nodes(root)):
        if is_to_iter(node):
            node.set_block_share(block, worker, workers, sequential)
        elif callable(set_slice := getattr(node, "set_slice", None)):  # an interleave, a user's
            set_slice(slice(worker, None, workers), sequential)
        elif callable(share := getattr(node, "set_worker_share", None)):  # random_map: k*W + w
            share(worker, workers)
