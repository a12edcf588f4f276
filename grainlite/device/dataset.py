"""``grain.experimental.device_put(ds, device, cpu_buffer_size=, device_buffer_size=)``.

Grain's spelling for the Dataset API: a new ``IterDataset`` whose iterators yield the elements of
``ds`` placed on ``device`` (anything ``jax.device_put`` takes: a device, a sharding, None). As in
Grain, a ``MapDataset`` is accepted and read in order, and an iterator's ``get_state()`` is the
parent iterator's state after the last element returned (``{"next_index": 2}`` for a ``range``):
the elements waiting in the buffer are not counted.

grainlite reads and places on one thread: the copy to the device is asynchronous, so the thread
keeps ``device_buffer_size`` placed elements ready (at least 1) and there is no separate host
buffer; ``cpu_buffer_size`` is validated as Grain validates it and otherwise unused.
"""

from __future__ import annotations

import weakref
from typing import Any

from grainlite.dataset.dataset_iterator import DatasetIterator
from grainlite.dataset.iter_dataset import IterDataset
from grainlite.dataset.map_dataset import MapDataset
from grainlite.device.iterator import check_depth, start_reading
from grainlite.engine.producer import End, Item, Producer, value_of
from grainlite.errors import GrainliteTypeError
from grainlite.stats.tracing import span


class DevicePutIterDataset(IterDataset):
    """The elements of ``parent`` as ``jax.Array`` pytrees on ``device``, read ahead on a thread.

    Args:
      parent: an ``IterDataset`` (or a ``MapDataset``, read in order).
      device: passed to ``jax.device_put``: a device, a sharding, or None.
      cpu_buffer_size: Grain's host buffer size; an int >= 0, unused (see the module doc).
      device_buffer_size: placed elements kept ready; an int >= 0 (0 works as 1).
    """

    def __init__(
        self,
        parent: IterDataset | MapDataset,
        device: Any,
        *,
        cpu_buffer_size: int = 4,
        device_buffer_size: int = 2,
    ) -> None:
        if isinstance(parent, MapDataset):
            parent = parent.to_iter_dataset()
        if not isinstance(parent, IterDataset):
            raise GrainliteTypeError(
                f"device_put needs an IterDataset or a MapDataset, got "
                f"{type(parent).__name__}; for a DataLoader iterator use "
                f"grainlite.device_put(iterator, sharding=...)."
            )
        super().__init__(parent)
        self._device = device
        check_depth("cpu_buffer_size", cpu_buffer_size)
        self._depth = check_depth("device_buffer_size", device_buffer_size)

    def __iter__(self) -> DevicePutDatasetIterator:
        return DevicePutDatasetIterator(iter(self._parent), self._device, self._depth)

    def __str__(self) -> str:
        return f"DevicePutIterDataset(device={self._device}, device_buffer_size={self._depth})"


class DevicePutDatasetIterator(DatasetIterator):
    """An iterator of :class:`DevicePutIterDataset`; ``close()`` ends its thread and parent."""

    def __init__(self, parent: DatasetIterator, device: Any, depth: int) -> None:
        super().__init__(parent)
        import jax

        self._device = device
        self._depth = depth
        self._state = parent.get_state()
        self._holder: list[Producer] = []
        self._ended = False
        self._finalizer = weakref.finalize(self, _stop_all, self._holder)

        def place(element: Any, index: int) -> Any:
            with span("grainlite device_put", index=index):  # while a jax.profiler trace records
                return jax.device_put(element, device)

        self._place = place

    def _prefetcher(self) -> Producer:
        if not self._holder:
            self._holder.append(
                start_reading(
                    self._parent, self._place, self._depth, 0, f"grainlite-device-put-{id(self):x}"
                )
            )
        return self._holder[0]

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        item = self._prefetcher().get()
        if not isinstance(item, Item):
            _stop_all(self._holder)
            self._ended = isinstance(item, End)
        if item.state is not None:
            self._state = item.state
        return value_of(item)

    def get_state(self) -> dict[str, Any]:
        """The parent's state after the last element returned."""
        return self._state  # type: ignore[no-any-return]

    def set_state(self, state: dict[str, Any]) -> None:
        """Drops the buffered elements and moves the parent to ``state``."""
        _stop_all(self._holder)
        self._parent.set_state(state)
        self._state = self._parent.get_state()
        self._ended = False

    def close(self) -> None:
        """Stops the thread, drops the buffer and closes the parent. Idempotent."""
        _stop_all(self._holder)
        super().close()

    def __str__(self) -> str:
        return f"DevicePutDatasetIterator(device={self._device})"


def _stop_all(holder: list[Producer]) -> None:
    while holder:
        holder.pop().stop()


def device_put(
    ds: IterDataset | MapDataset,
    device: Any,
    *,
    cpu_buffer_size: int = 4,
    device_buffer_size: int = 2,
) -> IterDataset:
    """Grain's ``grain.experimental.device_put``: ``ds``'s elements placed on ``device``.

    Args:
      ds: the dataset (an ``IterDataset``, or a ``MapDataset`` read in order).
      device: what ``jax.device_put`` takes: a device, a sharding, or None.
      cpu_buffer_size: validated (an int >= 0) as Grain does; unused here (see the module doc).
      device_buffer_size: placed elements kept ready on the device.

    Returns:
      A :class:`DevicePutIterDataset`.

    Raises:
      GrainliteValueError: a buffer size is negative (a ValueError, as in Grain).
      MissingExtraError: JAX is not installed.
    """
    from grainlite._optional import require

    require("jax", "jax", "grain.experimental.device_put")
    return DevicePutIterDataset(
        ds, device, cpu_buffer_size=cpu_buffer_size, device_buffer_size=device_buffer_size
    )
