"""Moving elements from a worker to the parent: numpy leaves through reusable shared memory.

Worker side (:class:`SlabPool`): every element's arrays are written into a *slab*, a shared-memory
segment the worker keeps and reuses. A Batch that is the last transform stacks straight into the
slab, so the batch is written exactly once. Only a small description (slab, offset, shape, dtype)
is pickled.

Parent side (:class:`SlabMapper`): each slab is mapped once and its name unlinked at once, so
``/dev/shm`` holds no name for it afterwards; the memory lives as long as a mapping does. The user
gets plain ``np.ndarray`` views. When the last array of an element is garbage-collected, the slab
goes back to the worker for reuse. A user who keeps arrays keeps their slabs; the worker then makes
new ones.
"""

from __future__ import annotations

import collections
import os
import weakref
from typing import Any

import numpy as np

from grainlite.errors import GrainliteRuntimeError
from grainlite.loader.shm import Segment

_ALIGN = 64
_MIN_SLAB = 1 << 16
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class ShmLeaf:
    """Placeholder for an array that lives in slab ``slab`` at ``offset``."""

    __slots__ = ("dtype", "offset", "shape", "slab")

    def __init__(self, slab: int, offset: int, shape: tuple[int, ...], dtype: str) -> None:
        self.slab, self.offset, self.shape, self.dtype = slab, offset, shape, dtype

    def __reduce__(self) -> tuple[Any, ...]:
        return ShmLeaf, (self.slab, self.offset, self.shape, self.dtype)


def map_leaves(tree: Any, fn: Any, leaf_type: type) -> Any:
    """Applies ``fn`` to every ``leaf_type`` leaf inside dicts, lists, tuples and namedtuples."""
    kind = type(tree)
    if kind is leaf_type:
        return fn(tree)
    if kind is dict:
        return {k: map_leaves(v, fn, leaf_type) for k, v in tree.items()}
    if kind is list:
        return [map_leaves(v, fn, leaf_type) for v in tree]
    if kind is tuple:
        return tuple(map_leaves(v, fn, leaf_type) for v in tree)
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return kind(*(map_leaves(v, fn, leaf_type) for v in tree))
    if isinstance(tree, dict):
        return kind((k, map_leaves(v, fn, leaf_type)) for k, v in tree.items())
    return tree


def _shareable(array: np.ndarray) -> bool:
    return array.dtype.kind != "O" and array.size > 0 and not array.dtype.hasobject


