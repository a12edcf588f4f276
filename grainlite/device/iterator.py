"""``grainlite.device_put(iterator)``: batches already on the accelerator when the step asks.

A :class:`DeviceIterator` wraps a host iterator (a ``DataLoader`` iterator or a Dataset-API
iterator). One thread reads ``prefetch`` batches ahead, copies each to its device or sharding and
runs the device transforms there; ``next()`` hands out the oldest one.

Checkpoint truth: ``get_state()`` is the position after the last batch ``next()`` *returned*,
never after the batches waiting in the queue, together with the count of batches returned (the
index that keys the device transforms' randomness). Its type follows the host iterator's: JSON
bytes for a ``DataLoader`` iterator, a dict for a Dataset-API iterator, so Orbax's
``GrainCheckpointSave`` / ``GrainCheckpointRestore`` take the device iterator as they take the
host one.

Ownership: the device iterator owns the thread, the queue and the host iterator. ``close()`` (also
``with`` exit, an exception leaving the ``with``, and garbage collection through
``weakref.finalize``) stops the thread, drops the queued batches and closes the host iterator. No
handler runs when the interpreter is killed; the host iterator's own backstops cover its workers.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from grainlite.checks import int_option
from grainlite.device import state as device_state
from grainlite.engine.producer import End, Item, Producer, value_of
from grainlite.errors import GrainliteTypeError, LoaderClosedError
from grainlite.stats.tracing import span


def check_depth(name: str, value: Any) -> int:
    """``value`` as a queue depth: an int >= 0.

    Raises:
      GrainliteValueError: it is negative (a ValueError, as Grain raises for its buffer sizes).
      GrainliteTypeError: it is not an int.
    """
    return int_option(
        value,
        0,
        wrong_type=f"{name} must be an int >= 0 (got {{value}} of type {{type}}); pass the "
        f"number of batches to keep ready, e.g. {name}=2.",
        too_small=f"{name} must be >= 0 (got {{value}}); pass 0 to copy each batch when it is "
        f"asked for, or N >= 1 to keep N batches ready.",
    )


def start_reading(
    source: Any, place: Callable[[Any, int], Any], depth: int, first_index: int, name: str
) -> Producer:
    """A :class:`~grainlite.engine.producer.Producer` that reads ``source`` ahead on one thread.

    Each step takes the next host element, reads the source's ``get_state()`` (the position
    *after* that element) and runs ``place(element, index)`` (the host-to-device copy and the
    device transforms, which JAX dispatches asynchronously), the index counted from
    ``first_index``. The consumer takes the items in order, so the state that comes with the item
    it hands to the user is exactly the position after the last batch the user received, however
    many batches wait in the queue. After an error the item's state is the source's then (None if
    it cannot say); at the end, the source's final state. ``depth`` 0 works as 1.
    """
    index = first_index

    def step() -> tuple[Any, Any]:
        nonlocal index
        element = next(source)
        state = source.get_state()
        value = place(element, index)
        index += 1
        return value, state

    return Producer(step, depth, name, final_state=source.get_state, error_state=source.get_state)


def close_if_closable(source: Any) -> None:
    """Calls ``source.close()`` if the source has one (a plain iterator may not)."""
    close = getattr(source, "close", None)
    if callable(close):
        close()


class _Engine:
    """What the finalizer needs: the host iterator and the running prefetcher (no ``self``)."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.prefetcher: Producer | None = None

    def stop(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.stop()
            self.prefetcher = None

    def close(self) -> None:
        prefetcher, self.prefetcher = self.prefetcher, None
        if prefetcher is not None:
            prefetcher.stop(then=lambda: close_if_closable(self.host))  # after the thread left it
        else:
            close_if_closable(self.host)


class DeviceIterator(Iterator[Any]):
    """Iterates placed batches (pytrees of ``jax.Array``) of a host iterator; see the module doc.

    Made by :func:`grainlite.device_put`.
    """

    def __init__(
        self,
        host: Any,
        place: Callable[[Any, int], Any],
        prefetch: int,
    ) -> None:
        for method in ("get_state", "set_state"):
            if not callable(getattr(host, method, None)):
                raise GrainliteTypeError(
                    f"device_put needs an iterator with get_state() and set_state() (a "
                    f"DataLoader or Dataset iterator), got {type(host).__name__}, which has no "
                    f"{method}(); pass iter(loader) or the loader itself."
                )
        self._engine = _Engine(host)
        self._place = place
        self._depth = prefetch
        self._bytes_state = isinstance(host.get_state(), bytes | bytearray)
        self._host_state = host.get_state()
        self._received = 0
        self._ended = False
        self._closed = False
        self._finalizer = weakref.finalize(self, self._engine.close)

    def _start(self) -> Producer:
        prefetcher = self._engine.prefetcher
        if prefetcher is None:
            prefetcher = self._engine.prefetcher = start_reading(
                self._engine.host,
                self._place,
                self._depth,
                self._received,
                name=f"grainlite-device-put-{id(self):x}",
            )
        return prefetcher

    def start_prefetch(self) -> None:
        """Starts reading ahead before the first ``next()`` (Orbax's restore calls it)."""
        if not self._closed and not self._ended and self._depth > 0:
            self._start()

    def __iter__(self) -> DeviceIterator:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise LoaderClosedError(
                "This device iterator was closed; call grainlite.device_put(loader) for a new "
                "one, or set_state(state) to reopen this one at a saved position."
            )
        if self._ended:
            raise StopIteration
        if self._depth == 0:
            return self._next_now()
        item = self._start().get()
        if not isinstance(item, Item):
            self._engine.stop()  # the thread ended after sending this item
            self._ended = isinstance(item, End)
        if item.state is not None:
            self._host_state = item.state
        value = value_of(item)
        self._received += 1
        return value

    def _next_now(self) -> Any:
        """``prefetch=0``: read, place and hand out in the caller's thread."""
        host = self._engine.host
        try:
            element = next(host)
        except StopIteration:
            self._ended = True
            raise
        finally:
            self._host_state = host.get_state()
        value = self._place(element, self._received)
        self._received += 1
        return value

    def get_state(self) -> Any:
        """The position after the last batch returned, and the count of batches returned.

        JSON bytes when the host iterator's state is bytes (a ``DataLoader`` iterator), a dict
        otherwise: ``{"host_state": <the host iterator's state>, "batches_received": N}``.
        """
        return device_state.encode(self._host_state, self._received)

    def set_state(self, state: Any) -> None:
        """Moves to a state from :meth:`get_state` (as bytes, text or dict); drops queued batches.

        Raises:
          GrainliteValueError: ``state`` is not a device iterator's state (for example, the bare
            state of a host iterator).
        """
        host_state, received = device_state.decode(state, self._bytes_state)
        self._engine.stop()
        self._engine.host.set_state(host_state)
        self._host_state = self._engine.host.get_state()
        self._received = received
        self._ended = False
        if self._closed:  # a restore reopens it, as it reopens a closed DataLoader iterator
            self._closed = False
            self._finalizer = weakref.finalize(self, self._engine.close)

    def close(self) -> None:
        """Stops the thread, drops the queued batches and closes the host iterator. Idempotent."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> DeviceIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __str__(self) -> str:
        return f"DeviceIterator(host={self._engine.host}, prefetch={self._depth})"


def device_put(
    iterator: Iterable[Any],
    *,
    sharding: Any = None,
    prefetch: int = 2,
    transforms: Sequence[Callable[..., Any]] = (),
    seed: int | None = None,
) -> DeviceIterator:
    """Batches of ``iterator`` as ``jax.Array`` pytrees already placed, ``prefetch`` batches ahead.

    Args:
      iterator: a ``DataLoader`` iterator, a Dataset-API iterator, or a loader / dataset (then
        ``iter()`` of it is taken and owned).
      sharding: None (JAX's default device), a ``jax.Device``, or a ``jax.sharding.Sharding``
        such as :func:`grainlite.device.batch_sharding`; a sharding spanning several processes
        assembles the global batch from each process's local one.
      prefetch: batches kept ready on the device (0: each is copied when asked for).
      transforms: functions applied on the device, in order, jitted together: ``f(batch)`` or
        ``f(batch, key)`` with a key derived from ``seed`` and the batch's index in the stream.
      seed: the transforms' seed; None takes the loader's sampler seed (0 if it has none).

    Returns:
      A :class:`DeviceIterator`; close it (or use ``with``) to release its thread and loader.

    Raises:
      GrainliteTypeError: ``sharding``, ``prefetch`` or ``transforms`` has the wrong type, or the
        iterator has no ``get_state`` / ``set_state``.
      GrainliteValueError: ``prefetch`` is negative.
      MissingExtraError: JAX is not installed.
    """
    from grainlite._optional import require
    from grainlite.device import placement
    from grainlite.device import transforms as device_transforms

    require("jax", "jax", "grainlite.device_put")
    depth = check_depth("prefetch", prefetch)
    to_device = placement.make_placer(sharding)
    host: Any = iterator if hasattr(iterator, "__next__") else iter(iterator)
    try:
        apply = None
        if isinstance(transforms, str) or not isinstance(transforms, Sequence) or transforms:
            chosen = device_transforms.loader_seed(host) if seed is None else int(seed)
            apply = device_transforms.compose(transforms, chosen)

        def place(batch: Any, index: int) -> Any:
            with span("grainlite device_put", index=index):  # while a jax.profiler trace records
                placed = to_device(batch)
                return placed if apply is None else apply(placed, index)

        return DeviceIterator(host, place, depth)
    except BaseException:
        if host is not iterator and callable(getattr(host, "close", None)):
            host.close()  # made here: not left for the garbage collector
        raise
