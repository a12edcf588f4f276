"""What a data source is, how it appears in a checkpoint, and how to read many records at once.

A data source is anything with ``len()`` and ``source[key]`` (Grain's ``RandomAccessDataSource``).
Sources that can read a whole batch of keys in one call cheaper than one by one add
``__getitems__(keys) -> list``; :func:`read_many` picks that path when it exists, so the loader
never has to ask.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, SupportsIndex, TypeVar, runtime_checkable

import numpy as np

from grainlite.errors import RecordKeyOutOfRangeError

T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class RandomAccessDataSource(Protocol[T_co]):
    """A finite, indexable collection of records, as Grain's DataLoader expects.

    ``__getitem__`` must be deterministic and thread-safe (reader threads call it concurrently). To
    be checkpointable the source needs a stable ``__repr__`` (it is stored in the checkpoint and
    compared on restore); to be used with worker processes it must pickle with cloudpickle.
    """

    def __len__(self) -> int:
        """The number of records; valid keys are ``0 <= key < len(source)``."""
        ...

    def __getitem__(self, key: SupportsIndex, /) -> T_co:
        """The record stored under ``key``."""
        ...


def int64_keys(keys: Any) -> np.ndarray | None:
    """``keys`` as a flat int64 array for a vectorized read, or None if they are not all plain
    integers that fit (the caller then reads key by key, which names the first bad key)."""
    array = np.asarray(keys).reshape(-1)
    if array.size and (
        array.dtype.kind not in "biu" or (array.dtype.kind == "u" and array.max() >= 2**63)
    ):
        return None
    return array.astype(np.int64, copy=False)


def key_out_of_range(source: str, key: int, length: int) -> RecordKeyOutOfRangeError:
    """The error for ``key`` outside ``[0, length)`` of the source named ``source``.

    It starts with Grain's words and adds the valid range and the fix: the wrapped key, which is
    what the DataLoader reads for a sampler key past the end.
    """
    if length == 0:
        return RecordKeyOutOfRangeError(
            f"Index {key} out of range for 0: this {source} is empty and has no keys; read a "
            "source with at least one record."
        )
    return RecordKeyOutOfRangeError(
        f"Index {key} out of range for {length}: {source} keys must be in [0, {length}); read a "
        f"key in that range, e.g. key % len(source) (here {key % length}), which is how the "
        "DataLoader wraps sampler keys."
    )


def source_repr(source: Any) -> str:
    """The text that identifies ``source`` in checkpoint JSON (the ``data_source`` field).

    Lists, tuples and numpy arrays give their type (``"<class 'list'>"``) so that the data itself
    never ends up in the checkpoint; any other source gives its ``repr``, which must therefore be
    stable across runs. This is the rule Grain follows, so checkpoints interoperate.
    """
    if isinstance(source, (list, tuple, np.ndarray)):
        return str(type(source))
    return repr(source)


def read_many(source: Any) -> Callable[[Sequence[int]], list[Any]]:
    """The fastest way to read a batch of keys from ``source``: ``read(keys) -> list``.

    It is the source's own ``__getitems__`` where it has one (ArrayRecord, in-memory and range
    sources read a batch far cheaper than key by key), else one ``source[key]`` per key. Look it
    up once per source and call it per batch.

    Args:
      source: any random-access data source.

    Returns:
      A function taking a sequence of int keys and returning the records in the same order.
    """
    getitems = getattr(source, "__getitems__", None)
    if getitems is not None:

        def read_batched(keys: Sequence[int]) -> list[Any]:
            return list(getitems(keys))

        return read_batched
    getitem = source.__getitem__

    def read_one_by_one(keys: Sequence[int]) -> list[Any]:
        return [getitem(key) for key in keys]

    return read_one_by_one
