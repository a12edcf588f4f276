"""``SharedMemoryArray``: Grain's numpy array whose data lives in a named shared-memory segment.

Another process attaches to the same memory with :meth:`SharedMemoryArray.from_metadata` (or by
unpickling the array, which sends only the segment name), so large arrays cross processes without
being copied. The segment is one of grainlite's own (:class:`grainlite.shm.Segment`): its name
records the creating process, so ``grainlite.remove_stale_segments()`` removes it once that process
is gone, whatever happened to it.

Who removes the segment name (the memory itself goes when the last mapping goes):

* an array whose name never left it (no ``.metadata`` taken, never pickled) removes it when it is
  garbage-collected: nobody else can attach to it;
* once the name was handed out, the receiver owns the removal, as in Grain: call
  ``metadata.close_and_unlink_shm()``, or ``unlink_on_del()`` on an attached array. An array made
  by unpickling owns it without being told (Grain's leaves it to the user, and a forgotten unlink
  leaks the segment until the machine restarts); this is how an array returned by a transform in a
  worker process reaches the consumer intact and is removed when the consumer drops it;
* if the creator dies before anyone removes it, stale-segment cleanup does (its name carries the
  creator's pid); a segment name that is removed while a receiver still has to attach makes
  :meth:`~SharedMemoryArray.from_metadata` raise FileNotFoundError.

ufunc results (``a + 1``, ``np.sqrt(a)``) are plain ``np.ndarray`` in ordinary memory, as in Grain;
slices and reshapes are views of the shared memory and stay ``SharedMemoryArray``.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import os
import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from grainlite.checks import int_option
from grainlite.errors import GrainliteTypeError, GrainliteValueError
from grainlite.shm.segments import Segment, unlink

if TYPE_CHECKING:  # imported where used: a worker process imports this module and needs neither
    from concurrent.futures import ThreadPoolExecutor

    import numpy.typing as npt

_TAG = "arr"


@dataclasses.dataclass(frozen=True, slots=True)
class SharedMemoryArrayMetadata:
    """What another process needs to attach to a :class:`SharedMemoryArray`.

    Attributes:
      name: the shared-memory segment name.
      shape: the array's shape.
      dtype: the array's numpy dtype.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    def close_and_unlink_shm(self) -> None:
        """Removes the segment name; arrays already attached keep working. Safe to call twice."""
        unlink(self.name)


class _Ownership:
    """Whether the array that holds this removes the segment name when it is collected."""

    __slots__ = ("_unlink", "pid")

    def __init__(self, unlink: bool) -> None:
        self._unlink = unlink
        self.pid = os.getpid()

    @property
    def unlink(self) -> bool:
        """Whether to remove the name: never in a child made by ``os.fork()`` (the parent's)."""
        return self._unlink and self.pid == os.getpid()

    @unlink.setter
    def unlink(self, value: bool) -> None:
        self._unlink = value
        self.pid = os.getpid()


class _AsyncDel:
    """The thread pool :meth:`SharedMemoryArray.enable_async_del` moves removals to."""

    lock = threading.Lock()
    pool: ThreadPoolExecutor | None = None
    slots: threading.BoundedSemaphore | None = None


def _check_positive(name: str, value: Any) -> int:
    message = (
        f"SharedMemoryArray.enable_async_del {name} must be a positive int (got {{value}}); "
        "pass 1 or more."
    )
    return int_option(value, 1, message, message, wrong_type_error=GrainliteValueError)


def _release(segment: Segment, ownership: _Ownership) -> None:
    # Runs when the array is collected (or at interpreter exit). The mapping goes with the
    # Segment object once nothing refers to it; only the name removal is work.
    if not ownership.unlink:
        return
    pool, slots = _AsyncDel.pool, _AsyncDel.slots
    if pool is not None and slots is not None and slots.acquire(blocking=False):
        try:
            future = pool.submit(segment.unlink)
        except RuntimeError:  # the pool shut down (interpreter exit): remove it here instead
            slots.release()
        else:
            future.add_done_callback(lambda _: slots.release())
            return
    segment.unlink()


