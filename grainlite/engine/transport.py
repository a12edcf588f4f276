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

An element crosses unchanged: its containers are walked in their own order
(:func:`grainlite.tree.map_leaves_keeping_order`), so the parent gets the same container types, key
order, ``default_factory`` and namedtuple types as ``worker_count=0`` gives. What the tree rules
call a leaf (a dict subclass, any other object) is pickled whole, arrays inside it included.

The message around the placeholders is pickled by :func:`dumps`, which also sends classes and
functions of the user's script (``__main__``) by name: the worker runs its own ``__main__``, the
parent resolves the name in the user's. :func:`unsendable_element_error` says which part of an
element could not be pickled.
"""

from __future__ import annotations

import collections
import functools
import io
import os
import pickle
import sys
import types
import weakref
from typing import Any

import numpy as np

from grainlite.errors import GrainliteRuntimeError, GrainliteTypeError
from grainlite.shm import Segment
from grainlite.tree import format_path, leaves_with_paths, map_leaves_keeping_order

_ALIGN = 64
_MIN_SLAB = 1 << 16
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PROTOCOL = pickle.HIGHEST_PROTOCOL


class ShmLeaf:
    """Placeholder for an array that lives in slab ``slab`` at ``offset``."""

    __slots__ = ("dtype", "offset", "shape", "slab")

    def __init__(
        self, slab: int, offset: int, shape: tuple[int, ...], dtype: str | np.dtype
    ) -> None:
        self.slab, self.offset, self.shape, self.dtype = slab, offset, shape, dtype

    def __reduce__(self) -> tuple[Any, ...]:
        return ShmLeaf, (self.slab, self.offset, self.shape, self.dtype)


def _shareable(leaf: Any) -> bool:
    """Whether ``leaf`` travels through a slab: a plain ndarray holding bytes, not objects.

    Subclasses (masked arrays, matrices) are pickled whole, so they keep what they add; an empty
    array has no bytes to share.
    """
    return type(leaf) is np.ndarray and leaf.size > 0 and not leaf.dtype.hasobject


def _dtype_spec(dtype: np.dtype) -> str | np.dtype:
    """What the parent needs to rebuild ``dtype``: its short string, or itself if that loses data.

    ``dtype.str`` keeps the byte order and the size, but a structured dtype's string is ``|V<n>``,
    which drops its field names and types, and no string carries a dtype's ``metadata``; those
    send the dtype object (slower to pickle).
    """
    return dtype.str if dtype.names is None and dtype.metadata is None else dtype


class SlabPool:
    """The worker's slabs: hands out array memory for one element at a time.

    Args:
      kind: segment name tag (owner and stream), see :mod:`grainlite.shm`.
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
                return ShmLeaf(slab, address - start, array.shape, _dtype_spec(array.dtype))
        return None

    def export(self, element: Any) -> Any:
        """Replaces every shareable numpy leaf by a placeholder, copied into a slab if needed."""

        def to_leaf(array: Any) -> Any:
            if not _shareable(array):
                return array
            described = self.describe(array) if self._used else None
            if described is not None and array.flags.c_contiguous:
                return described
            target = self.allocate(array.shape, array.dtype)
            np.copyto(target, array)
            return self.describe(target)  # always found: target was just allocated here

        return map_leaves_keeping_order(to_leaf, element)

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
        # A weak reference to each lease, with the slab it holds. When a lease dies, its
        # reference is appended to ``_dead`` by ``deque.append`` itself, a C function: releasing
        # a batch runs no Python code. (A Python callback, such as ``weakref.finalize``'s, starts
        # a frame, CPython raises a pending Ctrl-C there, and an exception in a callback of a
        # dropped reference is printed and dropped: the user's Ctrl-C would be lost.)
        # Keyed by the reference's id (a lease, an array, has no hash); the entry keeps the
        # reference alive, which a weak reference needs for its callback to run.
        self._leases: dict[int, tuple[weakref.ref[_Lease], int]] = {}
        self._dead: collections.deque[weakref.ref[_Lease]] = collections.deque()

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
            reference = weakref.ref(lease, self._dead.append)
            self._leases[id(reference)] = (reference, slab)
            leases[slab] = lease

        def to_array(leaf: Any) -> Any:
            if type(leaf) is not ShmLeaf:
                return leaf
            dtype = np.dtype(leaf.dtype)
            count = int(np.prod(leaf.shape, dtype=np.int64))
            region = leases[leaf.slab][leaf.offset : leaf.offset + count * dtype.itemsize]
            return region.view(dtype).reshape(leaf.shape).view(np.ndarray)

        return map_leaves_keeping_order(to_array, payload)

    def close(self) -> None:
        """Drops this mapper's own mapping of every slab: a slab's memory (and the file
        descriptor its mapping holds) is freed once no array of a delivered element uses it."""
        self._slabs.clear()

    def take_released(self) -> list[int]:
        """Slabs whose arrays are all gone since the last call."""
        released = []
        while self._dead:
            released.append(self._leases.pop(id(self._dead.popleft()))[1])
        return released