class SlabPool:
    """The worker's slabs: hands out array memory for one element at a time.

    Args:
      kind: segment name tag (owner and stream), see :mod:`grainlite.loader.shm`.
      owner: pid recorded in segment names (the parent, which owns their lifetime).
    """

    def __init__(self, kind: str, owner: int) -> None:
        self._kind, self._owner = kind, owner
        self._slabs: dict[int, Segment] = {}
        self._addresses: dict[int, int] = {}
        self._free: list[int] = []
        self._expected = _MIN_SLAB
        self._current: int | None = None
        self._offset = 0
        self._used: list[int] = []
        self.announced: list[tuple[int, str]] = []

    def _new_slab(self, size: int) -> int:
        size = -(-max(size, _MIN_SLAB) // _PAGE) * _PAGE
        segment = Segment.create(size, self._kind, self._owner, reserve=True)
        slab = len(self._slabs)
        self._slabs[slab] = segment
        self._addresses[slab] = np.frombuffer(segment.buf, np.uint8).__array_interface__["data"][0]
        self.announced.append((slab, segment.name))
        return slab

    def _take(self, size: int) -> int:
        fitting = [s for s in self._free if self._slabs[s].size >= size]
        if fitting:
            slab = min(fitting, key=lambda s: self._slabs[s].size)
            self._free.remove(slab)
        else:
            slab = self._new_slab(size + size // 4)
        self._used.append(slab)
        return slab

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised array of ``shape`` and ``dtype`` in shared memory, for this element."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if self._current is None:
            self._current, self._offset = self._take(max(self._expected, nbytes)), 0
        segment = self._slabs[self._current]
        if self._offset + nbytes > segment.size:
            self._current, self._offset = self._take(max(self._expected, nbytes)), 0
            segment = self._slabs[self._current]
        start = self._offset
        self._offset = -(-(start + nbytes) // _ALIGN) * _ALIGN
        self._expected = max(self._expected, self._offset)
        return np.ndarray(shape, dtype, buffer=segment.buf, offset=start)

    def describe(self, array: np.ndarray) -> ShmLeaf | None:
        """The placeholder for ``array`` if it lies in a slab of this element, else None."""
        address = array.__array_interface__["data"][0]
        for slab in self._used:
            start = self._addresses[slab]
            if start <= address < start + self._slabs[slab].size:
                return ShmLeaf(slab, address - start, array.shape, array.dtype.str)
        return None

    def export(self, element: Any) -> Any:
        """Replaces every shareable numpy leaf by a placeholder, copied into a slab if needed."""

        def to_leaf(array: np.ndarray) -> Any:
            if not _shareable(array):
                return array
            described = self.describe(array) if self._used else None
            if described is not None and array.flags.c_contiguous:
                return described
            target = self.allocate(array.shape, array.dtype)
            np.copyto(target, array)
            return self.describe(target)  # always found: target was just allocated here

        return map_leaves(element, to_leaf, np.ndarray)

    def finish_element(self) -> tuple[list[int], list[tuple[int, str]]]:
        """Ends the current element: returns its slabs and the newly created (slab, name) pairs."""
        used, self._used = self._used, []
        announced, self.announced = self.announced, []
        self._current = None
        return used, announced

    def release(self, slabs: list[int]) -> None:
        """The parent no longer uses these slabs; they can be written again."""
        self._free.extend(slabs)

    def close(self) -> None:
        """Unlinks every slab name (the parent has usually done so already)."""
        for segment in self._slabs.values():
            segment.unlink()
        self._slabs.clear()
        self._free.clear()


class _Lease(np.ndarray):
    """A view of a whole slab that every array of one element derives from.

    When it is garbage-collected, no array of that element is alive, and the slab can be reused.
    """


class SlabMapper:
    """The parent's side: maps announced slabs and turns placeholders into arrays."""

    def __init__(self) -> None:
        self._slabs: dict[int, np.ndarray] = {}
        self.released: collections.deque[int] = collections.deque()

    def announce(self, slabs: list[tuple[int, str]]) -> None:
        """Maps newly created slabs and removes their names from ``/dev/shm``."""
        for slab, name in slabs:
            try:
                segment = Segment.attach(name)
            except FileNotFoundError:
                raise GrainliteRuntimeError(
                    f"The shared-memory segment {name!r} of a worker disappeared before the loader "
                    f"could map it; something removed files in /dev/shm while the loader ran."
                ) from None
            segment.unlink()
            self._slabs[slab] = np.frombuffer(segment.buf, np.uint8)

    def materialize(self, payload: Any, slabs: list[int]) -> Any:
        """Turns the placeholders of one element into numpy arrays backed by its slabs."""
        leases: dict[int, _Lease] = {}
        for slab in slabs:
            lease = self._slabs[slab].view(_Lease)
            weakref.finalize(lease, self.released.append, slab)
            leases[slab] = lease

        def to_array(leaf: ShmLeaf) -> np.ndarray:
            dtype = np.dtype(leaf.dtype)
            count = int(np.prod(leaf.shape, dtype=np.int64))
            region = leases[leaf.slab][leaf.offset : leaf.offset + count * dtype.itemsize]
            return region.view(dtype).reshape(leaf.shape).view(np.ndarray)

        return map_leaves(payload, to_array, ShmLeaf)

    def take_released(self) -> list[int]:
        """Slabs whose arrays are all gone since the last call."""
        released = []
        while self.released:
            released.append(self.released.popleft())
        return released
