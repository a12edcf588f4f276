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
``to_iter_dataset`` node is changed in place (through its ``with_parent_slice`` hook), so a user's
node that keeps its parent under another attribute name still reads the sliced one.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import Any

from grainlite.dataset.base import IterDataset, MapDataset, first_hole_maker
from grainlite.dataset.transforms import parent_stream
from grainlite.errors import GrainliteValueError


def _to_iter_class() -> type:
    from grainlite.dataset.to_iter import PrefetchIterDataset

    return PrefetchIterDataset


def is_to_iter(node: Any) -> bool:
    """Whether ``node`` is a ``to_iter_dataset`` node (it reads a ``MapDataset``, sliced per
    worker)."""
    return isinstance(node, _to_iter_class())


def iter_nodes(root: IterDataset) -> Iterator[IterDataset]:
    """Every ``IterDataset`` node of the pipeline once, from ``root`` towards the sources."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        if not isinstance(node, _to_iter_class()):
            stack.extend(p for p in node.parents if isinstance(p, IterDataset))


def check_sliceable(root: IterDataset, workers: int) -> None:
    """Raises a ValueError if ``workers > 1`` cannot share ``root`` (a branch has no MapDataset)."""
    if workers <= 1:
        return
    to_iter = _to_iter_class()
    for node in iter_nodes(root):
        if not isinstance(node, to_iter) and not any(
            isinstance(p, IterDataset) for p in node.parents
        ):
            raise GrainliteValueError(
                f"Cannot slice `IterDataset` source. {type(node)} has no MapDataset below it, so "
                f"mp_prefetch cannot give each of its {workers} workers a share of the elements. "
                "Build the pipeline from a MapDataset (MapDataset.source(...).to_iter_dataset()), "
                "or pass MultiprocessingOptions(num_workers=1)."
            )


def _share(count: int, worker: int, workers: int) -> tuple[int, int]:
    """The contiguous ``[start, stop)`` of ``count`` items for ``worker`` (array_split sizes)."""
    base, extra = divmod(count, workers)
    start = worker * base + min(worker, extra)
    return start, start + base + (worker < extra)


def batch_block(root: IterDataset) -> int:
    """The batch-aligned block size of the #1129 rule for ``root``, or 1 where it does not apply:
    between ``root`` and the ``to_iter_dataset`` only batches and nodes that are ``one_to_one``,
    and no node that leaves or may leave ``None`` holes in the ``MapDataset`` below it (the one
    rule of :func:`~grainlite.dataset.base.first_hole_maker`)."""
    from grainlite.dataset.batching import BatchIterDataset

    block, drops, node = 1, False, root
    while True:
        if isinstance(node, _to_iter_class()):
            if not drops or block == 1:
                return 1
            return block if first_hole_maker(node.parents[0], count_unknown=True) is None else 1
        if len(node.parents) != 1:
            return 1
        if type(node) is BatchIterDataset:
            block *= node._batch_size
            drops = drops or node._drop_remainder
        elif not getattr(node, "one_to_one", False):  # a filter, a flat map or a user's node
            return 1
        node = node.parents[0]


def drops_a_partial_batch_per_worker(root: IterDataset, workers: int) -> bool:
    """True if ``workers`` workers would each drop a partial batch of ``root`` (google/grain#1129)
    because the batch rule above cannot apply (a filter, flat map or user's node lies under a
    ``batch(drop_remainder=True)``): then up to ``workers - 1`` more partial batches are lost
    than with one worker."""
    from grainlite.dataset.batching import BatchIterDataset

    if workers <= 1 or batch_block(root) > 1:
        return False
    return any(
        isinstance(node, BatchIterDataset) and node._drop_remainder for node in iter_nodes(root)
    )


def slice_for_worker(root: IterDataset, worker: int, workers: int, sequential: bool) -> None:
    """Restricts every ``to_iter_dataset`` of ``root`` to worker ``worker``'s share, in place."""
    if workers <= 1:
        return
    check_sliceable(root, workers)
    block = batch_block(root)
    to_iter = _to_iter_class()
    for node in list(iter_nodes(root)):
        if isinstance(node, to_iter):
            _slice_node(node, worker, workers, sequential, block)
        elif callable(share := getattr(node, "set_worker_share", None)):  # random_map: k*W + w
            share(worker, workers)


def _slice_node(node: Any, worker: int, workers: int, sequential: bool, block: int) -> None:
    parent: MapDataset = node.parents[0]
    if block == 1 or sequential:
        if sequential:
            blocks = -(-len(parent) // block)
            start, stop = _share(blocks, worker, workers)
            sl = builtins.slice(start * block, stop * block)
        else:
            sl = builtins.slice(worker, None, workers)
        vars(node).update(vars(node.with_parent_slice(sl)))
    else:
        vars(node)["_parents"] = (BlockStrideMapDataset(parent, block, worker, workers),)


class BlockStrideMapDataset(MapDataset):
    """Blocks ``first, first + stride, ...`` of ``block`` consecutive elements of ``parent``.

    Worker ``first`` of ``stride`` reads these under the batch rule (see the module docstring).
    """

    def __init__(self, parent: MapDataset, block: int, first: int, stride: int) -> None:
        super().__init__(parent)
        self._block, self._first, self._stride = block, first, stride
        total = len(parent)
        blocks = -(-total // block)
        mine = max(0, -(-(blocks - first) // stride))
        length = mine * block
        last = first + stride * (mine - 1)
        if mine and last == blocks - 1 and total % block:
            length -= block - total % block  # this worker holds the stream's partial last block
        self._length = length

    def __len__(self) -> int:
        return self._length

    def _index(self, index: int) -> int:
        k, r = divmod(index % self._length, self._block)
        return (self._first + self._stride * k) * self._block + r

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        return self._parent[self._index(int(index))]

    def _getitems(self, indices: Any) -> list[Any]:
        return self._parent._getitems([self._index(int(i)) for i in indices])

    def _stream(self, indices: Any) -> Iterator[Any]:
        """``_getitems`` one element at a time, through the parent's stream."""
        return parent_stream(self._parent)([self._index(int(i)) for i in indices])
