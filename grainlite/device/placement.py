"""Where batches go: one device, or a sharding over a mesh, on one host or on several.

``sharding`` is what the user passes to :func:`grainlite.device_put`:

* ``None``: JAX's default device (the first accelerator, or the CPU);
* a ``jax.Device``: that device;
* a ``jax.sharding.Sharding`` (usually a ``NamedSharding`` whose spec splits the batch axis over
  the data-parallel devices). When it spans devices of other processes (several hosts), each
  process's loader holds only its own rows of the global batch, and the global array is assembled
  from them with ``jax.make_array_from_process_local_data``: a ``ShardByJaxProcess`` loader feeds a
  pjit'ed step directly.

JAX is imported by these functions, never when the module is imported.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grainlite.errors import GrainliteTypeError


def batch_sharding(mesh: Any = None, axis: str = "data") -> Any:
    """A ``NamedSharding`` that splits the first (batch) axis of every leaf over ``axis``.

    Args:
      mesh: a ``jax.sharding.Mesh``; None makes a one-axis mesh named ``axis`` over every device
        of every process (``jax.devices()``).
      axis: the mesh axis the batch is split over.
    """
    import jax

    if mesh is None:
        mesh = jax.sharding.Mesh(np.array(jax.devices()), (axis,))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis))


def resolve(sharding: Any) -> Any:
    """``sharding`` checked: None, a ``jax.Device`` or a ``jax.sharding.Sharding``.

    Raises:
      GrainliteTypeError: anything else.
    """
    import jax

    if sharding is None or isinstance(sharding, jax.Device | jax.sharding.Sharding):
        return sharding
    raise GrainliteTypeError(
        f"device_put(sharding=...) must be None, a jax.Device or a jax.sharding.Sharding, got "
        f"{type(sharding).__name__} {sharding!r:.80}; pass e.g. jax.devices()[0], or "
        f"grainlite.device.batch_sharding(mesh) to split the batch axis over a mesh."
    )


def _numeric(leaf: Any) -> bool:
    """True for what a device holds: JAX arrays and bool / numeric numpy arrays and scalars."""
    import jax

    if isinstance(leaf, jax.Array):
        return True
    dtype = leaf.dtype if isinstance(leaf, np.ndarray | np.generic) else np.asarray(leaf).dtype
    return dtype.kind in "biufc"


def make_placer(sharding: Any) -> Any:
    """A function ``place(batch) -> batch``: its numeric leaves as ``jax.Array``, placed.

    Leaves no device holds (strings, bytes, objects: file names, say) stay on the host as they
    are. The copy is asynchronous (JAX returns before the bytes arrive).
    """
    import jax

    sharding = resolve(sharding)
    across_processes = (
        isinstance(sharding, jax.sharding.Sharding) and not sharding.is_fully_addressable
    )

    def put(leaves: list[Any]) -> list[Any]:
        if across_processes:
            return [jax.make_array_from_process_local_data(sharding, leaf) for leaf in leaves]
        return list(jax.device_put(leaves, sharding))

    def place(batch: Any) -> Any:
        leaves, treedef = jax.tree.flatten(batch)
        chosen = [i for i, leaf in enumerate(leaves) if _numeric(leaf)]
        for i, placed in zip(chosen, put([leaves[i] for i in chosen])):
            leaves[i] = placed
        return jax.tree.unflatten(treedef, leaves)

    return place
