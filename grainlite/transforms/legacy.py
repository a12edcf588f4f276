"""Grain's deprecated ``*Operation`` classes, run by the loader as ordinary transform stages.

Old Grain code passes ``MapOperation(fn)``, ``RandomMapOperation(fn)``, ``FilterOperation(fn)`` and
``BatchOperation(n)`` to ``DataLoader(operations=...)``. Each behaves as the transform of the same
kind (:func:`~grainlite.transforms.base.classify` says "map", "random_map", "filter" or "batch"),
so the loader needs no second pipeline, and Grain's observable behaviour is kept:

* the same elements in the same order and the same checkpoint states as Grain 0.2.18;
* an exception inside the user's function is reported as a ``ValueError`` whose ``__cause__`` is
  the original (Grain's type, so ``except ValueError`` still catches it); like any transform
  error, it takes the element's place in the stream and the next ``next()`` goes on;
* an exact ``BatchOperation`` is a ``Batch`` (shared memory at the end of a worker pipeline
  included), except that elements of different structures raise ``TypeError``, as Grain's does;
* each operation object logs one error-level deprecation message on the ``grainlite`` logger
  when a DataLoader first takes it (Grain logs it through absl each time the operation is
  applied); an exact ``BatchOperation`` logs nothing, since Grain silently turns it into ``Batch``.

Grain's ``Operation`` is the protocol behind them: a callable from an iterator of records to an
iterator of records. The rule for one you write yourself: an instance of a subclass of
``Operation`` (grainlite's or Grain's), or of one of the four classes with its own ``__call__``,
is a custom operation. Each process running the pipeline calls it with an iterator of
:class:`~grainlite.Record` and reads the records it yields
(:class:`~grainlite.transforms.custom_operation.OperationRunner`), with
Grain's semantics: each output carries the checkpoint state after the last record the operation
took (so, as in Grain, records an operation holds back are not in a checkpoint), and its own
exceptions keep their type. grainlite differs in three places: an exception takes one element's
place and the next record starts the operation afresh (Grain's iterator ends); ``record.metadata``
carries the rng but ``index`` and ``record_key`` are None; and yielding something other than a
Record is a TypeError naming it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from grainlite.errors import GrainliteTypeError, GrainliteValueError, shown
from grainlite.sampling.records import Record
from grainlite.transforms.batch import (
    MAX_LISTED_POSITIONS,
    Allocator,
    make_batch,
    structure_outliers,
    validate_batch_size,
)
from grainlite.tree import StructureMismatch

_IN = TypeVar("_IN")
_OUT = TypeVar("_OUT")
_LOGGER = logging.getLogger("grainlite")
_LOGGED = "_grainlite_deprecation_logged"  # set on an operation once its message was logged


class Operation(Protocol):
    """Grain's legacy operation protocol: ``op(iterator of Records) -> iterator of Records``.

    As in Grain, this is a ``typing.Protocol`` that is not runtime-checkable, so
    ``isinstance(x, Operation)`` raises TypeError. grainlite's DataLoader accepts the four
    operations of this module, not other implementations of the protocol.
    """

    def __call__(self, input_iterator: Iterator[Any]) -> Iterator[Any]:
        """Returns the records that replace those of ``input_iterator``."""
        ...


def _function_name(function: Any) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def _failure(operation: Any, field: str, function: Any, error: Exception) -> GrainliteValueError:
    kind = type(operation).__name__
    return GrainliteValueError(
        f"{kind}'s {field} {_function_name(function)} raised {type(error).__name__}: {error}. "
        f"Like Grain, a legacy operation reports a failing function as ValueError with the "
        f"original exception as __cause__; fix the function, or catch ValueError around next()."
    )


def _check_callable(operation: str, field: str, function: Any) -> None:
    if not callable(function):
        raise GrainliteTypeError(
            f"{operation} {field} must be callable, got {function!r} of type "
            f"{type(function).__name__}; pass a function, e.g. {operation}(lambda x: x)."
        )


def _apply_to_records(
    records: Iterator[Record], transform: Callable[[Any, Any], Any], keep: bool = False
) -> Iterator[Record]:
    # For calling an operation on records directly, as Grain code may do outside a DataLoader.
    for record in records:
        metadata = record.metadata.remove_record_key()
        result = transform(record.data, metadata.rng)
        if not keep:
            yield Record(metadata, result)
        elif result:
            yield Record(metadata, record.data)


@dataclasses.dataclass
class MapOperation(Generic[_IN, _OUT]):
    """Deprecated: use :class:`~grainlite.MapTransform`. Replaces each element by
    ``map_function(element)``.

    Attributes:
      map_function: called with each element; its result is the new element.
    """

    map_function: Callable[[_IN], _OUT]

    def __post_init__(self) -> None:
        _check_callable("MapOperation", "map_function", self.map_function)

    def map(self, element: Any) -> Any:
        """``map_function(element)``; an exception becomes a ValueError chaining it."""
        try:
            return self.map_function(element)
        except Exception as error:
            raise _failure(self, "map_function", self.map_function, error) from error

    def __call__(self, input_iterator: Iterator[Any]) -> Iterator[Any]:
        """Applies the operation to records directly (what Grain's loader did with it)."""
        return _apply_to_records(input_iterator, lambda data, _: self.map(data))


@dataclasses.dataclass
class RandomMapOperation(Generic[_IN, _OUT]):
    """Deprecated: use :class:`~grainlite.RandomMapTransform`. Replaces each element by
    ``random_map_function(element, rng)``.

    ``rng`` is the record's generator (``Philox(key=seed + index)``), or None when the sampler has
    no seed, exactly as a RandomMapTransform receives it.

    Attributes:
      random_map_function: called with each element and its generator.
    """

    random_map_function: Callable[[_IN, np.random.Generator | None], _OUT]

    def __post_init__(self) -> None:
        _check_callable("RandomMapOperation", "random_map_function", self.random_map_function)

    def random_map(self, element: Any, rng: np.random.Generator | None) -> Any:
        """``random_map_function(element, rng)``; an exception becomes a ValueError chaining it."""
        try:
            return self.random_map_function(element, rng)
        except Exception as error:
            raise _failure(self, "random_map_function", self.random_map_function, error) from error

    def __call__(self, input_iterator: Iterator[Any]) -> Iterator[Any]:
        """Applies the operation to records directly (what Grain's loader did with it)."""
        return _apply_to_records(input_iterator, self.random_map)


@dataclasses.dataclass
class FilterOperation(Generic[_IN]):
    """Deprecated: use :class:`~grainlite.FilterTransform`. Keeps the elements for which
    ``condition_function(element)`` is true.

    Attributes:
      condition_function: called with each element; a false result drops it.
    """

    condition_function: Callable[[_IN], bool]

    def __post_init__(self) -> None:
        _check_callable("FilterOperation", "condition_function", self.condition_function)

    def filter(self, element: Any) -> bool:
        """``condition_function(element)``; an exception becomes a ValueError chaining it."""
        try:
            return bool(self.condition_function(element))
        except Exception as error:
            raise _failure(self, "condition_function", self.condition_function, error) from error

    def __call__(self, input_iterator: Iterator[Any]) -> Iterator[Any]:
        """Applies the operation to records directly (what Grain's loader did with it)."""
        return _apply_to_records(input_iterator, lambda data, _: self.filter(data), keep=True)


@dataclasses.dataclass
class BatchOperation(Generic[_IN, _OUT]):
    """Deprecated: use :class:`~grainlite.Batch`. Combines ``batch_size`` consecutive elements.

    The loader runs it as a ``Batch`` with the same fields: one worker's elements per batch, the
    last partial batch kept unless ``drop_remainder``, and written straight into shared memory
    when it is the last operation of a worker pipeline with the default ``batch_fn``. Unlike
    ``Batch``, elements of different structures raise ``TypeError`` (Grain's type for this
    class) whose message starts with Grain's "Record structures do not match. ...".

    Attributes:
      batch_size: elements per batch; a positive int.
      drop_remainder: whether the last, smaller batch of each worker is dropped.
      batch_fn: turns the list of elements into the batch; None stacks every leaf along a new
        first axis (:func:`~grainlite.transforms.batch.make_batch`).

    Raises:
      GrainliteValueError: ``batch_size`` is not positive (Grain raises ValueError here too).
      GrainliteTypeError: ``batch_size`` is not an int, or ``batch_fn`` is not callable.
    """

    batch_size: int
    drop_remainder: bool = False
    batch_fn: Callable[[Sequence[_IN]], _OUT] | None = None

    def __post_init__(self) -> None:
        self.batch_size = validate_batch_size(self.batch_size)
        if self.batch_fn is not None:
            _check_callable("BatchOperation", "batch_fn", self.batch_fn)

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]:
        """Batches records directly (what Grain's loader did with it)."""
        batch: list[Record] = []
        for record in input_iterator:
            batch.append(record)
            if len(batch) == self.batch_size:
                yield self._combine(batch)
                batch = []
        if batch and not self.drop_remainder:
            yield self._combine(batch)

    def _combine(self, records: list[Record]) -> Record:
        values = [record.data for record in records]
        data = self.batch_fn(values) if self.batch_fn is not None else stack_or_type_error(values)
        return Record(records[-1].metadata.remove_record_key(), data)


