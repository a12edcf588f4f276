"""What a data source is, how it appears in a checkpoint, and how to read many records at once.

A data source is anything with ``len()`` and ``source[key]`` (Grain's ``RandomAccessDataSource``).
Sources that can read a whole batch of keys in one call cheaper than one by one add
``__getitems__(keys) -> list``; :func:`read_many`, the one block read of the DataLoader and the
Dataset API, picks that path when it exists and names the record key a read fails on.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol, SupportsIndex, TypeVar, runtime_checkable

import numpy as np

from grainlite.errors import CorruptedDataError, RecordKeyOutOfRangeError

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


def source_aliases(source: Any) -> tuple[str, ...]:
    """Other ``data_source`` texts a checkpoint may hold and still restore onto ``source``: what
    its ``checkpoint_aliases()`` returns (an entry ending in ``*`` matches texts that start with
    the rest), else none. ArrayRecord files read from a bucket and from local copies accept each
    other's states this way."""
    aliases = getattr(source, "checkpoint_aliases", None)
    return tuple(aliases()) if callable(aliases) else ()


def source_matches(saved: str, current: str, aliases: tuple[str, ...]) -> bool:
    """Whether a checkpoint's ``data_source`` text ``saved`` fits a source whose repr is
    ``current`` and whose aliases (:func:`source_aliases`) are ``aliases``."""
    if saved == current:
        return True
    if not isinstance(saved, str):
        return False
    return any(
        saved.startswith(alias[:-1]) if alias.endswith("*") else saved == alias for alias in aliases
    )


def read_many(source: Any) -> Callable[[list[int]], list[Any]]:
    """The block read of both APIs: ``read(keys) -> list`` of the records, in the keys' order.

    It is the source's own ``__getitems__`` where it has one (ArrayRecord, in-memory and range
    sources read a batch far cheaper than key by key), else one ``source[key]`` per key. Look it
    up once per source and call it per block. An error of the source gets a note naming the
    record key it failed on (``record keys a..b`` where a batched read failed), and for an
    ``IndexError`` the source's ``len()`` and the fix; a file of the source that does not exist
    becomes a :class:`~grainlite.errors.CorruptedDataError` naming it (see :func:`_named`).

    Args:
      source: any random-access data source.

    Returns:
      A function taking a list of int keys and returning the records in the same order.
    """
    getitems = getattr(source, "__getitems__", None)
    getitem = source.__getitem__
    if getitems is not None:

        def read_batched(keys: list[int]) -> list[Any]:
            try:
                return list(getitems(keys))
            except Exception as error:
                raise _named(error, source, keys) from None

        return read_batched

    def read_one_by_one(keys: list[int]) -> list[Any]:
        try:
            return list(map(getitem, keys))
        except Exception:
            pass
        data = []  # again one by one, to name the record that fails
        for key in keys:
            try:
                data.append(getitem(key))
            except Exception as error:
                raise _named(error, source, [key]) from None
        return data

    return read_one_by_one


# array_record's error when a file of the source is gone (e.g. a TFDS shard deleted or not copied).
_MISSING_FILE = re.compile(r"open\(\) failed: No such file or directory; opening (\S+)")


def _named(error: Exception, source: Any, keys: list[int]) -> Exception:
    """``error`` with a note naming the record(s) the source failed on and the usual fix.

    A file of the source that does not exist becomes a CorruptedDataError (a RuntimeError, as
    array_record raises) naming the file, the first record in it and what to do.
    """
    missing = _MISSING_FILE.search(str(error)) if isinstance(error, RuntimeError) else None
    if missing and len(keys) > 1:  # a block failed: name its first record in the missing file
        for key in keys:
            try:
                source[key]
            except RuntimeError:
                keys = [key]
                break
    what = f"record key {keys[0]}" if len(keys) == 1 else f"record keys {keys[0]}..{keys[-1]}"
    note = f"grainlite: the data source {type(source).__name__} failed reading {what}"
    if missing:
        return CorruptedDataError(
            f"The data source {type(source).__name__} failed reading {what}: its file "
            f"{missing[1]!r} does not exist ({error}). A dataset copied or "
            f"prepared only in part lacks files: copy it again, or rebuild it (TFDS: delete its "
            f"version folder and run download_and_prepare again)."
        )
    if isinstance(error, IndexError):
        note += (
            f"; its len() is {len(source)}: if __getitem__ serves fewer records, fix __len__ (the "
            f"sampler reads keys 0..len-1)"
        )
    error.add_note(note + ".")
    return error
