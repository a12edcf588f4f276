"""Feeding the accelerator: batches placed on devices before the training step asks for them.

:func:`device_put` wraps a loader's iterator: a thread reads ahead, copies each batch to a device
or a sharding over a mesh (assembling the global batch across processes) and runs jitted batch
transforms there. :func:`batch_sharding` makes the usual sharding: the batch axis split over a
mesh axis. Grain's Dataset-API spelling, ``grain.experimental.device_put``, is in
:mod:`grainlite.device.dataset`. Nothing here imports JAX until it is called.
"""

from grainlite.device.iterator import DeviceIterator, device_put
from grainlite.device.placement import batch_sharding

__all__ = ["DeviceIterator", "batch_sharding", "device_put"]
