"""Batches as torch tensors without a copy, and pinning them on a background thread.

:func:`to_tensors` turns every numeric numpy leaf of a batch into a ``torch.Tensor`` with
``torch.from_numpy``: the tensor views the array's memory. Arrays a worker sent live in its
shared-memory slab, which stays leased to the parent as long as any array viewing it is alive; a
tensor made by ``from_numpy`` keeps its array alive, so the slab cannot be reused under it.
Strings, bytes and object arrays stay as they are (torch has no tensor for them).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from grainlite.engine.producer import Producer
from grainlite.tree import map_leaves_keeping_order

# numpy kinds torch has tensors for: bool, signed and unsigned ints, floats, complex.
_NUMERIC_KINDS = frozenset("biufc")


def _leaf_to_tensor(leaf: Any) -> Any:
    if isinstance(leaf, np.ndarray):
        if leaf.dtype.kind not in _NUMERIC_KINDS or type(leaf) is not np.ndarray:
            return leaf
        if not leaf.dtype.isnative:
            leaf = leaf.astype(leaf.dtype.newbyteorder("="))  # torch reads native order only
        if any(stride < 0 for stride in leaf.strides):
            leaf = np.ascontiguousarray(leaf)  # torch has no negative strides
        if not leaf.flags.writeable:
            # torch warns that writing through the tensor is undefined; nothing here writes.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(leaf)
        return torch.from_numpy(leaf)
    if isinstance(leaf, np.generic) and leaf.dtype.kind in _NUMERIC_KINDS:
        return torch.from_numpy(np.asarray(leaf))  # a 0-d tensor
    return leaf


def to_tensors(batch: Any) -> Any:
    """``batch`` with every numeric numpy array (and numpy scalar) as a torch tensor, no copy.

    The containers (dicts, lists, tuples, namedtuples, dataclasses the tree rules know) keep their
    types and key order.
    """
    return map_leaves_keeping_order(_leaf_to_tensor, batch)


def pin_batch(batch: Any) -> Any:
    """``batch`` with every tensor copied to pinned (page-locked) host memory."""
    return map_leaves_keeping_order(
        lambda leaf: leaf.pin_memory() if isinstance(leaf, torch.Tensor) else leaf, batch
    )


def can_pin() -> bool:
    """Whether this machine has an accelerator to pin memory for (CUDA, ROCm, XPU, MPS...)."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return bool(accelerator.is_available())
    return bool(torch.cuda.is_available())


def start_pinning(fetch: Callable[[], tuple[Any, Any]], pin: bool, depth: int = 2) -> Producer:
    """Fetches the next batches on a background thread and pins them (if ``pin``), ``depth`` ahead.

    ``fetch`` returns ``(batch, extra)`` or raises StopIteration; ``extra`` travels with the batch
    as the item's state (the loader's position after it). The consumer takes the items with
    ``get()`` (:mod:`grainlite.engine.producer`): an exception raised by ``fetch`` arrives in the
    batch's place, and after it or the end every ``get()`` is an ``End``. ``stop()`` returns once
    ``fetch`` returns (a worker's next batch), so it is called before the workers are stopped.
    """

    def step() -> tuple[Any, Any]:
        batch, extra = fetch()
        return (pin_batch(batch) if pin else batch), extra

    return Producer(step, depth, "grainlite-pin-memory")
