"""Batches as torch tensors without a copy, and pinning them in a background thread.

:func:`to_tensors` turns every numeric numpy leaf of a batch into a ``torch.Tensor`` with
``torch.from_numpy``: the tensor views the array's memory. Arrays a worker sent live in its
shared-memory slab, which stays leased to the parent as long as any array viewing it is alive; a
tensor made by ``from_numpy`` keeps its array alive, so the slab cannot be reused under it.
Strings, bytes and object arrays stay as they are (torch has no tensor for them).
"""

from __future__ import annotations

import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

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


_DONE = object()


class PinningThread:
    """Fetches the next batches in a background thread and pins them (if ``pin``), a few ahead.

    ``fetch`` returns ``(batch, extra)`` or raises StopIteration; ``extra`` travels with the batch
    (the loader's position after it). An exception raised by ``fetch`` is re-raised by
    :meth:`next` in its place. :meth:`close` stops the thread; it returns once ``fetch`` returns
    (a worker's next batch), so it is called before the workers are stopped.
    """

    def __init__(self, fetch: Callable[[], tuple[Any, Any]], pin: bool, depth: int = 2) -> None:
        self._fetch = fetch
        self._pin = pin
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="grainlite-pin-memory", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch, extra = self._fetch()
                item: Any = (pin_batch(batch) if self._pin else batch, extra)
            except StopIteration:
                self._put(_DONE)
                return
            except BaseException as error:  # handed to the consumer, in the batch's place
                self._put(error)
                return
            if not self._put(item):
                return

    def next(self) -> tuple[Any, Any]:
        """The next pinned ``(batch, extra)``; StopIteration at the end."""
        item = self._queue.get()
        if item is _DONE:
            self._queue.put(_DONE)  # later calls end too
            raise StopIteration
        if isinstance(item, BaseException):
            self._queue.put(_DONE)
            raise item
        return item  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stops fetching; waits for the fetch in progress to return. Idempotent."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()