def stack_or_type_error(values: list[Any], allocate: Allocator | None = None) -> Any:
    """``make_batch(values, allocate)``, with a structure mismatch raised as TypeError (Grain's
    type for ``BatchOperation``) instead of ValueError."""
    try:
        return make_batch(values, allocate)
    except GrainliteValueError as error:
        if not isinstance(error.__cause__, StructureMismatch):
            raise
        raise GrainliteTypeError(
            f"{_grains_words(values)}BatchOperation cannot batch these elements: {error} "
            "(BatchOperation raises TypeError here, as Grain's does)"
        ) from error.__cause__


def _grains_words(values: list[Any]) -> str:
    """Grain's sentence for records of different tree structures (code matches on it), quoting
    each record within bounds; empty when only the leaves' shapes differ."""
    odd = structure_outliers(values)
    if not odd:
        return ""
    listed = odd[:MAX_LISTED_POSITIONS]
    more = f" (and {len(odd) - len(listed)} more)" if len(odd) > len(listed) else ""
    structures = ", ".join(shown(values[position]) for position in listed)
    return (
        f"Record structures do not match. Record at position 0 has structure "
        f"{shown(values[0])}, while records at positions {listed}{more} have structures "
        f"[{structures}]. "
    )


_KINDS: dict[type, str] = {
    MapOperation: "map",
    RandomMapOperation: "random_map",
    FilterOperation: "filter",
    BatchOperation: "batch",
}
_REPLACEMENTS = {
    "map": "grainlite.MapTransform",
    "random_map": "grainlite.RandomMapTransform",
    "filter": "grainlite.FilterTransform",
    "batch": "grainlite.Batch",
}


