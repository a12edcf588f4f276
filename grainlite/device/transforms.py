"""Batch transforms that run on the device, each batch with its own deterministic random key.

A transform is a function of the batch (``normalize(batch) -> batch``) or of the batch and a
key (``flip(batch, key) -> batch``); which one is read from its signature (two or more positional
parameters: it gets a key). All of them are composed into one function and jitted once, so
uint8 batches cross the bus and the floats are made on the accelerator.

The key of batch ``i`` is ``fold_in(fold_in(key(seed), i), t)`` for the transform at position
``t``: it depends only on the seed and the batch's index in the stream, never on timing, the
prefetch depth or how often the iterator was restored, so a run and a restored run transform
every batch identically.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from grainlite.errors import GrainliteTypeError, GrainliteValueError


def takes_key(transform: Callable[..., Any]) -> bool:
    """True when ``transform`` has two or more positional parameters (batch and key).

    Raises:
      GrainliteTypeError: ``transform`` is not callable.
      GrainliteValueError: its signature cannot be read (a builtin); wrap it in a ``def``.
    """
    if not callable(transform):
        raise GrainliteTypeError(
            f"device_put(transforms=...) must be a sequence of functions, got an element "
            f"{type(transform).__name__} {transform!r:.60}; pass functions batch -> batch or "
            f"(batch, key) -> batch."
        )
    try:
        parameters = inspect.signature(transform).parameters.values()
    except (TypeError, ValueError):
        raise GrainliteValueError(
            f"device_put cannot read the signature of the transform {transform!r:.60}, so it "
            f"cannot tell whether it takes a random key; wrap it: lambda batch: f(batch), or "
            f"lambda batch, key: f(batch, key)."
        ) from None
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in parameters)


def loader_seed(iterator: Any) -> int:
    """The seed of the loader behind ``iterator`` (its sampler's), or 0 when it has none."""
    loader = getattr(iterator, "_loader", None)
    seed = getattr(getattr(loader, "_sampler", None), "seed", None)
    return int(seed) if isinstance(seed, int) else 0


def _host_entries(batch: Any) -> dict[Any, Any]:
    """The entries of a dict batch that hold a value not on a device (none for other batches).

    Raises:
      GrainliteTypeError: a batch that is not a dict holds such a value.
    """
    import jax

    def on_host(tree: Any) -> bool:
        return any(not isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(tree))

    if isinstance(batch, dict):
        return {key: value for key, value in batch.items() if on_host(value)}
    if on_host(batch):
        raise GrainliteTypeError(
            "device_put(transforms=...) runs jitted functions, which take only arrays, but this "
            "batch holds a value that stays on the host (a string, say); make the batch a dict "
            "(its host entries are set aside around the transforms) or drop the value."
        )
    return {}


@functools.lru_cache(maxsize=64)
def _jitted(steps: tuple[Callable[..., Any], ...], with_key: tuple[bool, ...]) -> Any:
    """The jitted composition of ``steps``; cached, so a new iterator over the same functions (a
    restore, the next epoch) reuses the compiled program. The seed and index are arguments."""
    import jax

    @jax.jit
    def apply(batch: Any, base: Any, index: Any) -> Any:
        batch_key = jax.random.fold_in(base, index)
        for position, (step, keyed) in enumerate(zip(steps, with_key)):
            batch = step(batch, jax.random.fold_in(batch_key, position)) if keyed else step(batch)
        return batch

    return apply


def compose(transforms: Sequence[Callable[..., Any]], seed: int) -> Callable[[Any, int], Any]:
    """One jitted ``apply(batch, index) -> batch`` running ``transforms`` in order on the device.

    Raises:
      GrainliteTypeError: ``transforms`` is not a sequence of functions.
    """
    import jax
    import numpy as np

    if isinstance(transforms, str) or not isinstance(transforms, Sequence):
        raise GrainliteTypeError(
            f"device_put(transforms=...) must be a list of functions, got "
            f"{type(transforms).__name__}; pass e.g. transforms=[normalize, random_flip]."
        )
    with_key = tuple(takes_key(t) for t in transforms)
    try:
        apply = _jitted(tuple(transforms), with_key)
    except TypeError:  # an unhashable callable: compiled for this iterator alone
        apply = _jitted.__wrapped__(tuple(transforms), with_key)
    base = jax.random.key(seed)

    def run(batch: Any, index: int) -> Any:
        # Values that stayed on the host (strings, ...) cannot enter a jitted function: the
        # entries of a dict batch holding them are set aside and put back afterwards.
        aside = _host_entries(batch)
        if aside:
            batch = {key: value for key, value in batch.items() if key not in aside}
        # The index goes in as a uint32 array: one compiled program for every batch.
        out = apply(batch, base, np.uint32(index % 2**32))
        return {**out, **aside} if aside and isinstance(out, dict) else out

    return run
