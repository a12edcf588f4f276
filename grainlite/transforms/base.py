"""The transform base classes users subclass, and ``classify``, which tells the loader what an
operation is.

Grain has two names for each class (``MapTransform`` in ``grain.python``, ``Map`` in
``grain.transforms``); here, as there, both names are the same class. Subclasses must be picklable
(they are sent to worker processes) and must not rely on shared mutable state.

``classify`` also accepts transforms written against other libraries, notably subclasses of
Grain's own classes, so code can switch to grainlite without rewriting its transforms: an object
is judged by our base classes first, then by the one method it defines.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np

from grainlite.errors import GrainliteTypeError
from grainlite.transforms.batch import Batch, validate_batch_size
from grainlite.transforms.kinds import METHODS
from grainlite.transforms.legacy import is_custom_operation, legacy_kind, log_deprecation

Kind = Literal["map", "random_map", "filter", "flat_map", "batch", "operation"]


class MapTransform(abc.ABC):
    """A 1:1 transform: each element is replaced by ``map(element)``."""

    @abc.abstractmethod
    def map(self, element: Any) -> Any:
        """Returns the transformed element."""


class RandomMapTransform(abc.ABC):
    """A 1:1 transform that draws random numbers from the generator the loader gives each record.

    The generator is derived from the sampler's seed and the record's index, so results repeat
    across runs and restores; it is None when the sampler has no seed (as in Grain).
    """

    @abc.abstractmethod
    def random_map(self, element: Any, rng: np.random.Generator | None) -> Any:
        """Returns the transformed element, drawing randomness only from ``rng``."""


class FilterTransform(abc.ABC):
    """Keeps the elements for which ``filter(element)`` is true and drops the others."""

    @abc.abstractmethod
    def filter(self, element: Any) -> bool:
        """Returns whether to keep ``element``."""


class FlatMapTransform(abc.ABC):
    """A 1:N transform: each element is replaced by the elements of ``flat_map(element)``.

    Attributes:
      max_fan_out: the most outputs one input may give. Subclasses set it as a class attribute;
        Grain numbers output ``j`` of input ``i`` as ``i * max_fan_out + j``.
    """

    max_fan_out: int

    @abc.abstractmethod
    def flat_map(self, element: Any) -> Sequence[Any]:
        """Returns the elements that replace ``element`` (possibly none)."""


class TfRandomMap(abc.ABC):
    """A random 1:1 transform by Grain's other spelling: ``np_random_map(element, rng)``.

    Grain's DataLoader treats it as a RandomMap: ``rng`` is the same per-record numpy generator
    (None when the sampler has no seed), so the results are those of Grain. It is not a subclass
    of RandomMapTransform (as in Grain); its ``random_map`` is what the loader calls.
    """

    @abc.abstractmethod
    def np_random_map(self, element: Any, rng: np.random.Generator | None) -> Any:
        """Returns the transformed element, drawing randomness only from ``rng``."""

    def random_map(self, element: Any, rng: np.random.Generator | None) -> Any:
        """Calls ``np_random_map``: the loader runs this class as a RandomMapTransform."""
        return self.np_random_map(element, rng)


class MapWithIndexTransform(abc.ABC):
    """A 1:1 transform of an element and its index: ``map_with_index(index, element)``.

    Users can define and subclass it as in Grain, but, as in Grain, the DataLoader refuses it (it
    passes elements, not indices): it belongs to Grain's Dataset API, not yet in grainlite.
    """

    @abc.abstractmethod
    def map_with_index(self, index: int, element: Any) -> Any:
        """Returns the transformed element."""


# Grain's names in the ``grain.transforms`` layout: the same classes, not subclasses.
Map = MapTransform
RandomMap = RandomMapTransform
Filter = FilterTransform
FlatMap = FlatMapTransform
MapWithIndex = MapWithIndexTransform

Transformation = (
    Batch | MapTransform | RandomMapTransform | TfRandomMap | FilterTransform | FlatMapTransform
)
"""Anything the DataLoader accepts in ``operations``."""

Transformations = Sequence[Transformation]
"""The ``operations`` of a DataLoader, applied in order."""

CLASS_KINDS: tuple[tuple[type, str], ...] = (
    (MapWithIndexTransform, "map_with_index"),
    (MapTransform, "map"),
    (RandomMapTransform, "random_map"),
    (TfRandomMap, "random_map"),
    (FilterTransform, "filter"),
    (FlatMapTransform, "flat_map"),
)
"""``(base class, kind)`` of the transform classes, in the order objects are tested; the method
table is :data:`grainlite.transforms.kinds.METHODS`. The DataLoader skips ``map_with_index``."""
_ACCEPTED = (
    "Accepted: Batch, or an instance of MapTransform (map), RandomMapTransform (random_map), "
    "FilterTransform (filter) or FlatMapTransform (flat_map), from grainlite or grain, or any "
    "object with exactly one of those methods."
)


def classify(op: Any) -> Kind:
    """Says which kind of operation ``op`` is, so the loader knows which method to call.

    Our own classes are recognised by ``isinstance``; Grain's legacy operations (``MapOperation``
    and the others of :mod:`grainlite.transforms.legacy`) run as the transform of the same kind
    and log a deprecation message the first time; an instance of a subclass of ``Operation``
    (grainlite's or Grain's) is a custom "operation", called with an iterator of records; other
    objects (such as subclasses of ``grain.python.MapTransform``) by the one transform method
    they have. An object with
    ``batch_size``, ``drop_remainder`` and ``batch_fn`` attributes (Grain's ``Batch``) is a batch.

    Args:
      op: one entry of a DataLoader's ``operations``.

    Returns:
      "map", "random_map", "filter", "flat_map", "batch" or "operation".

    Raises:
      GrainliteTypeError: ``op`` is none of these, or could be several; the message names the
        object, its type, the accepted kinds and, for known mistakes, the fix.
      GrainliteValueError: ``op`` is a batch whose ``batch_size`` is not positive.
    """
    if isinstance(op, Batch):
        return "batch"
    legacy = legacy_kind(op)  # MapOperation & co. run as the transform of the same kind
    if legacy is not None:
        log_deprecation(op, legacy)
        return cast(Kind, legacy)
    if is_custom_operation(op):  # Grain's Operation protocol: records in, records out
        return "operation"
    kinds = [
        kind for base, kind in CLASS_KINDS if kind != "map_with_index" and isinstance(op, base)
    ]
    if isinstance(op, type):  # its methods are there, unbound: the usual missing "()"
        raise _error(op, f"this is a class, not an instance; pass {op.__name__}() instead.")
    if not kinds:
        kinds = list(
            dict.fromkeys(
                kind
                for method, kind in METHODS
                if kind != "map_with_index" and _has_method(op, method)
            )
        )
    if len(kinds) == 1:
        return cast(Kind, kinds[0])
    if kinds:
        raise _error(op, f"it could be any of {kinds}; give it exactly one of those methods.")
    if all(hasattr(op, field) for field in ("batch_size", "drop_remainder", "batch_fn")):
        validate_batch_size(op.batch_size)
        return "batch"
    raise _error(op, _hint(op))


def _has_method(op: Any, name: str) -> bool:
    try:
        return callable(getattr(op, name))
    except Exception:  # a missing attribute, or a property that fails: not that kind
        return False


def _error(op: Any, detail: str) -> GrainliteTypeError:
    kind = type(op)
    return GrainliteTypeError(
        f"DataLoader operations must be transforms, got {op!r} of type "
        f"{kind.__module__}.{kind.__qualname__}: {detail} {_ACCEPTED}"
    )


def _hint(op: Any) -> str:
    if _has_method(op, "map_with_index"):
        return (
            "Grain's DataLoader does not support MapWithIndex transforms, and neither does "
            "grainlite's; use a MapTransform (the DataLoader passes elements, not indices), or "
            "MapDataset.map_with_index in Grain's Dataset API."
        )
    if callable(op):
        return (
            "plain functions are not supported; wrap the function in a MapTransform or "
            "FilterTransform subclass, or in MapOperation(fn) / FilterOperation(fn)."
        )
    return "it is not a transform."