def legacy_kind(op: Any) -> str | None:
    """The transform kind a legacy operation runs as, or None if ``op`` is not one.

    A subclass of one of the four classes counts, unless it defines its own ``__call__``: that is
    a custom Operation (see :func:`custom_operation_hint`).
    """
    for cls in type(op).__mro__:
        kind = _KINDS.get(cls)
        if kind is not None:
            return kind if type(op).__call__ is cls.__call__ else None
    return None


# Grain's own legacy operations (objects made by ``grain.python``, not grainlite) run as what they
# are: Operations over records. Grain's BatchOperation is not here: like Grain, the loader runs it
# as a Batch with its fields (it has batch_size, drop_remainder and batch_fn).
_GRAINS = frozenset({"MapOperation", "RandomMapOperation", "FilterOperation"})


def is_custom_operation(op: Any) -> bool:
    """Whether ``op`` runs as a custom operation: an instance of a subclass of ``Operation``
    (grainlite's or Grain's), of a legacy operation class with its own ``__call__``, or one of
    Grain's own legacy operations."""
    if isinstance(op, type) or legacy_kind(op) is not None:
        return False
    mro = type(op).__mro__
    if any(cls.__module__.split(".")[0] == "grain" and cls.__name__ in _GRAINS for cls in mro):
        return True
    return any(cls in _KINDS for cls in mro) or any(
        cls.__name__ == "Operation" and cls.__module__.split(".")[0] in ("grain", "grainlite")
        for cls in mro[1:]
    )


def log_deprecation(op: Any, kind: str) -> None:
    """Logs the deprecation message for legacy operation ``op``, once per object.

    An exact BatchOperation logs nothing: Grain turns it into ``Batch`` without a message.
    """
    if type(op) is BatchOperation or getattr(op, _LOGGED, False):
        return
    object.__setattr__(op, _LOGGED, True)  # travels with the object to worker processes
    _LOGGER.error(
        "%s is deprecated (in Grain too); use %s instead.", type(op).__name__, _REPLACEMENTS[kind]
    )