# Pickling the message ---------------------------------------------------------------------------


def dumps(message: Any) -> bytes:
    """Pickles a message for the parent, sending ``__main__`` classes and functions by name.

    Plain :func:`pickle.dumps` is tried first (the fast path). If it fails, the message is pickled
    again with classes and functions of ``__main__`` (a namedtuple type of the user's script, a
    ``defaultdict``'s factory) written as references into the parent's ``__main__``: in the worker
    they arrived by value with the pipeline and cannot be found by name, in the parent they are the
    user's own objects. Lambdas and local definitions have no name to send and still fail.

    Raises:
      Whatever pickling raises when the message cannot be pickled even so.
    """
    try:
        return pickle.dumps(message, _PROTOCOL)
    except Exception:  # most often "attribute lookup X on __main__ failed"
        pass
    buffer = io.BytesIO()
    _MainByName(buffer, _PROTOCOL).dump(message)
    return buffer.getvalue()


def dumps_out_of_band(message: Any) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Pickles ``message`` as :func:`dumps` does, with numpy arrays' bytes left out of band.

    Returns the pickle (containers, scalars, strings, array headers) and the contiguous arrays'
    buffers, in order: ``pickle.loads(data, buffers=buffers)`` rebuilds the message with arrays
    that are views of those buffers (no copy). A backend that moves buffers by its own means
    (Ray's object store) sends the arrays' bytes without pickling them.
    """
    buffers: list[pickle.PickleBuffer] = []
    try:
        return pickle.dumps(message, 5, buffer_callback=buffers.append), buffers
    except Exception:  # most often "attribute lookup X on __main__ failed"
        pass
    buffers = []
    stream = io.BytesIO()
    _MainByName(stream, 5, buffer_callback=buffers.append).dump(message)
    return stream.getvalue(), buffers


def _from_main(qualname: str) -> Any:
    """The object named ``qualname`` in this process's ``__main__`` (the user's script)."""
    return functools.reduce(getattr, qualname.split("."), sys.modules["__main__"])


class _MainByName(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if (
            isinstance(obj, type | types.FunctionType)
            and obj.__module__ == "__main__"
            and "<" not in obj.__qualname__  # lambdas and <locals> cannot be found by name
        ):
            return _from_main, (obj.__qualname__,)
        return NotImplemented


def unsendable_element_error(element: Any, error: BaseException) -> GrainliteTypeError:
    """The error for an element that :func:`dumps` could not pickle: which part, its type, why.

    Each leaf is pickled on its own to find the first one that fails (in the element's order); the
    message gives its path (``['meta'][1]``), its type and pickle's reason. If every leaf pickles
    on its own, a container is to blame (a lambda as ``default_factory``, a namedtuple type defined
    inside a function) and the message names the element's type and pickle's reason.

    Args:
      element: the element as the transform returned it.
      error: what pickling the element raised.
    """
    rule = (
        "transforms that run in worker processes must return picklable values (numpy arrays, "
        "numbers, strings, and dicts, lists, tuples or namedtuples of them, with module-level "
        "types and functions); return such a value there, or pass worker_count=0 to run the "
        "transforms in this process."
    )
    for path, leaf in leaves_with_paths(element):
        if type(leaf) is np.ndarray and not leaf.dtype.hasobject:
            continue  # bytes in an array always pickle
        try:
            dumps(leaf)
        except Exception as leaf_error:
            where = f"The leaf at {format_path(path)} of an element" if path else "An element"
            return GrainliteTypeError(
                f"{where} could not be sent to the parent process: it is of type "
                f"{_type_name(leaf)}, which cannot be pickled ({leaf_error}); {rule}"
            )
    return GrainliteTypeError(
        f"An element of type {_type_name(element)} could not be sent to the parent process "
        f"({error}); {rule}"
    )


def _type_name(value: Any) -> str:
    kind = type(value)
    if kind.__module__ in ("builtins", "__main__"):
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"
