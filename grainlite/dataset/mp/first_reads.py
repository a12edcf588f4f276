"""The first ``mp_prefetch`` worker's first source keys, told to a remote source before the
workers start, so that it fetches just those records by range (its ``prefetch_first_reads``,
:mod:`grainlite.sources.remote.first_copies`) and the first element does not wait for every
whole file. The Dataset API's side of what the DataLoader does at ``iter(loader)``
(:func:`grainlite.loader.chunk_reads.copy_first_reads`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from grainlite.dataset.key_hints import chain_to_source, keys_through, rows_per_index
from grainlite.dataset.mp.slicing import batch_block, is_to_iter, slices_itself
from grainlite.dataset.source import sequential_share
from grainlite.options import READ_POLICY


def first_worker_indices(
    length: int, workers: int, block: int, sequential: bool, count: int
) -> np.ndarray:
    """The first ``count`` indices (at most) of a ``MapDataset`` of ``length`` that worker 0 of
    ``workers`` reads, shared out as ``mp_prefetch`` shares it (blocks of ``block`` indices,
    block ``k`` to worker ``k % workers``; with ``sequential``, worker 0's contiguous run)."""
    if sequential:
        blocks = -(-length // block)
        start, stop = sequential_share(slice(0, None, workers), blocks)
        return np.arange(start * block, min(length, stop * block, start * block + count))
    rounds = -(-count // block)
    starts = np.arange(rounds, dtype=np.int64)[:, None] * (workers * block)
    indices = (starts + np.arange(block, dtype=np.int64)[None, :]).reshape(-1)[:count]
    return indices[indices < length]


def first_batch_indices(root: Any) -> int | None:
    """The ``MapDataset`` indices (under the ``to_iter_dataset`` of ``root``, a chain of nodes
    with one parent each) that make ``root``'s first element: the product of the batch sizes
    between them; None where there is no batch, or a node that is neither a batch nor one to one
    (a filter, a flat map, a user's node) makes the count depend on the data."""
    batch: int | None = None
    node = root
    while not is_to_iter(node):
        size = getattr(node, "fixed_batch", None)
        if size is not None:
            batch = (batch or 1) * size
        elif not getattr(node, "one_to_one", False):
            return None
        node = node.parents[0]
    return batch


def copy_first_reads(root: Any, workers: int, sequential: bool) -> None:
    """Tells the source under ``root`` (an ``IterDataset`` chain down to one
    ``to_iter_dataset``) the keys of worker 0's first records, where it fetches first records by
    range (``prefetch_first_reads``): those of the reads that hold its first element
    (:meth:`~grainlite.options.ReadPolicy.first_copies`). Advisory, as every hint: a pipeline
    whose nodes cannot say their keys gives none, and a failure is left for the reads."""
    if READ_POLICY.first_copy_records <= 0 or workers < 1:
        return
    node = root
    while not is_to_iter(node):
        parents = tuple(getattr(node, "_parents", ()))
        if slices_itself(node) or len(parents) != 1:
            return
        node = parents[0]
    with contextlib.suppress(Exception):  # advisory, as every hint
        dataset = node.parents[0]
        nodes = chain_to_source(dataset)
        if nodes is None:
            return
        source = nodes[-1]._hinted_source()
        prefetch = getattr(source, "prefetch_first_reads", None)
        if prefetch is None or not getattr(source, "takes_key_hints", False):
            return
        rows = rows_per_index(nodes)
        count = READ_POLICY.first_copies(first_batch_indices(root), READ_POLICY.first_block, rows)
        if count <= 0:
            return
        indices = first_worker_indices(
            len(dataset), workers, batch_block(root), sequential, -(-count // rows)
        )
        prefetch(keys_through(nodes, indices)[:count])