def _attach_pickled(metadata: SharedMemoryArrayMetadata) -> SharedMemoryArray:
    array = SharedMemoryArray.from_metadata(metadata)
    array.unlink_on_del()  # the receiver of a pickled array owns the removal (module docstring)
    return array


class SharedMemoryArray(np.ndarray):
    """An ``np.ndarray`` whose data is a shared-memory segment other processes can attach to.

    ``SharedMemoryArray(shape, dtype=float)`` creates a new zero-filled segment.

    Raises:
      GrainliteValueError: the array would hold zero bytes (a segment cannot be empty).
      SharedMemoryFullError: ``/dev/shm`` has no room for it.
    """

    _segment: Segment | None
    _ownership: _Ownership | None
    _start: int  # the address of the segment's first byte

    def __new__(cls, shape: Iterable[int] | int, dtype: npt.DTypeLike = float) -> SharedMemoryArray:
        shape_tuple = _as_shape(shape)
        dtype = np.dtype(dtype)
        if dtype.hasobject:
            raise GrainliteTypeError(
                f"SharedMemoryArray dtype must not hold Python objects (got {dtype}); shared "
                f"memory holds bytes, not references. Use a numeric, bool, bytes or str dtype."
            )
        size = math.prod(shape_tuple) * dtype.itemsize
        if size <= 0:
            raise GrainliteValueError(
                f"SharedMemoryArray must hold at least one byte (got shape {shape_tuple} of "
                f"{dtype}, {size} bytes); a shared-memory segment cannot be empty. Use a plain "
                f"np.empty for empty arrays."
            )
        segment = Segment.create(size, _TAG, reserve=True)
        return cls._wrap(segment, shape_tuple, dtype, unlink=True)

    @classmethod
    def _wrap(
        cls, segment: Segment, shape: tuple[int, ...], dtype: np.dtype, unlink: bool
    ) -> SharedMemoryArray:
        # A slice of segment.buf, so that the Segment's own view never has exports.
        array = np.ndarray.__new__(cls, shape, dtype, buffer=segment.buf[:])
        ownership = _Ownership(unlink)
        array._segment, array._ownership = segment, ownership
        array._start = array.__array_interface__["data"][0]
        weakref.finalize(array, _release, segment, ownership)
        return array

    def __array_finalize__(self, obj: Any) -> None:
        # Views keep the segment (hence the mapping) alive; only the creating array owns it. A
        # copy (no base) lives in ordinary memory and has no segment.
        self._segment = getattr(obj, "_segment", None) if self.base is not None else None
        self._start = getattr(obj, "_start", 0)
        self._ownership = None

    def __array_wrap__(
        self, array: np.ndarray, context: Any = None, return_scalar: bool = False
    ) -> Any:
        # ufunc results in new memory are not shared: they stay plain arrays, as in Grain. An
        # output passed in (``a += 1``, ``out=a``) is returned as it is.
        if type(array) is not np.ndarray:
            return array
        return array[()] if return_scalar else array

    @classmethod
    def from_metadata(cls, metadata: SharedMemoryArrayMetadata) -> SharedMemoryArray:
        """Attaches to the segment ``metadata`` names (no copy); the result does not remove it.

        Raises:
          FileNotFoundError: no segment has that name (it was removed, or its creator died).
          GrainliteValueError: the segment is smaller than ``metadata``'s shape and dtype need.
        """
        shape, dtype = _as_shape(metadata.shape), np.dtype(metadata.dtype)
        segment = Segment.attach(metadata.name)
        needed = math.prod(shape) * dtype.itemsize
        if segment.size < needed:
            segment.close()
            raise GrainliteValueError(
                f"Shared-memory segment {metadata.name!r} holds {segment.size} bytes, but "
                f"metadata {metadata} needs {needed}; pass the metadata of the array that "
                f"created the segment (array.metadata)."
            )
        return cls._wrap(segment, shape, dtype, unlink=False)

    def _whole(self) -> Segment:
        """This array's segment, if the array starts at the segment's start and is C-contiguous
        (so shape and dtype describe it); else a clear error."""
        segment = self._segment
        if segment is None:
            raise GrainliteValueError(
                "This SharedMemoryArray is a copy in ordinary memory (made by .copy() or a numpy "
                "function), not in shared memory, so it has no segment to describe; create a "
                "SharedMemoryArray(shape, dtype) and assign into it."
            )
        if self.__array_interface__["data"][0] != self._start or not self.flags.c_contiguous:
            raise GrainliteValueError(
                f"This SharedMemoryArray of shape {self.shape} is a view into part of segment "
                f"{segment.name!r}, which metadata cannot describe (it names the whole segment "
                f"from its start); take .metadata of the array the segment was created with, or "
                f"copy the view into a new SharedMemoryArray."
            )
        return segment

    @property
    def metadata(self) -> SharedMemoryArrayMetadata:
        """The segment name, shape and dtype; another process attaches with ``from_metadata``.

        Taking it hands the name out: this array then no longer removes the segment when it is
        collected; the receiver does (``close_and_unlink_shm`` or ``unlink_on_del``).
        """
        segment = self._whole()
        self._hand_out()
        return SharedMemoryArrayMetadata(segment.name, self.shape, self.dtype)

    def _hand_out(self) -> None:
        # Whichever array owns the removal (this one, or the one this is a view of) gives it up.
        array: Any = self
        while isinstance(array, SharedMemoryArray):
            if array._ownership is not None:
                array._ownership.unlink = False
                return
            array = array.base

    def unlink_on_del(self) -> None:
        """Makes this array remove the segment name when it is garbage-collected."""
        if self._ownership is None:
            raise GrainliteValueError(
                "unlink_on_del() must be called on the SharedMemoryArray that created or attached "
                "the segment, not on a view of it; call it on that array."
            )
        self._ownership.unlink = True

    @classmethod
    def enable_async_del(cls, num_threads: int = 1, max_outstanding_requests: int = 50) -> None:
        """Removes segment names of collected arrays in ``num_threads`` background threads.

        At most ``max_outstanding_requests`` removals wait at a time; past that, a removal runs
        in the collecting thread. Applies to every SharedMemoryArray of this process.
        """
        _check_positive("num_threads", num_threads)
        _check_positive("max_outstanding_requests", max_outstanding_requests)
        with _AsyncDel.lock:
            if _AsyncDel.pool is not None:
                return
            from concurrent.futures import ThreadPoolExecutor

            _AsyncDel.pool = ThreadPoolExecutor(num_threads, thread_name_prefix="grainlite-shm")
            _AsyncDel.slots = threading.BoundedSemaphore(max_outstanding_requests)

    @classmethod
    def _disable_async_del(cls) -> None:
        """Waits for pending removals and goes back to removing in the collecting thread."""
        with _AsyncDel.lock:
            pool, _AsyncDel.pool, _AsyncDel.slots = _AsyncDel.pool, None, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __reduce_ex__(self, protocol: Any) -> Any:
        try:
            segment = self._whole()
        except GrainliteValueError:  # a partial view or a copy: send the values themselves
            return np.array(self, copy=True).view(np.ndarray).__reduce_ex__(protocol)
        self._hand_out()
        return _attach_pickled, (SharedMemoryArrayMetadata(segment.name, self.shape, self.dtype),)


def _as_shape(shape: Any) -> tuple[int, ...]:
    try:
        dims = (shape,) if not isinstance(shape, Iterable) else tuple(shape)
        result = tuple(operator.index(dim) for dim in dims)
    except TypeError:
        raise GrainliteTypeError(
            f"SharedMemoryArray shape must be an int or a sequence of ints (got {shape!r}); "
            f"pass e.g. (2, 3)."
        ) from None
    if any(dim < 0 for dim in result):
        raise GrainliteValueError(
            f"SharedMemoryArray shape must not have negative sizes (got {result}); pass sizes >= 0."
        )
    return result
